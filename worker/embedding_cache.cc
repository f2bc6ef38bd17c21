#include "worker/embedding_cache.h"

#include <algorithm>
#include <cstring>

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/metrics.h"
#include "common/partition.h"

namespace shardps {

struct EmbeddingCache::Metrics {
  explicit Metrics(const std::string& rank)
      : lookups(metrics::GetCounter("shardps_worker_cache_lookups_total",
                                    "Embedding keys of trained steps looked up in the cache.",
                                    {{"rank", rank}})),
        hits(metrics::GetCounter("shardps_worker_cache_hits_total",
                                 "Embedding rows served from the cache (rows not pulled).",
                                 {{"rank", rank}})),
        bytes_saved(metrics::GetCounter(
            "shardps_worker_cache_bytes_saved_total",
            "Pull payload bytes (keys and fp32 rows) the cache's hits did not move.",
            {{"rank", rank}})),
        state_bytes(metrics::GetCounter(
            "shardps_worker_cache_state_bytes_total",
            "Optimizer state bytes pulled only so that rows could be cached.", {{"rank", rank}})),
        staleness(metrics::GetCounter(
            "shardps_worker_cache_hit_staleness_clocks_total",
            "Sum over hits of the step minus the minimum clock the row was read at.",
            {{"rank", rank}})),
        evictions(metrics::GetCounter("shardps_worker_cache_evictions_total",
                                      "Rows evicted from the cache.", {{"rank", rank}})),
        clears(metrics::GetCounter(
            "shardps_worker_cache_clears_total",
            "Times the cache was emptied for a minimum clock lower than one seen before.",
            {{"rank", rank}})),
        rows(
            metrics::GetGauge("shardps_worker_cache_rows", "Rows in the cache.", {{"rank", rank}})),
        bytes(metrics::GetGauge("shardps_worker_cache_bytes",
                                "Bytes the cache holds (rows, state and bookkeeping).",
                                {{"rank", rank}})),
        staleness_max(metrics::GetGauge("shardps_worker_cache_hit_staleness_max_clocks",
                                        "Largest staleness of a hit so far, in clocks.",
                                        {{"rank", rank}})) {}
  prometheus::Counter& lookups;
  prometheus::Counter& hits;
  prometheus::Counter& bytes_saved;
  prometheus::Counter& state_bytes;
  prometheus::Counter& staleness;
  prometheus::Counter& evictions;
  prometheus::Counter& clears;
  prometheus::Gauge& rows;
  prometheus::Gauge& bytes;
  prometheus::Gauge& staleness_max;
};

absl::StatusOr<std::unique_ptr<EmbeddingCache>> EmbeddingCache::Create(
    const Options& options, const JobConfig& config,
    const std::vector<std::pair<uint32_t, uint32_t>>& tables) {
  std::vector<Table> out;
  for (const auto& [id, dim] : tables) {
    const TableConfig* tc = nullptr;
    for (const TableConfig& c : config.tables()) {
      if (c.id() == id) tc = &c;
    }
    if (tc == nullptr) return absl::FailedPreconditionError(absl::StrCat("no table id ", id));
    if (tc->kind() != TableConfig::DENSE && tc->admission().min_count() > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", tc->name(), " has admission: a pending key has no row and no state"));
    }
    auto optimizer = Optimizer::Create(tc->optimizer(), dim);
    if (!optimizer.ok()) return optimizer.status();
    Table t;
    t.dim = dim;
    t.state = static_cast<uint32_t>((*optimizer)->StateSize());
    t.optimizer = *std::move(optimizer);
    t.skip_nonfinite = tc->non_finite() == SKIP_AND_COUNT;
    out.push_back(std::move(t));
  }
  return std::make_unique<EmbeddingCache>(options, std::move(out));
}

EmbeddingCache::EmbeddingCache(const Options& options, std::vector<Table> tables)
    : options_([&] {
        Options o = options;
        if (o.max_rows == 0 && o.max_bytes == 0) o.max_bytes = kDefaultMaxBytes;
        return o;
      }()),
      tables_(std::move(tables)),
      metrics_(options.metrics_rank.empty() ? nullptr
                                            : std::make_unique<Metrics>(options.metrics_rank)),
      data_(tables_.size()) {
  // The sketch: 4 counters a key, about 4 a row the cache can hold.
  uint64_t smallest = UINT64_MAX;
  for (size_t t = 0; t < tables_.size(); ++t) smallest = std::min(smallest, RowBytes(t));
  uint64_t capacity = options_.max_rows ? options_.max_rows : UINT64_MAX;
  if (options_.max_bytes && !tables_.empty()) {
    capacity = std::min(capacity, options_.max_bytes / smallest);
  }
  capacity = std::clamp<uint64_t>(capacity, 1, uint64_t{1} << 22);
  // About 4 counters a row the cache can hold, at most 1 MiB a sketch row:
  // fewer lose hits in a small cache (bench/cache_policy_bench) and see
  // every key as seen before (saturated), which pulls state for all misses.
  sketch_width_ = 1024;
  while (sketch_width_ < 4 * capacity && sketch_width_ < (size_t{1} << 20)) sketch_width_ <<= 1;
  sample_ = 10 * capacity;
  sketch_.assign(4 * sketch_width_, 0);
}

EmbeddingCache::~EmbeddingCache() = default;

uint64_t EmbeddingCache::SketchKey(uint32_t t, uint64_t key) {
  return Mix64(key ^ Mix64(t + 0x9e3779b97f4a7c15ULL));
}

size_t EmbeddingCache::SketchSlot(uint64_t table_key, int row) const {
  // table_key is already mixed: its four 16-bit quarters, spread by odd
  // multipliers, index the four rows.
  const uint64_t h = (table_key >> (16 * row)) * (0x9e3779b97f4a7c15ULL | 1) ^ table_key;
  return row * sketch_width_ + (Mix64(h + row) & (sketch_width_ - 1));
}

int EmbeddingCache::CountAndEstimate(uint64_t table_key) {
  int before = 15;
  for (int r = 0; r < 4; ++r) {
    uint8_t& c = sketch_[SketchSlot(table_key, r)];
    before = std::min<int>(before, c);
    if (c < 15) ++c;
  }
  if (++counted_ >= sample_) {  // Aging: recent lookups count more.
    for (uint8_t& c : sketch_) c >>= 1;
    counted_ = 0;
  }
  return before;
}

int EmbeddingCache::Estimate(uint64_t table_key) const {
  int m = 15;
  for (int r = 0; r < 4; ++r) m = std::min<int>(m, sketch_[SketchSlot(table_key, r)]);
  return m;
}

bool EmbeddingCache::Fits(uint64_t extra_rows, uint64_t extra_bytes) const {
  if (options_.max_rows && rows_ + extra_rows > options_.max_rows) return false;
  if (options_.max_bytes && bytes_ + extra_bytes > options_.max_bytes) return false;
  return true;
}

void EmbeddingCache::Unlink(int32_t i) {
  Entry& e = entries_[i];
  (e.prev >= 0 ? entries_[e.prev].next : front_) = e.next;
  (e.next >= 0 ? entries_[e.next].prev : back_) = e.prev;
  e.prev = e.next = -1;
}

void EmbeddingCache::PushBack(int32_t i) {
  Entry& e = entries_[i];
  e.prev = back_;
  e.next = -1;
  (back_ >= 0 ? entries_[back_].next : front_) = i;
  back_ = i;
}

void EmbeddingCache::Evict(int32_t i) {
  Entry& e = entries_[i];
  Unlink(i);
  TableData& d = data_[e.table];
  d.index.erase(e.key);
  d.free_slots.push_back(e.slot);
  --rows_;
  bytes_ -= RowBytes(e.table);
  free_entries_.push_back(i);
}

bool EmbeddingCache::MakeRoom(uint32_t t, int estimate) {
  // A few victims at most: rows from the front that are pinned (hits of a
  // step in flight, rarely at the front since a hit moves a row back) are
  // passed over.
  for (int tries = 0; !Fits(1, RowBytes(t)); ++tries) {
    int32_t victim = front_;
    for (int skip = 0; victim >= 0 && Pinned(entries_[victim]) && skip < 8; ++skip) {
      victim = entries_[victim].next;
    }
    if (victim < 0 || Pinned(entries_[victim]) || tries >= 8) return false;
    const Entry& v = entries_[victim];
    if (!Stale(v) && estimate <= Estimate(SketchKey(v.table, v.key))) return false;
    Evict(victim);
    ++stats_.evictions;
    if (metrics_) metrics_->evictions.Increment();
  }
  return true;
}

void EmbeddingCache::ClearLocked() {
  for (TableData& d : data_) {
    d.index.clear();
    d.values.clear();
    d.free_slots.clear();
  }
  entries_.clear();
  free_entries_.clear();
  front_ = back_ = -1;
  rows_ = bytes_ = 0;
}

void EmbeddingCache::PlanStep(uint64_t step, std::optional<uint64_t> known_min,
                              absl::Span<const std::vector<uint64_t>> keys,
                              std::vector<std::vector<uint32_t>>* hit,
                              std::vector<std::vector<uint32_t>>* miss,
                              std::vector<std::vector<uint32_t>>* cold) {
  MutexLock lock(&mu_);
  if (known_min) {
    if (max_min_seen_ && *known_min < *max_min_seen_) {
      ClearLocked();
      ++stats_.clears;
      if (metrics_) metrics_->clears.Increment();
    }
    max_min_seen_ = known_min;
  }
  last_planned_ = std::max(last_planned_, step);
  hit->resize(keys.size());
  miss->resize(keys.size());
  if (cold != nullptr) cold->resize(keys.size());
  for (size_t t = 0; t < keys.size() && t < tables_.size(); ++t) {
    const TableData& d = data_[t];
    for (size_t i = 0; i < keys[t].size(); ++i) {
      const uint64_t key = keys[t][i];
      const bool seen =
          CountAndEstimate(SketchKey(static_cast<uint32_t>(t), key)) > 0 || cold == nullptr;
      const auto it = d.index.find(key);
      if (it != d.index.end() && entries_[it->second].read_clock + options_.staleness >= step) {
        Entry& e = entries_[it->second];
        e.pin = std::max<int64_t>(e.pin, static_cast<int64_t>(step));
        Unlink(it->second);
        PushBack(it->second);
        (*hit)[t].push_back(static_cast<uint32_t>(i));
      } else if (seen || it != d.index.end()) {
        (*miss)[t].push_back(static_cast<uint32_t>(i));
      } else {
        (*cold)[t].push_back(static_cast<uint32_t>(i));
      }
    }
  }
}

absl::Status EmbeddingCache::Fill(uint64_t step, absl::Span<const std::vector<uint64_t>> keys,
                                  const std::vector<std::vector<uint32_t>>& hit,
                                  std::vector<std::vector<float>>* rows) {
  MutexLock lock(&mu_);
  uint64_t lookups = 0, hits = 0, saved = 0, staleness = 0, staleness_max = 0;
  for (size_t t = 0; t < keys.size() && t < tables_.size(); ++t) {
    lookups += keys[t].size();
    if (t >= hit.size()) continue;
    const uint32_t dim = tables_[t].dim;
    for (uint32_t i : hit[t]) {
      const auto it = data_[t].index.find(keys[t][i]);
      if (it == data_[t].index.end()) {
        return absl::InternalError(absl::StrCat("embedding cache: row ", keys[t][i],
                                                " of a planned hit of step ", step, " is gone"));
      }
      const Entry& e = entries_[it->second];
      std::memcpy((*rows)[t].data() + size_t{i} * dim, Row(e), dim * sizeof(float));
      const uint64_t age = step > e.read_clock ? step - e.read_clock : 0;
      staleness += age;
      staleness_max = std::max(staleness_max, age);
      ++hits;
      saved += sizeof(uint64_t) + uint64_t{4} * dim;
    }
  }
  stats_.lookups += lookups;
  stats_.hits += hits;
  stats_.bytes_saved += saved;
  stats_.staleness_sum += staleness;
  stats_.staleness_max = std::max(stats_.staleness_max, staleness_max);
  if (metrics_) {
    metrics_->lookups.Increment(static_cast<double>(lookups));
    metrics_->hits.Increment(static_cast<double>(hits));
    metrics_->bytes_saved.Increment(static_cast<double>(saved));
    metrics_->staleness.Increment(static_cast<double>(staleness));
    metrics_->staleness_max.Set(static_cast<double>(stats_.staleness_max));
  }
  return absl::OkStatus();
}

void EmbeddingCache::Release(uint64_t step) {
  MutexLock lock(&mu_);
  released_ = std::max<int64_t>(released_, static_cast<int64_t>(step));
}

void EmbeddingCache::Insert(size_t t, const uint64_t* keys, size_t n, const float* rows,
                            uint64_t read_clock) {
  MutexLock lock(&mu_);
  TableData& d = data_[t];
  const uint32_t w = width(t);
  const uint32_t table = static_cast<uint32_t>(t);
  for (size_t i = 0; i < n; ++i) {
    const float* row = rows + i * w;
    auto it = d.index.find(keys[i]);
    int32_t at;
    if (it != d.index.end()) {
      at = static_cast<int32_t>(it->second);
      Unlink(at);
    } else {
      if (!MakeRoom(table, Estimate(SketchKey(table, keys[i])))) {
        ++stats_.declined;
        continue;
      }
      if (free_entries_.empty()) {
        at = static_cast<int32_t>(entries_.size());
        entries_.emplace_back();
      } else {
        at = free_entries_.back();
        free_entries_.pop_back();
      }
      Entry& e = entries_[at];
      e = Entry();
      e.key = keys[i];
      e.table = table;
      if (d.free_slots.empty()) {
        e.slot = static_cast<uint32_t>(d.values.size() / w);
        d.values.resize(d.values.size() + w);
      } else {
        e.slot = d.free_slots.back();
        d.free_slots.pop_back();
      }
      d.index.emplace(keys[i], static_cast<uint32_t>(at));
      ++rows_;
      bytes_ += RowBytes(table);
    }
    Entry& e = entries_[at];
    e.read_clock = std::max(e.read_clock, read_clock);
    std::memcpy(Row(e), row, w * sizeof(float));
    PushBack(at);
    ++stats_.inserts;
  }
  if (metrics_) {
    metrics_->rows.Set(static_cast<double>(rows_));
    metrics_->bytes.Set(static_cast<double>(bytes_));
  }
}

void EmbeddingCache::ApplyPush(size_t t, const uint64_t* keys, size_t n, const float* grads,
                               float lr_scale) {
  MutexLock lock(&mu_);
  const Table& table = tables_[t];
  const TableData& d = data_[t];
  for (size_t i = 0; i < n; ++i) {
    const auto it = d.index.find(keys[i]);
    if (it == d.index.end()) continue;
    const float* grad = grads + i * table.dim;
    if (table.skip_nonfinite && !AllFinite(grad, table.dim)) continue;  // As the server.
    float* row = Row(entries_[it->second]);
    table.optimizer->Update(row, row + table.dim, grad, lr_scale);
  }
}

void EmbeddingCache::NoteStatePulled(uint64_t bytes) {
  MutexLock lock(&mu_);
  stats_.state_bytes += bytes;
  if (metrics_) metrics_->state_bytes.Increment(static_cast<double>(bytes));
}

bool EmbeddingCache::Peek(size_t t, uint64_t key, std::vector<float>* row,
                          uint64_t* read_clock) const {
  MutexLock lock(&mu_);
  const auto it = data_[t].index.find(key);
  if (it == data_[t].index.end()) return false;
  const Entry& e = entries_[it->second];
  const float* r = data_[t].values.data() + size_t{e.slot} * width(t);
  row->assign(r, r + width(t));
  *read_clock = e.read_clock;
  return true;
}

EmbeddingCache::Stats EmbeddingCache::stats() const {
  MutexLock lock(&mu_);
  Stats s = stats_;
  s.rows = rows_;
  s.bytes = bytes_;
  return s;
}

}  // namespace shardps

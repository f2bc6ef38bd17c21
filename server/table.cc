#include "server/table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "common/codec.h"
#include "common/partition.h"
#include "server/row_index.h"

namespace shardps {
namespace {

constexpr size_t kMetaFloats = 3;  // last clock (2 words), last seconds.
constexpr size_t kBlockBytes = 64 << 10;

uint32_t BlockLog2(size_t stride) {
  uint32_t log2 = 0;
  while ((size_t{2} << log2) * stride * sizeof(float) <= kBlockBytes) ++log2;
  return log2;
}

}  // namespace

// Hands out blocks from 2 MiB-aligned chunks marked MADV_HUGEPAGE. Blocks
// live as long as the arena (freed rows are reused within their shard).
//
// A new chunk's first touch costs a page fault that zeroes 2 MiB: in a
// table that keeps gaining rows (new ids all through training) that was 13%
// of the server's time on workload W, paid inside pulls. So once a table has
// taken its first chunk, the arena keeps the next one ready: a background
// task allocates it and touches its pages while the current chunk fills up.
// This costs one extra chunk (2 MiB) of memory per growing table.
class Table::BlockArena {
 public:
  static constexpr size_t kChunkBytes = 2 << 20;

  ~BlockArena() {
    if (next_.valid()) std::free(next_.get());
  }

  float* Allocate(size_t bytes) {
    bytes = (bytes + 63) & ~size_t{63};
    MutexLock lock(&mu_);
    if (chunks_.empty() || used_ + bytes > chunk_size_) {
      chunk_size_ = std::max(kChunkBytes, (bytes + kChunkBytes - 1) /
                                              kChunkBytes * kChunkBytes);
      char* chunk;
      if (chunk_size_ == kChunkBytes && next_.valid()) {
        chunk = next_.get();  // Usually faulted in already.
      } else {
        chunk = NewChunk(chunk_size_, /*touch=*/false);
      }
      chunks_.emplace_back(chunk);
      used_ = 0;
      allocated_ += chunk_size_;
      if (!next_.valid()) {
        next_ = std::async(std::launch::async,
                           [] { return NewChunk(kChunkBytes, /*touch=*/true); });
      }
    }
    float* block = reinterpret_cast<float*>(chunks_.back().get() + used_);
    used_ += bytes;
    return block;
  }
  uint64_t allocated_bytes() const {
    MutexLock lock(&mu_);
    return allocated_;
  }

 private:
  struct Free {
    void operator()(char* p) const { std::free(p); }
  };
  static char* NewChunk(size_t bytes, bool touch) {
    void* chunk = std::aligned_alloc(kChunkBytes, bytes);
    CHECK(chunk != nullptr) << "out of memory for " << bytes << " bytes";
    madvise(chunk, bytes, MADV_HUGEPAGE);  // Advice; failure is fine.
    if (touch) {
      volatile char* p = static_cast<char*>(chunk);
      for (size_t off = 0; off < bytes; off += 4096) p[off] = 0;
    }
    return static_cast<char*>(chunk);
  }

  mutable Mutex mu_;
  std::vector<std::unique_ptr<char, Free>> chunks_ ABSL_GUARDED_BY(mu_);
  size_t chunk_size_ ABSL_GUARDED_BY(mu_) = 0;
  size_t used_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t allocated_ ABSL_GUARDED_BY(mu_) = 0;
  std::future<char*> next_ ABSL_GUARDED_BY(mu_);  // The chunk after this one.
};

struct Table::Shard {
  mutable Mutex mu;
  RowIndex index ABSL_GUARDED_BY(mu);  // Key -> slot, generation.
  absl::flat_hash_map<uint64_t, Pending> pending ABSL_GUARDED_BY(mu);
  std::vector<float*> blocks ABSL_GUARDED_BY(mu);  // Owned by the arena.
  std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
  uint32_t next_slot ABSL_GUARDED_BY(mu) = 0;
  // Keys dropped by Evict(), with the generation they were dropped in.
  std::vector<std::pair<uint64_t, uint32_t>> deleted ABSL_GUARDED_BY(mu);
};

absl::StatusOr<std::unique_ptr<Table>> Table::Create(
    const TableConfig& config, uint32_t dense_chunk_size, HelperPool* helpers) {
  const bool dense = config.kind() == TableConfig::DENSE;
  const uint32_t dim = dense ? dense_chunk_size : config.dim();
  if (dim == 0) {
    return absl::InvalidArgumentError("table " + config.name() +
                                      ": row dimension must be > 0");
  }
  auto optimizer = Optimizer::Create(config.optimizer(), dim);
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError("table " + config.name() + ": " +
                                      std::string(optimizer.status().message()));
  }
  return std::unique_ptr<Table>(new Table(config, dim, std::move(*optimizer), helpers));
}

Table::Table(const TableConfig& config, uint32_t dim,
             std::unique_ptr<Optimizer> optimizer, HelperPool* helpers)
    : config_(config),
      dim_(dim),
      optimizer_(std::move(optimizer)),
      initializer_(config.init(), config.seed(), dim),
      state_size_(optimizer_->StateSize()),
      stride_(dim + state_size_ +
              ((config.eviction().ttl_clocks() > 0 ||
                config.eviction().ttl_seconds() > 0) &&
                       config.kind() != TableConfig::DENSE
                   ? kMetaFloats
                   : 0)),
      eviction_(stride_ > dim + state_size_),
      min_count_(config.kind() == TableConfig::DENSE
                     ? 1
                     : config.admission().min_count()),
      num_chunks_(config.kind() == TableConfig::DENSE
                      ? (config.dense_size() + dim - 1) / dim
                      : 0),
      rows_per_block_log2_(BlockLog2(stride_)),
      helpers_(helpers),
      arena_(std::make_unique<BlockArena>()),
      shards_(std::make_unique<Shard[]>(kNumShards)) {}

Table::~Table() = default;

uint32_t Table::ShardIndex(uint64_t key) const {
  return (MixKey(config_.id(), key) >> 32) & (kNumShards - 1);
}

Table::Shard& Table::ShardOf(uint64_t key) const {
  return shards_[ShardIndex(key)];
}

uint32_t Table::NowSeconds() const {
  if (config_.eviction().ttl_seconds() == 0) return 0;
  return static_cast<uint32_t>(absl::ToUnixSeconds(absl::Now()));
}

void Table::Stamp(float* row, uint32_t now_seconds) const {
  if (!eviction_) return;
  const uint64_t clock = clock_.load(std::memory_order_relaxed);
  float* meta = row + dim_ + state_size_;
  std::memcpy(meta, &clock, sizeof clock);
  std::memcpy(meta + 2, &now_seconds, sizeof now_seconds);
}

float* Table::RowAt(const Shard& shard, uint32_t slot) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Caller holds shard.mu.
  return shard.blocks[slot >> rows_per_block_log2_] +
         (slot & ((1u << rows_per_block_log2_) - 1)) * stride_;
}

// A batch's keys grouped by stripe (a stable counting sort of their
// indices), so that each stripe's lock is taken once per batch and the
// stripe's hash slots and rows can be prefetched together. Per thread, so
// the hot path allocates only when a batch is larger than any before.
struct Table::Batch {
  std::vector<uint8_t> shard_of;  // Of keys[i].
  std::vector<uint32_t> order;    // Key indices, stripe by stripe.
  std::vector<float*> rows;       // Row of keys[order[j]] (nullptr: none).
  uint32_t start[kNumShards + 1];  // Stripe s: order[start[s], start[s+1]).
};

Table::Batch& Table::GroupByShard(const uint64_t* keys, size_t n) const {
  static_assert(kNumShards <= 256, "shard_of holds a byte");
  thread_local Batch batch;
  Batch& b = batch;
  if (b.order.size() < n) {
    b.shard_of.resize(n);
    b.order.resize(n);
    b.rows.resize(n);
  }
  uint32_t count[kNumShards] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = ShardIndex(keys[i]);
    b.shard_of[i] = static_cast<uint8_t>(s);
    ++count[s];
  }
  b.start[0] = 0;
  for (int s = 0; s < kNumShards; ++s) b.start[s + 1] = b.start[s] + count[s];
  uint32_t next[kNumShards];
  std::memcpy(next, b.start, sizeof next);
  for (size_t i = 0; i < n; ++i) b.order[next[b.shard_of[i]]++] = static_cast<uint32_t>(i);
  return b;
}

void Table::PrefetchRow(const float* row, bool write) const {
  const char* p = reinterpret_cast<const char*>(row);
  const size_t bytes = (dim_ + (write ? state_size_ : 0)) * sizeof(float);
  for (size_t off = 0; off < bytes; off += 64) {
    if (write) {
      __builtin_prefetch(p + off, 1);
    } else {
      __builtin_prefetch(p + off, 0);
    }
  }
}

float* Table::NewRow(Shard& shard, uint64_t key, const float* values)
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Caller holds shard.mu.
  uint32_t slot;
  if (!shard.free_slots.empty()) {
    slot = shard.free_slots.back();
    shard.free_slots.pop_back();
  } else {
    slot = shard.next_slot++;
    if ((slot >> rows_per_block_log2_) >= shard.blocks.size()) {
      shard.blocks.push_back(arena_->Allocate(
          (stride_ << rows_per_block_log2_) * sizeof(float)));
    }
  }
  shard.index.Insert(key, slot, CurrentGeneration());
  float* row = RowAt(shard, slot);
  if (values != nullptr) {
    std::memcpy(row, values, dim_ * sizeof(float));
  } else {
    initializer_.Fill(key, row);
  }
  optimizer_->InitState(row + dim_);
  admitted_.fetch_add(1, std::memory_order_relaxed);
  return row;
}

float* Table::TouchRow(Shard& shard, uint64_t key, bool push,
                       uint32_t now_seconds) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (RowIndex::Bucket* entry = shard.index.Find(key)) {
    float* row = RowAt(shard, entry->slot);
    Stamp(row, now_seconds);
    // A push updates the row; with eviction on, a pull changes its stamp.
    if (push || eviction_) entry->generation = CurrentGeneration();
    return row;
  }
  if (initializer_.kind() == InitializerConfig::MODEL && !push) {
    return nullptr;
  }
  if (min_count_ > 1) {
    Pending& p = shard.pending[key];
    p.last_clock = clock_.load(std::memory_order_relaxed);
    p.last_seconds = now_seconds;
    if (++p.count < min_count_) return nullptr;
    shard.pending.erase(key);
  }
  float* row = NewRow(shard, key, nullptr);
  Stamp(row, now_seconds);
  return row;
}

// Pull and Push visit the batch stripe by stripe: under the stripe's lock,
// prefetch the hash slots of all its keys, look them up (the misses overlap)
// and prefetch their rows, then copy or update the rows. Keys of one stripe
// keep their batch order, so admission counts of repeated pull keys are
// those of a key-by-key pass.
void Table::ForStripes(size_t n, absl::FunctionRef<void(int begin, int end)> fn) const {
  constexpr int kChunks = 16, kStripes = kNumShards / kChunks;
  if (helpers_ == nullptr || n < kParallelMinKeys) {
    fn(0, kNumShards);
    return;
  }
  helpers_->ParallelFor(kChunks, [&fn](int c) { fn(c * kStripes, (c + 1) * kStripes); });
}

void Table::Pull(const uint64_t* keys, size_t n, bool train, float* out) {
  PullEncoded(keys, n, train, Encoding::kFp32, reinterpret_cast<char*>(out));
}

void Table::PullEncoded(const uint64_t* keys, size_t n, bool train,
                        Encoding encoding, char* out) {
  pulls_.fetch_add(1, std::memory_order_relaxed);
  const size_t row_bytes = dim_ * BytesPerValue(encoding);
  const uint32_t now_seconds = train ? NowSeconds() : 0;
  Batch& b = GroupByShard(keys, n);
  ForStripes(n, [&](int first, int last) {
    for (int s = first; s < last; ++s) {
      const uint32_t begin = b.start[s], end = b.start[s + 1];
      if (begin == end) continue;
      Shard& shard = shards_[s];
      MutexLock lock(&shard.mu);
      for (uint32_t j = begin; j < end; ++j) {
        shard.index.Prefetch(keys[b.order[j]]);
      }
      for (uint32_t j = begin; j < end; ++j) {
        const uint64_t key = keys[b.order[j]];
        float* row = nullptr;
        if (train) {
          row = TouchRow(shard, key, /*push=*/false, now_seconds);
        } else {
          const RowIndex::Bucket* entry = shard.index.Find(key);
          if (entry != nullptr) row = RowAt(shard, entry->slot);
        }
        if (row != nullptr) PrefetchRow(row, /*write=*/false);
        b.rows[j] = row;
      }
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t i = b.order[j];
        const float* src = b.rows[j];
        if (src == nullptr) {  // No row (yet): the initial value.
          thread_local std::vector<float> initial;
          initial.resize(dim_);
          initializer_.Fill(keys[i], initial.data());
          src = initial.data();
        }
        EncodeValuesTo(src, dim_, encoding, out + i * row_bytes);
      }
    }
  });
}

PushCounts Table::Push(const uint64_t* keys, size_t n, const float* grads,
                       float lr_scale) {
  pushes_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t now_seconds = NowSeconds();
  const bool skip_nonfinite = config_.non_finite() == SKIP_AND_COUNT;
  Batch& b = GroupByShard(keys, n);
  std::atomic<uint64_t> applied{0}, pending{0}, skipped{0};
  ForStripes(n, [&](int first, int last) {
    PushCounts counts;
    for (int s = first; s < last; ++s) {
      const uint32_t begin = b.start[s], end = b.start[s + 1];
      if (begin == end) continue;
      Shard& shard = shards_[s];
      MutexLock lock(&shard.mu);
      for (uint32_t j = begin; j < end; ++j) {
        shard.index.Prefetch(keys[b.order[j]]);
      }
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t i = b.order[j];
        b.rows[j] = nullptr;
        if (skip_nonfinite && !AllFinite(grads + size_t{i} * dim_, dim_)) {
          ++counts.skipped_nonfinite;  // Only reached under SKIP_AND_COUNT.
          continue;
        }
        float* row = TouchRow(shard, keys[i], /*push=*/true, now_seconds);
        if (row == nullptr) {
          ++counts.pending;
          continue;
        }
        PrefetchRow(row, /*write=*/true);
        b.rows[j] = row;
      }
      for (uint32_t j = begin; j < end; ++j) {
        float* row = b.rows[j];
        if (row == nullptr) continue;
        optimizer_->Update(row, row + dim_, grads + size_t{b.order[j]} * dim_, lr_scale);
        ++counts.applied;
      }
    }
    applied.fetch_add(counts.applied, std::memory_order_relaxed);
    pending.fetch_add(counts.pending, std::memory_order_relaxed);
    skipped.fetch_add(counts.skipped_nonfinite, std::memory_order_relaxed);
  });
  PushCounts counts;
  counts.applied = applied.load(std::memory_order_relaxed);
  counts.pending = pending.load(std::memory_order_relaxed);
  counts.skipped_nonfinite = skipped.load(std::memory_order_relaxed);
  skipped_nonfinite_.fetch_add(counts.skipped_nonfinite,
                               std::memory_order_relaxed);
  return counts;
}

bool Table::FindDuplicateKey(const uint64_t* keys, size_t n, uint64_t* dup) const {
  // Equal keys share a stripe, so only keys of one stripe are compared:
  // pairwise while a stripe's group is small (a batch of thousands has
  // about n / 256 keys a stripe), sorted beyond that.
  constexpr uint32_t kPairwise = 32;
  thread_local std::vector<uint64_t> sorted;
  Batch& b = GroupByShard(keys, n);
  for (int s = 0; s < kNumShards; ++s) {
    const uint32_t begin = b.start[s], end = b.start[s + 1];
    if (end - begin <= kPairwise) {
      for (uint32_t j = begin; j < end; ++j) {
        const uint64_t key = keys[b.order[j]];
        for (uint32_t k = j + 1; k < end; ++k) {
          if (keys[b.order[k]] == key) {
            *dup = key;
            return true;
          }
        }
      }
      continue;
    }
    sorted.clear();
    for (uint32_t j = begin; j < end; ++j) sorted.push_back(keys[b.order[j]]);
    std::sort(sorted.begin(), sorted.end());
    auto it = std::adjacent_find(sorted.begin(), sorted.end());
    if (it != sorted.end()) {
      *dup = *it;
      return true;
    }
  }
  return false;
}

uint64_t Table::InitRows(const uint64_t* keys, size_t n, const float* values) {
  uint64_t written = 0;
  const uint32_t now_seconds = NowSeconds();
  for (size_t i = 0; i < n; ++i) {
    Shard& shard = ShardOf(keys[i]);
    MutexLock lock(&shard.mu);
    if (shard.index.Contains(keys[i])) continue;
    shard.pending.erase(keys[i]);
    Stamp(NewRow(shard, keys[i], values + i * dim_), now_seconds);
    ++written;
  }
  return written;
}

void Table::SetClock(uint64_t clock) {
  uint64_t seen = clock_.load(std::memory_order_relaxed);
  while (clock > seen &&
         !clock_.compare_exchange_weak(seen, clock, std::memory_order_relaxed)) {
  }
}

void Table::ResetClock(uint64_t clock) {
  clock_.store(clock, std::memory_order_relaxed);
}

uint64_t Table::Evict(uint64_t now_clock, int64_t now_seconds) {
  const uint64_t ttl_clocks = config_.eviction().ttl_clocks();
  const uint64_t ttl_seconds = config_.eviction().ttl_seconds();
  if (!eviction_) return 0;
  auto expired = [&](uint64_t last_clock, uint32_t last_seconds) {
    return (ttl_clocks > 0 && now_clock >= last_clock &&
            now_clock - last_clock >= ttl_clocks) ||
           (ttl_seconds > 0 && now_seconds >= last_seconds &&
            static_cast<uint64_t>(now_seconds - last_seconds) >= ttl_seconds);
  };
  uint64_t dropped = 0;
  for (int s = 0; s < kNumShards; ++s) {
    Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    std::vector<uint64_t> drop;
    shard.index.ForEach([&](const RowIndex::Bucket& entry) {
      const float* meta = RowAt(shard, entry.slot) + dim_ + state_size_;
      uint64_t last_clock;
      uint32_t last_seconds;
      std::memcpy(&last_clock, meta, sizeof last_clock);
      std::memcpy(&last_seconds, meta + 2, sizeof last_seconds);
      if (expired(last_clock, last_seconds)) drop.push_back(entry.key);
    });
    const uint32_t generation = generation_.load(std::memory_order_relaxed);
    for (uint64_t key : drop) {
      shard.deleted.emplace_back(key, generation);
      shard.free_slots.push_back(shard.index.Find(key)->slot);
      shard.index.Erase(key);
    }
    dropped += drop.size();
    for (auto it = shard.pending.begin(); it != shard.pending.end();) {
      if (expired(it->second.last_clock, it->second.last_seconds)) {
        shard.pending.erase(it++);
      } else {
        ++it;
      }
    }
  }
  evicted_.fetch_add(dropped, std::memory_order_relaxed);
  return dropped;
}

void Table::ForEachRow(
    const std::function<void(uint64_t key, const float* payload)>& visit)
    const {
  for (int s = 0; s < kNumShards; ++s) {
    const Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    shard.index.ForEach([&](const RowIndex::Bucket& entry) {
      visit(entry.key, RowAt(shard, entry.slot));
    });
  }
}

void Table::RestoreRow(uint64_t key, const float* payload) {
  Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  shard.pending.erase(key);
  float* row;
  if (RowIndex::Bucket* entry = shard.index.Find(key)) {
    row = RowAt(shard, entry->slot);
    entry->generation = CurrentGeneration();
  } else {
    row = NewRow(shard, key, payload);
  }
  std::memcpy(row, payload, stride_ * sizeof(float));
}

void Table::Clear() {
  for (int s = 0; s < kNumShards; ++s) {
    Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    shard.index.ForEach([&](const RowIndex::Bucket& entry) {
      shard.free_slots.push_back(entry.slot);
    });
    shard.index.Clear();
    shard.pending.clear();
    shard.deleted.clear();
    shard.deleted.shrink_to_fit();
  }
}

uint32_t Table::AdvanceGeneration() {
  return generation_.fetch_add(1, std::memory_order_relaxed);
}

void Table::ForEachChangedRow(
    uint32_t since,
    const std::function<void(uint64_t key, const float* payload)>& visit,
    const std::function<void(uint64_t key)>& deleted) const {
  absl::flat_hash_set<uint64_t> seen;
  for (int s = 0; s < kNumShards; ++s) {
    const Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    seen.clear();
    for (const auto& [key, gen] : shard.deleted) {
      // A key evicted and created again is written as a row instead.
      if (gen > since && !shard.index.Contains(key) && seen.insert(key).second) {
        deleted(key);
      }
    }
    shard.index.ForEach([&](const RowIndex::Bucket& entry) {
      if (entry.generation > since) visit(entry.key, RowAt(shard, entry.slot));
    });
  }
}

void Table::TrimDeletions(uint32_t upto) {
  for (int s = 0; s < kNumShards; ++s) {
    Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    auto& log = shard.deleted;
    log.erase(std::remove_if(log.begin(), log.end(),
                             [upto](const std::pair<uint64_t, uint32_t>& d) {
                               return d.second <= upto;
                             }),
              log.end());
  }
}

bool Table::DeleteRow(uint64_t key) {
  Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  shard.pending.erase(key);
  const RowIndex::Bucket* entry = shard.index.Find(key);
  if (entry == nullptr) return false;
  shard.free_slots.push_back(entry->slot);
  shard.index.Erase(key);
  return true;
}

uint64_t Table::LoggedDeletions() const {
  uint64_t n = 0;
  for (int s = 0; s < kNumShards; ++s) {
    const Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    n += shard.deleted.size();
  }
  return n;
}

TableCounters Table::Counters() const {
  TableCounters c;
  for (int s = 0; s < kNumShards; ++s) {
    const Shard& shard = shards_[s];
    MutexLock lock(&shard.mu);
    c.live_rows += shard.index.size();
    c.pending_rows += shard.pending.size();
    c.bytes += shard.index.MemoryBytes();
    c.bytes += shard.pending.capacity() * (sizeof(std::pair<uint64_t, Pending>) + 1);
    c.bytes += shard.free_slots.capacity() * sizeof(uint32_t);
    c.bytes += shard.deleted.capacity() * sizeof(shard.deleted[0]);
  }
  c.bytes += arena_->allocated_bytes();
  c.bytes_per_row = c.live_rows > 0 ? c.bytes / c.live_rows : 0;
  c.admitted_rows = admitted_.load(std::memory_order_relaxed);
  c.evicted_rows = evicted_.load(std::memory_order_relaxed);
  c.rows_skipped_nonfinite = skipped_nonfinite_.load(std::memory_order_relaxed);
  c.pulls = pulls_.load(std::memory_order_relaxed);
  c.pushes = pushes_.load(std::memory_order_relaxed);
  return c;
}

void Table::InitialRow(uint64_t key, float* out) const {
  initializer_.Fill(key, out);
}

bool Table::Contains(uint64_t key) const {
  const Shard& shard = ShardOf(key);
  MutexLock lock(&shard.mu);
  return shard.index.Contains(key);
}

}  // namespace shardps

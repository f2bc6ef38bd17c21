#include "server/table.h"

#include <sys/mman.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <future>

#include "absl/container/flat_hash_set.h"
#include "absl/time/clock.h"
#include "common/codec.h"
#include "common/partition.h"
#include "glog/logging.h"
#include "server/request_limits.h"
#include "server/row_index.h"
#include "server/table_internal.h"

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

absl::StatusOr<std::unique_ptr<Table>> Table::Create(const TableConfig& config,
                                                     uint32_t dense_chunk_size, HelperPool* helpers,
                                                     uint32_t num_partitions) {
  const bool dense = config.kind() == TableConfig::DENSE;
  const uint32_t dim = dense ? dense_chunk_size : config.dim();
  if (dim == 0) {
    return absl::InvalidArgumentError("table " + config.name() + ": row dimension must be > 0");
  }
  if (num_partitions == 0 && !dense && config.admission().min_count() > 1) {
    return absl::InvalidArgumentError("table " + config.name() +
                                      ": admission needs the job's partitions (0 given)");
  }
  auto optimizer = Optimizer::Create(config.optimizer(), dim);
  if (!optimizer.ok()) {
    return absl::InvalidArgumentError("table " + config.name() + ": " +
                                      std::string(optimizer.status().message()));
  }
  return std::unique_ptr<Table>(
      new Table(config, dim, std::move(*optimizer), helpers, num_partitions));
}

Table::Table(const TableConfig& config, uint32_t dim, std::unique_ptr<Optimizer> optimizer,
             HelperPool* helpers, uint32_t num_partitions)
    : config_(config),
      dim_(dim),
      optimizer_(std::move(optimizer)),
      initializer_(config.init(), config.seed(), dim),
      state_size_(optimizer_->StateSize()),
      stride_(dim + state_size_ +
              ((config.eviction().ttl_clocks() > 0 || config.eviction().ttl_seconds() > 0) &&
                       config.kind() != TableConfig::DENSE
                   ? kMetaFloats
                   : 0)),
      eviction_(stride_ > dim + state_size_),
      min_count_(config.kind() == TableConfig::DENSE ? 1 : config.admission().min_count()),
      num_partitions_(num_partitions),
      shared_rows_(min_count_ > 1 && config.admission().unadmitted() == AdmissionConfig::SHARED),
      num_chunks_(config.kind() == TableConfig::DENSE ? (config.dense_size() + dim - 1) / dim : 0),
      max_gradient_bits_(MagnitudeBits(config.max_gradient_abs() > 0 ? config.max_gradient_abs()
                                                                     : kDefaultMaxGradientAbs)),
      rows_per_block_log2_(BlockLog2(stride_)),
      helpers_(helpers),
      arena_(std::make_unique<BlockArena>()),
      stripes_(std::make_unique<Stripe[]>(kNumStripes)),
      shared_(config.id(), num_partitions, dim, stride_, optimizer_.get(), &generation_) {
  if (shared_rows_) shared_.Reset();
}

Table::~Table() = default;

uint32_t Table::StripeIndex(uint64_t key) const {
  return (MixKey(config_.id(), key) >> 32) & (kNumStripes - 1);
}

Table::Stripe& Table::StripeOf(uint64_t key) const { return stripes_[StripeIndex(key)]; }

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

float* Table::RowAt(const Stripe& stripe, uint32_t slot) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Caller holds stripe.mu.
  return stripe.blocks[slot >> rows_per_block_log2_] +
         (slot & ((1u << rows_per_block_log2_) - 1)) * stride_;
}

Table::Batch& Table::GroupByStripe(const uint64_t* keys, size_t n) const {
  static_assert(kNumStripes <= 256, "stripe_of holds a byte");
  thread_local Batch batch;
  Batch& b = batch;
  if (b.order.size() < n) {
    b.stripe_of.resize(n);
    b.order.resize(n);
    b.rows.resize(n);
    b.to_shared.resize(n);
  }
  uint32_t count[kNumStripes] = {};
  for (size_t i = 0; i < n; ++i) {
    const uint32_t s = StripeIndex(keys[i]);
    b.stripe_of[i] = static_cast<uint8_t>(s);
    ++count[s];
  }
  b.start[0] = 0;
  for (int s = 0; s < kNumStripes; ++s) b.start[s + 1] = b.start[s] + count[s];
  uint32_t next[kNumStripes];
  std::memcpy(next, b.start, sizeof next);
  for (size_t i = 0; i < n; ++i) b.order[next[b.stripe_of[i]]++] = static_cast<uint32_t>(i);
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

float* Table::NewRow(Stripe& stripe, uint64_t key, const float* values) {
  float* row = NewSlot(stripe, key);
  if (values != nullptr) {
    std::memcpy(row, values, dim_ * sizeof(float));
  } else {
    initializer_.Fill(key, row);
  }
  optimizer_->InitState(row + dim_);
  admitted_.fetch_add(1, std::memory_order_relaxed);
  return row;
}

float* Table::NewSlot(Stripe& stripe,
                      uint64_t key) ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Caller holds stripe.mu.
  uint32_t slot;
  if (!stripe.free_slots.empty()) {
    slot = stripe.free_slots.back();
    stripe.free_slots.pop_back();
  } else {
    slot = stripe.next_slot++;
    if ((slot >> rows_per_block_log2_) >= stripe.blocks.size()) {
      stripe.blocks.push_back(arena_->Allocate((stride_ << rows_per_block_log2_) * sizeof(float)));
    }
  }
  stripe.index.Insert(key, slot, CurrentGeneration());
  return RowAt(stripe, slot);
}

float* Table::TouchRow(Stripe& stripe, uint64_t key, bool push, uint32_t now_seconds,
                       uint32_t occurrences) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  if (RowIndex::Bucket* entry = stripe.index.Find(key)) {
    float* row = RowAt(stripe, entry->slot);
    Stamp(row, now_seconds);
    // A push updates the row; with eviction on, a pull changes its stamp.
    if (push || eviction_) entry->generation = CurrentGeneration();
    return row;
  }
  if (initializer_.kind() == InitializerConfig::MODEL && !push) {
    return nullptr;
  }
  if (min_count_ > 1) {
    // Only pushes count: a worker pushes each key of its batch once, so a
    // key counts once per batch (a pull and the push of one step used to
    // count twice).
    if (!push) return nullptr;
    Pending& p = stripe.pending[key];
    p.last_clock = clock_.load(std::memory_order_relaxed);
    p.last_seconds = now_seconds;
    p.generation = CurrentGeneration();
    p.count += std::min(occurrences, min_count_ - std::min(p.count, min_count_));
    if (p.count < min_count_) return nullptr;
    // The new row starts at its initial value, not at the shared row's
    // weights: that warm start cost 0.0027 AUC (docs/benchmarks.md).
    stripe.pending.erase(key);
  }
  float* row = NewRow(stripe, key, nullptr);
  Stamp(row, now_seconds);
  return row;
}

// Pull and Push visit the batch stripe by stripe (StagedStripes): under the
// stripe's lock, prefetch the hash slots of all its keys, look them up (the
// misses overlap) and prefetch their rows, then copy or update the rows; the
// stages of consecutive stripes overlap, so a stripe's first lookup and
// first row are not a full memory latency each. Keys of one stripe
// keep their batch order, so admission counts of repeated pull keys are
// those of a key-by-key pass.
void Table::ForStripes(size_t n, absl::FunctionRef<void(int begin, int end)> fn) const {
  constexpr int kChunks = 16, kStripes = kNumStripes / kChunks;
  if (helpers_ == nullptr || n < kParallelMinKeys) {
    fn(0, kNumStripes);
    return;
  }
  helpers_->ParallelFor(kChunks, [&fn](int c) { fn(c * kStripes, (c + 1) * kStripes); });
}

void Table::StagedStripes(const Batch& b, const uint64_t* keys, int first, int last,
                          StripeStage lookup, StripeStage use) const
    ABSL_NO_THREAD_SAFETY_ANALYSIS {  // Locks and unlocks stripes in turn.
  int with_keys[kNumStripes];
  int m = 0;
  for (int s = first; s < last; ++s) {
    if (b.start[s] != b.start[s + 1]) with_keys[m++] = s;
  }
  // Step k: stripe k's buckets, stripe k - 1's lookup, stripe k - 2's use.
  for (int k = 0; k < m + 2; ++k) {
    if (k < m) {
      Stripe& stripe = stripes_[with_keys[k]];
      stripe.mu.Lock();
      const uint32_t end = b.start[with_keys[k] + 1];
      for (uint32_t j = b.start[with_keys[k]]; j < end; ++j) {
        stripe.index.Prefetch(keys[b.order[j]]);
      }
    }
    if (k >= 1 && k - 1 < m) {
      const int s = with_keys[k - 1];
      lookup(stripes_[s], b.start[s], b.start[s + 1]);
    }
    if (k >= 2) {
      const int s = with_keys[k - 2];
      use(stripes_[s], b.start[s], b.start[s + 1]);
      stripes_[s].mu.Unlock();
    }
  }
}

void Table::Pull(const uint64_t* keys, size_t n, bool train, float* out) {
  PullEncoded(keys, n, train, Encoding::kFp32, reinterpret_cast<char*>(out));
}

void Table::PullEncoded(const uint64_t* keys, size_t n, bool train, Encoding encoding, char* out) {
  PullRows(keys, n, train, encoding, /*with_state=*/false, out);
}

void Table::PullWithState(const uint64_t* keys, size_t n, float* out) {
  PullRows(keys, n, /*train=*/true, Encoding::kFp32, /*with_state=*/true,
           reinterpret_cast<char*>(out));
}

void Table::PullRows(const uint64_t* keys, size_t n, bool train, Encoding encoding, bool with_state,
                     char* out) {
  pulls_.fetch_add(1, std::memory_order_relaxed);
  const size_t width = with_state ? dim_ + state_size_ : dim_;
  const size_t row_bytes = width * BytesPerValue(encoding);
  const uint32_t now_seconds = train ? NowSeconds() : 0;
  Batch& b = GroupByStripe(keys, n);
  ForStripes(n, [&](int first, int last) {
    StagedStripes(
        b, keys, first, last,
        [&](Stripe& stripe, uint32_t begin, uint32_t end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          for (uint32_t j = begin; j < end; ++j) {
            const uint64_t key = keys[b.order[j]];
            float* row = nullptr;
            if (train) {
              row = TouchRow(stripe, key, /*push=*/false, now_seconds, 1);
            } else {
              const RowIndex::Bucket* entry = stripe.index.Find(key);
              if (entry != nullptr) row = RowAt(stripe, entry->slot);
            }
            if (row != nullptr) PrefetchRow(row, /*write=*/false);
            b.rows[j] = row;
          }
        },
        [&](Stripe&, uint32_t begin, uint32_t end) {
          for (uint32_t j = begin; j < end; ++j) {
            const uint32_t i = b.order[j];
            const float* src = b.rows[j];
            if (src == nullptr && shared_rows_ && !with_state) continue;  // PullShared.
            if (src == nullptr) {  // No row (yet): the initial value.
              thread_local std::vector<float> initial;
              initial.resize(width);
              initializer_.Fill(keys[i], initial.data());
              if (with_state) optimizer_->InitState(initial.data() + dim_);
              src = initial.data();
            }
            EncodeValuesTo(src, width, encoding, out + i * row_bytes);
          }
        });
  });
  if (shared_rows_ && !with_state) {
    shared_.Pull(keys, b.order.data(), b.rows.data(), n, encoding, out);  // Keys without rows.
  }
}

PushCounts Table::Push(const uint64_t* keys, size_t n, const float* grads, float lr_scale,
                       const uint32_t* occurrences) {
  pushes_.fetch_add(1, std::memory_order_relaxed);
  const uint32_t now_seconds = NowSeconds();
  const bool skip_nonfinite = config_.non_finite() == SKIP_AND_COUNT;
  Batch& b = GroupByStripe(keys, n);
  std::atomic<uint64_t> applied{0}, pending{0}, skipped{0};
  ForStripes(n, [&](int first, int last) {
    PushCounts counts;
    StagedStripes(
        b, keys, first, last,
        [&](Stripe& stripe, uint32_t begin, uint32_t end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          for (uint32_t j = begin; j < end; ++j) {
            const uint32_t i = b.order[j];
            b.rows[j] = nullptr;
            b.to_shared[j] = 0;
            if (skip_nonfinite && !AllWithin(grads + size_t{i} * dim_, dim_, max_gradient_bits_)) {
              ++counts.skipped_nonfinite;  // Only reached under SKIP_AND_COUNT.
              continue;
            }
            float* row = TouchRow(stripe, keys[i], /*push=*/true, now_seconds,
                                  occurrences == nullptr ? 1 : occurrences[i]);
            if (row == nullptr) {
              ++counts.pending;
              b.to_shared[j] = shared_rows_;
              continue;
            }
            PrefetchRow(row, /*write=*/true);
            b.rows[j] = row;
          }
        },
        [&](Stripe&, uint32_t begin, uint32_t end) {
          for (uint32_t j = begin; j < end; ++j) {
            float* row = b.rows[j];
            if (row == nullptr) continue;
            optimizer_->Update(row, row + dim_, grads + size_t{b.order[j]} * dim_, lr_scale);
            ++counts.applied;
          }
        });
    applied.fetch_add(counts.applied, std::memory_order_relaxed);
    pending.fetch_add(counts.pending, std::memory_order_relaxed);
    skipped.fetch_add(counts.skipped_nonfinite, std::memory_order_relaxed);
  });
  PushCounts counts;
  counts.applied = applied.load(std::memory_order_relaxed);
  counts.pending = pending.load(std::memory_order_relaxed);
  counts.skipped_nonfinite = skipped.load(std::memory_order_relaxed);
  if (shared_rows_ && counts.pending > 0) {
    shared_.Push(keys, b.order.data(), b.to_shared.data(), n, grads, lr_scale);
  }
  skipped_nonfinite_.fetch_add(counts.skipped_nonfinite, std::memory_order_relaxed);
  rows_updated_.fetch_add(counts.applied, std::memory_order_relaxed);
  return counts;
}

bool Table::FindDuplicateKey(const uint64_t* keys, size_t n, uint64_t* dup) const {
  // Equal keys share a stripe, so only keys of one stripe are compared:
  // pairwise while a stripe's group is small (a batch of thousands has
  // about n / 256 keys a stripe), sorted beyond that.
  constexpr uint32_t kPairwise = 32;
  thread_local std::vector<uint64_t> sorted;
  Batch& b = GroupByStripe(keys, n);
  for (int s = 0; s < kNumStripes; ++s) {
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
    Stripe& stripe = StripeOf(keys[i]);
    MutexLock lock(&stripe.mu);
    if (stripe.index.Contains(keys[i])) continue;
    stripe.pending.erase(keys[i]);
    Stamp(NewRow(stripe, keys[i], values + i * dim_), now_seconds);
    ++written;
  }
  return written;
}

void Table::SetClock(uint64_t clock) {
  uint64_t seen = clock_.load(std::memory_order_relaxed);
  while (clock > seen && !clock_.compare_exchange_weak(seen, clock, std::memory_order_relaxed)) {
  }
}

void Table::ResetClock(uint64_t clock) { clock_.store(clock, std::memory_order_relaxed); }

}  // namespace shardps

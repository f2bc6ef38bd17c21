// Table: whole-table operations (table.h): eviction, checkpoint iteration
// and restore, change tracking for delta checkpoints, counters.
#include <atomic>
#include <cmath>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "common/partition.h"
#include "server/table.h"
#include "server/table_internal.h"

namespace shardps {

uint64_t Table::Evict(uint64_t now_clock, int64_t now_seconds, const std::vector<bool>& owned) {
  const uint64_t ttl_clocks = config_.eviction().ttl_clocks();
  const uint64_t ttl_seconds = config_.eviction().ttl_seconds();
  if (!eviction_) return 0;
  CHECK(owned.empty() || owned.size() == num_partitions_) << "table " << id();
  const uint32_t table_id = id();
  auto ours = [&](uint64_t key) {
    return owned.empty() || owned[PartitionOf(table_id, key, num_partitions_)];
  };
  auto expired = [&](uint64_t last_clock, uint32_t last_seconds) {
    return (ttl_clocks > 0 && now_clock >= last_clock && now_clock - last_clock >= ttl_clocks) ||
           (ttl_seconds > 0 && now_seconds >= last_seconds &&
            static_cast<uint64_t>(now_seconds - last_seconds) >= ttl_seconds);
  };
  uint64_t dropped = 0;
  for (int s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    std::vector<uint64_t> drop;
    stripe.index.ForEach([&](const RowIndex::Bucket& entry) {
      const float* meta = RowAt(stripe, entry.slot) + dim_ + state_size_;
      uint64_t last_clock;
      uint32_t last_seconds;
      std::memcpy(&last_clock, meta, sizeof last_clock);
      std::memcpy(&last_seconds, meta + 2, sizeof last_seconds);
      if (expired(last_clock, last_seconds) && ours(entry.key)) drop.push_back(entry.key);
    });
    const uint32_t generation = generation_.load(std::memory_order_relaxed);
    for (uint64_t key : drop) {
      stripe.deleted.emplace_back(key, generation);
      stripe.free_slots.push_back(stripe.index.Find(key)->slot);
      stripe.index.Erase(key);
    }
    dropped += drop.size();
    for (auto it = stripe.pending.begin(); it != stripe.pending.end();) {
      if (expired(it->second.last_clock, it->second.last_seconds) && ours(it->first)) {
        // Logged, so that a delta drops the count on its restore too.
        stripe.deleted.emplace_back(it->first, generation);
        stripe.pending.erase(it++);
      } else {
        ++it;
      }
    }
  }
  evicted_.fetch_add(dropped, std::memory_order_relaxed);
  return dropped;
}

void Table::ForEachRow(const std::function<void(uint64_t key, const float* payload)>& visit) const {
  for (int s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    stripe.index.ForEach(
        [&](const RowIndex::Bucket& entry) { visit(entry.key, RowAt(stripe, entry.slot)); });
  }
}

void Table::RestoreRow(uint64_t key, const float* payload) {
  uint32_t partition;
  if (shared_rows_ && shared_.IsKey(key, &partition)) {
    shared_.Restore(partition, payload);
    return;
  }
  Stripe& stripe = StripeOf(key);
  MutexLock lock(&stripe.mu);
  stripe.pending.erase(key);
  float* row;
  if (RowIndex::Bucket* entry = stripe.index.Find(key)) {
    row = RowAt(stripe, entry->slot);
    entry->generation = CurrentGeneration();
  } else {
    row = NewRow(stripe, key, payload);
  }
  std::memcpy(row, payload, stride_ * sizeof(float));
}

void Table::RestoreRows(const uint64_t* keys, const char* payloads, size_t n) {
  const size_t bytes = stride_ * sizeof(float);
  Batch& b = GroupByStripe(keys, n);
  std::atomic<uint64_t> created{0};
  ForStripes(n, [&](int first, int last) {
    uint64_t added = 0;
    StagedStripes(
        b, keys, first, last,
        [&](Stripe& stripe, uint32_t begin, uint32_t end) ABSL_NO_THREAD_SAFETY_ANALYSIS {
          for (uint32_t j = begin; j < end; ++j) {
            const uint64_t key = keys[b.order[j]];
            uint32_t partition;
            b.to_shared[j] = shared_rows_ && shared_.IsKey(key, &partition);
            if (b.to_shared[j]) {
              b.rows[j] = nullptr;
              continue;
            }
            if (!stripe.pending.empty()) stripe.pending.erase(key);
            float* row;
            if (RowIndex::Bucket* entry = stripe.index.Find(key)) {
              row = RowAt(stripe, entry->slot);
              entry->generation = CurrentGeneration();
            } else {
              row = NewSlot(stripe, key);
              ++added;
            }
            PrefetchRow(row, /*write=*/true);
            b.rows[j] = row;
          }
        },
        [&](Stripe&, uint32_t begin, uint32_t end) {
          for (uint32_t j = begin; j < end; ++j) {
            if (b.rows[j] != nullptr) {
              std::memcpy(b.rows[j], payloads + size_t{b.order[j]} * bytes, bytes);
            }
          }
        });
    created.fetch_add(added, std::memory_order_relaxed);
  });
  admitted_.fetch_add(created.load(std::memory_order_relaxed), std::memory_order_relaxed);
  if (!shared_rows_) return;
  std::vector<float> payload;
  for (size_t j = 0; j < n; ++j) {
    if (!b.to_shared[j]) continue;
    uint32_t partition;
    const uint64_t key = keys[b.order[j]];
    CHECK(shared_.IsKey(key, &partition));
    payload.resize(stride_);
    std::memcpy(payload.data(), payloads + size_t{b.order[j]} * bytes, bytes);
    shared_.Restore(partition, payload.data());
  }
}

void Table::ReserveRows(size_t rows, size_t admission_counts) {
  const auto per_stripe = [](size_t n) -> size_t {
    if (n == 0) return 0;
    const double expected = static_cast<double>(n) / kNumStripes;
    return static_cast<size_t>(expected + 3 * std::sqrt(expected) + 4);
  };
  const size_t rows_each = per_stripe(rows), counts_each = per_stripe(admission_counts);
  for (int s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    if (rows_each > 0) stripe.index.Reserve(stripe.index.size() + rows_each);
    if (counts_each > 0) stripe.pending.reserve(stripe.pending.size() + counts_each);
  }
}

void Table::ForEachAdmissionCount(
    std::optional<uint32_t> since,
    const std::function<void(uint64_t key, const AdmissionCount& count)>& visit) const {
  for (int s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    for (const auto& [key, pending] : stripe.pending) {
      if (!since.has_value() || pending.generation > *since) visit(key, pending);
    }
  }
}

void Table::RestoreAdmissionCounts(const uint64_t* keys, const AdmissionCount* counts, size_t n) {
  Batch& b = GroupByStripe(keys, n);
  const uint32_t generation = CurrentGeneration();
  ForStripes(n, [&](int first, int last) {
    for (int s = first; s < last; ++s) {
      const uint32_t begin = b.start[s], end = b.start[s + 1];
      if (begin == end) continue;
      Stripe& stripe = stripes_[s];
      MutexLock lock(&stripe.mu);
      stripe.pending.reserve(stripe.pending.size() + (end - begin));
      for (uint32_t j = begin; j < end; ++j) {
        const uint32_t i = b.order[j];
        if (stripe.index.Contains(keys[i])) continue;
        Pending& p = stripe.pending[keys[i]];
        static_cast<AdmissionCount&>(p) = counts[i];
        p.generation = generation;
      }
    }
  });
}

void Table::Clear() {
  for (int s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    stripe.index.ForEach(
        [&](const RowIndex::Bucket& entry) { stripe.free_slots.push_back(entry.slot); });
    stripe.index.Clear();
    stripe.pending.clear();
    stripe.deleted.clear();
    stripe.deleted.shrink_to_fit();
  }
  if (shared_rows_) shared_.Reset();
}

uint64_t Table::DropPartitions(const std::vector<bool>& drop) {
  CHECK_EQ(drop.size(), num_partitions_) << "table " << id();
  const uint32_t table_id = id();
  auto dropped = [&](uint64_t key) { return drop[PartitionOf(table_id, key, num_partitions_)]; };
  uint64_t rows = 0;
  std::vector<uint64_t> keys;
  for (int s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    keys.clear();
    stripe.index.ForEach([&](const RowIndex::Bucket& entry) {
      if (dropped(entry.key)) keys.push_back(entry.key);
    });
    for (uint64_t key : keys) {
      stripe.free_slots.push_back(stripe.index.Find(key)->slot);
      stripe.index.Erase(key);
    }
    rows += keys.size();
    for (auto it = stripe.pending.begin(); it != stripe.pending.end();) {
      if (dropped(it->first)) {
        stripe.pending.erase(it++);
      } else {
        ++it;
      }
    }
  }
  return rows;
}

uint32_t Table::AdvanceGeneration() { return generation_.fetch_add(1, std::memory_order_relaxed); }

void Table::ForEachChangedRow(uint32_t since,
                              const std::function<void(uint64_t key, const float* payload)>& visit,
                              const std::function<void(uint64_t key)>& deleted) const {
  absl::flat_hash_set<uint64_t> seen;
  for (int s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    seen.clear();
    for (const auto& [key, gen] : stripe.deleted) {
      // A key evicted and created again is written as a row instead.
      if (gen > since && !stripe.index.Contains(key) && seen.insert(key).second) {
        deleted(key);
      }
    }
    stripe.index.ForEach([&](const RowIndex::Bucket& entry) {
      if (entry.generation > since) visit(entry.key, RowAt(stripe, entry.slot));
    });
  }
}

void Table::TrimDeletions(uint32_t upto) {
  for (int s = 0; s < kNumStripes; ++s) {
    Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    auto& log = stripe.deleted;
    log.erase(
        std::remove_if(log.begin(), log.end(),
                       [upto](const std::pair<uint64_t, uint32_t>& d) { return d.second <= upto; }),
        log.end());
  }
}

bool Table::DeleteRow(uint64_t key) {
  Stripe& stripe = StripeOf(key);
  MutexLock lock(&stripe.mu);
  stripe.pending.erase(key);
  const RowIndex::Bucket* entry = stripe.index.Find(key);
  if (entry == nullptr) return false;
  stripe.free_slots.push_back(entry->slot);
  stripe.index.Erase(key);
  return true;
}

uint64_t Table::LoggedDeletions() const {
  uint64_t n = 0;
  for (int s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    n += stripe.deleted.size();
  }
  return n;
}

TableCounters Table::Counters() const {
  TableCounters c;
  for (int s = 0; s < kNumStripes; ++s) {
    const Stripe& stripe = stripes_[s];
    MutexLock lock(&stripe.mu);
    c.live_rows += stripe.index.size();
    c.pending_rows += stripe.pending.size();
    c.bytes += stripe.index.MemoryBytes();
    c.bytes += stripe.pending.capacity() * (sizeof(std::pair<uint64_t, Pending>) + 1);
    c.bytes += stripe.free_slots.capacity() * sizeof(uint32_t);
    c.bytes += stripe.deleted.capacity() * sizeof(stripe.deleted[0]);
  }
  c.bytes += arena_->allocated_bytes();
  c.bytes_per_row = c.live_rows > 0 ? c.bytes / c.live_rows : 0;
  c.admitted_rows = admitted_.load(std::memory_order_relaxed);
  c.evicted_rows = evicted_.load(std::memory_order_relaxed);
  c.rows_skipped_nonfinite = skipped_nonfinite_.load(std::memory_order_relaxed);
  c.pulls = pulls_.load(std::memory_order_relaxed);
  c.pushes = pushes_.load(std::memory_order_relaxed);
  c.rows_updated = rows_updated_.load(std::memory_order_relaxed);
  if (shared_rows_) {
    c.shared_rows = shared_.RowsInUse();
    c.shared_updates = shared_.Updates();
  }
  return c;
}

void Table::InitialRow(uint64_t key, float* out) const { initializer_.Fill(key, out); }

bool Table::Contains(uint64_t key) const {
  const Stripe& stripe = StripeOf(key);
  MutexLock lock(&stripe.mu);
  return stripe.index.Contains(key);
}

void Table::ForEachSharedRow(std::optional<uint32_t> since,
                             const std::function<void(uint32_t partition, uint64_t key,
                                                      const float* payload)>& visit) const {
  if (shared_rows_) shared_.ForEach(since, visit);
}

}  // namespace shardps

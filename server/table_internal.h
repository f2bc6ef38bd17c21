// Table internals shared by its implementation files (table.cc: rows,
// batches, pulls and pushes; table_state.cc: eviction, checkpoint
// iteration and restore, change tracking, counters). The shared unadmitted
// rows are a class of their own (shared_rows.h). Not for other users.
#ifndef SHARDPS_SERVER_TABLE_INTERNAL_H_
#define SHARDPS_SERVER_TABLE_INTERNAL_H_

#include <sys/mman.h>

#include <algorithm>
#include <cstdlib>
#include <future>
#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "common/mutex.h"
#include "glog/logging.h"
#include "server/row_index.h"
#include "server/table.h"

namespace shardps {

// Hands out blocks from 2 MiB-aligned chunks marked MADV_HUGEPAGE. Blocks
// live as long as the arena (freed rows are reused within their stripe).
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
      chunk_size_ = std::max(kChunkBytes, (bytes + kChunkBytes - 1) / kChunkBytes * kChunkBytes);
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
        next_ =
            std::async(std::launch::async, [] { return NewChunk(kChunkBytes, /*touch=*/true); });
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

// A batch's keys grouped by stripe (a stable counting sort of their
// indices), so that each stripe's lock is taken once per batch and the
// stripe's hash slots and rows can be prefetched together. Per thread, so
// the hot path allocates only when a batch is larger than any before.
struct Table::Batch {
  std::vector<uint8_t> stripe_of;   // Of keys[i].
  std::vector<uint32_t> order;      // Key indices, stripe by stripe.
  std::vector<float*> rows;         // Row of keys[order[j]] (nullptr: none).
  std::vector<uint8_t> to_shared;   // Push: keys[order[j]]'s gradient goes to
                                    // its shared row.
  uint32_t start[kNumStripes + 1];  // Stripe s: order[start[s], start[s+1]).
};

struct Table::Stripe {
  mutable Mutex mu;
  RowIndex index ABSL_GUARDED_BY(mu);  // Key -> slot, generation.
  absl::flat_hash_map<uint64_t, Pending> pending ABSL_GUARDED_BY(mu);
  std::vector<float*> blocks ABSL_GUARDED_BY(mu);  // Owned by the arena.
  std::vector<uint32_t> free_slots ABSL_GUARDED_BY(mu);
  uint32_t next_slot ABSL_GUARDED_BY(mu) = 0;
  // Keys dropped by Evict(), with the generation they were dropped in.
  std::vector<std::pair<uint64_t, uint32_t>> deleted ABSL_GUARDED_BY(mu);
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_TABLE_INTERNAL_H_

// Key deduplication for one table of one batch.
//
// A batch holds, per sparse table, the keys of every categorical field that
// maps to the table (several fields may share one). Before pulling, the worker
// reduces them to the unique keys, and the model addresses pulled rows by
// each original key's index into that unique list. KeyDeduper is THE shared
// dedup for local mode and PS mode (the parity test relies on both taking the
// same path): the unique keys come out in first-occurrence order, so the
// result is a pure function of the key sequence.
//
//   KeyDeduper dedup;
//   dedup.Reset(total_keys);            // once per (batch, table)
//   for (const Field& f : fields_of_table) dedup.Add(f.keys);
//   Pull(dedup.unique_keys());          // one row per unique key
//   // dedup.inverse()[i] = row of the i-th added key in unique_keys()
//
// Allocation: buffers are kept across batches and only grow, so a deduper
// reused for batches of similar size allocates nothing after warm-up. The
// hash table is a flat open-addressing table of 32-bit slots sized to at most
// half full.
//
// Thread-safety: none; use one KeyDeduper per thread (or per table).
#ifndef SHARDPS_WORKER_MODEL_DEDUP_H_
#define SHARDPS_WORKER_MODEL_DEDUP_H_

#include <cstddef>
#include <cstdint>
#include <vector>

#include "absl/types/span.h"

namespace shardps {

class KeyDeduper {
 public:
  KeyDeduper() = default;
  KeyDeduper(const KeyDeduper&) = delete;
  KeyDeduper& operator=(const KeyDeduper&) = delete;

  // Forgets the previous batch. `expected_keys` (the number of keys about to
  // be added, or an estimate) sizes the hash table up front; more keys than
  // that are still fine (the table grows).
  void Reset(size_t expected_keys = 0);

  // Appends `keys`: each key not seen since Reset() is appended to
  // unique_keys(), and for each key its index into unique_keys() is appended
  // to inverse(). The inverse of the keys of this call therefore starts at
  // the inverse().size() observed before the call. At most 2^31 - 1 unique
  // keys per batch (CHECKed: a batch that large is a programming error).
  void Add(absl::Span<const uint64_t> keys);

  // Reset(keys.size()) followed by Add(keys).
  void Dedup(absl::Span<const uint64_t> keys) {
    Reset(keys.size());
    Add(keys);
  }

  // The distinct keys added since Reset(), in first-occurrence order.
  const std::vector<uint64_t>& unique_keys() const { return unique_; }
  // For every key added since Reset(), in order: its index into
  // unique_keys(). int64_t so the model can use it as indices directly.
  const std::vector<int64_t>& inverse() const { return inverse_; }

 private:
  // Sizes the table for `n` unique keys (load <= 1/2) and re-inserts the
  // current unique keys.
  void Rehash(size_t n);

  // slots_[i] = 1 + index into unique_ of the key stored there; 0 = empty.
  std::vector<uint32_t> slots_;
  uint64_t mask_ = 0;  // slots_.size() - 1 (a power of two minus one).
  std::vector<uint64_t> unique_;
  std::vector<int64_t> inverse_;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_DEDUP_H_

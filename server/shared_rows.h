// SharedRows: a sparse table's shared unadmitted rows (table.h, "Shared
// unadmitted rows"): one embedding (with its optimizer state) per group of
// partitions, read by every key of a partition that has no row yet and
// trained with the summed gradients of those keys.
//
// Partitions map to shared rows through a small table: after Reset, one row
// (zero weights, fresh optimizer state) serves every partition; Restore
// gives a partition the row a checkpoint holds for it, partitions with
// bit-identical payloads sharing one. Checkpoints carry one record per
// partition under a reserved key of that partition (Key), the key whose
// MixKey (common/partition.h) is the lowest value of the partition.
//
// Each row records the table generation it last changed in, for delta
// checkpoints (ForEach with `since`).
//
// Thread-safe: one lock over all of it, taken once per call (Pull takes it
// only once a key without a row shows up). Never call it while holding a
// lock the visitor of ForEach may take.
#ifndef SHARDPS_SERVER_SHARED_ROWS_H_
#define SHARDPS_SERVER_SHARED_ROWS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "common/codec.h"
#include "common/mutex.h"
#include "server/optimizer.h"

namespace shardps {

class SharedRows {
 public:
  // Rows of `stride` floats: `dim` weights, then the optimizer's state (the
  // rest is zero). A row's change is stamped with `*generation` (the
  // table's, read under the lock when the row changes). `optimizer` and
  // `generation` are not owned and must outlive this.
  SharedRows(uint32_t table_id, uint32_t num_partitions, uint32_t dim, size_t stride,
             const Optimizer* optimizer, const std::atomic<uint32_t>* generation);
  SharedRows(const SharedRows&) = delete;
  SharedRows& operator=(const SharedRows&) = delete;

  // One zero row for every partition.
  void Reset();
  // The reserved key of partition `p`'s record in checkpoints.
  uint64_t Key(uint32_t partition) const;
  // Whether `key` is its partition's reserved key (sets *partition).
  bool IsKey(uint64_t key, uint32_t* partition) const;

  // For each j < n with rows[j] == nullptr (no row of its own), writes the
  // shared row of keys[order[j]] to out + order[j] * (dim values encoded).
  void Pull(const uint64_t* keys, const uint32_t* order, float* const* rows, size_t n,
            Encoding encoding, char* out) const;
  // Sums, in j order, the gradients grads[order[j]] of the keys with
  // to_shared[j] set per shared row, and applies one optimizer step per
  // touched row with the sum (the same bits for the same batch, whichever
  // threads grouped it).
  void Push(const uint64_t* keys, const uint32_t* order, const uint8_t* to_shared, size_t n,
            const float* grads, float lr_scale);
  // Partition `p` reads and trains the row `payload` (stride floats) from
  // now on: an existing row with the same bits, else a free or a new one.
  void Restore(uint32_t partition, const float* payload);
  // Calls `visit(partition, Key(partition), payload)` for every partition,
  // or, with `since`, for those whose row changed after that generation.
  // Holds the lock: `visit` must not call back into this.
  void ForEach(std::optional<uint32_t> since,
               const std::function<void(uint32_t partition, uint64_t key, const float* payload)>&
                   visit) const;

  // Rows some partition uses, and optimizer steps applied so far.
  uint64_t RowsInUse() const;
  uint64_t Updates() const;

 private:
  // The row partition-of-`key` reads (caller holds mu_).
  float* RowOf(uint64_t key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t table_id_;
  const uint32_t num_partitions_;
  const uint32_t dim_;
  const size_t stride_;
  const Optimizer* const optimizer_;
  const std::atomic<uint32_t>* const table_generation_;

  mutable Mutex mu_;
  // of_[p]: the row partition p reads and trains.
  std::vector<uint32_t> of_ ABSL_GUARDED_BY(mu_);
  // Payloads (stride_ floats each), change generations and how many
  // partitions use each row (a row no partition uses is free for reuse).
  std::vector<float> rows_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> generation_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> users_ ABSL_GUARDED_BY(mu_);
  uint64_t updates_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_SHARED_ROWS_H_

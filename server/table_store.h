// All tables of a job, in one process, on raw arrays. gRPC-free.
//
// The server's core holds its tables in a TableStore, and a worker in local
// mode holds the whole model in one: the same sequence of Push calls gives
// bit-identical rows either way. Each table's limits (dense_size,
// max_keys_per_request, max_gradient_abs) are resolved from the job config
// when the store is built (server/request_limits.h) and are in the table's
// config(). The store validates every call before it changes anything, so a
// refused call leaves every table as it was:
//   - unknown table id                      -> INVALID_ARGUMENT
//   - duplicate keys in one push            -> INVALID_ARGUMENT
//   - a sparse push or InitRows of more than
//     max_keys_per_request keys             -> INVALID_ARGUMENT
//   - a dense chunk index past dense_size   -> INVALID_ARGUMENT
//   - a gradient element non-finite or beyond
//     max_gradient_abs, table REJECT        -> INVALID_ARGUMENT (names the key)
//   - a non-finite lr_scale                 -> INVALID_ARGUMENT
// Under SKIP_AND_COUNT, rows with such a gradient element are skipped and
// counted; the rest of the push applies.
//
// Value arrays are row-major: n rows of table dim() floats, in key order.
// Table semantics (creation, admission, eviction, dense chunks): table.h.
//
// Thread-safety: all methods are thread-safe; calls on different rows run in
// parallel, each row update is atomic.
#ifndef SHARDPS_SERVER_TABLE_STORE_H_
#define SHARDPS_SERVER_TABLE_STORE_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "server/table.h"

namespace shardps {

// The largest learning-rate multiplier a push may carry (a worker's LR
// schedule gives values in [0, 1]; step schedules may grow them a little).
// Anything outside [0, kMaxLrScale], or not finite, is refused.
inline constexpr float kMaxLrScale = 1000.0f;

// INVALID_ARGUMENT unless `lr_scale` is finite and in [0, kMaxLrScale]. A
// push checks it once, before its tables.
absl::Status CheckLrScale(float lr_scale);

class TableStore {
 public:
  // One table per config.tables entry. `config` must be finalized
  // (common/config.h). INVALID_ARGUMENT if a table cannot be built.
  static absl::StatusOr<std::unique_ptr<TableStore>> Create(const JobConfig& config);

  TableStore(const TableStore&) = delete;
  TableStore& operator=(const TableStore&) = delete;

  // The table with this id, or nullptr. Valid for the store's lifetime.
  Table* FindTable(uint32_t table_id) const;
  // Tables in id order.
  std::vector<Table*> tables() const;

  // Reads n rows into out[n * dim]. `train` creates rows and counts
  // admission; an evaluation pull changes nothing.
  absl::Status Pull(uint32_t table_id, const uint64_t* keys, size_t n, bool train, float* out);
  // The same, in `encoding` (Table::PullEncoded).
  absl::Status PullEncoded(uint32_t table_id, const uint64_t* keys, size_t n, bool train,
                           Encoding encoding, char* out);

  // One optimizer step per key; keys unique; grads[n * dim].
  absl::StatusOr<PushCounts> Push(uint32_t table_id, const uint64_t* keys, size_t n,
                                  const float* grads, float lr_scale);

  // Checks what Push checks of one table's keys and gradients (not the
  // push's lr_scale: CheckLrScale) without applying anything (the BSP path
  // validates on arrival and applies when the clock closes).
  absl::Status ValidatePush(const Table& table, const uint64_t* keys, size_t n,
                            const float* grads) const;
  // ValidatePush in two halves: the keys (count, dense range, duplicates),
  // which need no gradient, and the gradients (the REJECT policy's check).
  absl::Status ValidatePushKeys(const Table& table, const uint64_t* keys, size_t n) const;
  absl::Status ValidateGradients(const Table& table, const uint64_t* keys, size_t n,
                                 const float* grads) const;
  // INVALID_ARGUMENT if `n` keys are more than a SPARSE table's
  // max_keys_per_request; `what` names the request ("a push").
  static absl::Status CheckKeyCount(const Table& table, size_t n, const char* what);

  // INVALID_ARGUMENT if a key is a dense chunk index out of range.
  static absl::Status CheckDenseKeys(const Table& table, const uint64_t* keys, size_t n);
  // INVALID_ARGUMENT unless `table` may be pulled with its optimizer state
  // (Table::PullWithState): a training pull, in fp32, of a table without
  // admission (a pending key has no state).
  static absl::Status CheckStatePull(const Table& table, bool train, Encoding encoding);

  // Writes absent rows (idempotent); returns rows written.
  absl::StatusOr<uint64_t> InitRows(uint32_t table_id, const uint64_t* keys, size_t n,
                                    const float* values);

  // Stamps later training touches with `clock` (for ttl_clocks).
  void SetClock(uint64_t clock);
  // Sets the clock to exactly `clock`, also backwards (a restore rolled the
  // job back). Call with training held.
  void ResetClock(uint64_t clock);
  // Eviction sweep of every table (Table::Evict: of the owned partitions'
  // keys; empty: every key); returns rows dropped.
  uint64_t Evict(uint64_t now_clock, int64_t now_seconds, const std::vector<bool>& owned = {});

  // Change tracking (table.h): advances every table's generation (they move
  // in lockstep, so one number names a point in all of them) and returns the
  // generation that ended.
  uint32_t AdvanceGeneration();
  // Forgets deletions logged in generations <= `upto`, in every table.
  void TrimDeletions(uint32_t upto);

 private:
  explicit TableStore(std::map<uint32_t, std::unique_ptr<Table>> tables);

  absl::StatusOr<Table*> GetTable(uint32_t table_id) const;

  // Constant after construction.
  const std::map<uint32_t, std::unique_ptr<Table>> tables_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_TABLE_STORE_H_

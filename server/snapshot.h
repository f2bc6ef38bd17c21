// The server's side of checkpoints (docs/design.md, "Checkpoints and recovery"):
// copying a server's rows out of its tables, writing them as partition-group
// files (common/checkpoint/checkpoint_file.h), and reading them back.
//
// ## Files
//
// Files are grouped by partition, independent of the number of servers: group
// g holds partitions [g * kPartitionsPerGroup, (g + 1) * kPartitionsPerGroup).
// A server writes, per group, one file with the partitions of that group it
// owns. With the contiguous map and num_partitions / num_servers a multiple
// of kPartitionsPerGroup a server owns whole groups, and the file of group g
// is "part-<g, 4 digits>.shard" (PartitionGroupFileName). Otherwise (a group
// split between servers, any map) each owner of part of group g writes
// "part-<g, 4 digits>-<first partition, 6 digits>.shard"; names stay unique
// because partitions have one owner. Restore does not depend on the names:
// it reads the partition lists of the manifest.
//
// Each record is one row: the key and the table's row payload
// (Table::ForEachRow: row_stride() floats, weights + optimizer state + row
// metadata, bit for bit). A table with shared unadmitted rows also writes,
// per partition, its shared row under the partition's reserved key
// (Table::ForEachSharedRow; deltas: those changed since the base), which
// Table::RestoreRow puts back as the shared row. A table with admission
// also writes its pending admission counts (keys seen, not yet given a row;
// Table::ForEachAdmissionCount) as admission-count records
// (checkpoint_file.h: version 3 files, written only when a file holds some),
// after the partition's rows: count, last push's seconds, last push's clock
// (u32, u32, u64); a restore sets them again (RestoreAdmissionCounts), so a
// key counts towards admission from where it was.
//
// ## Deltas
//
// A delta snapshot (Take with `since`) holds, per (partition, table), the
// rows changed after table generation `since` (table.h, change tracking) and
// the keys deleted (evicted) since then. Its files are delta files
// (checkpoint_file.h, version 2) naming the base checkpoint's clock; each
// (partition, table) writes its deletions before its rows, and its
// admission counts changed since the base after them (a count dropped by
// eviction is a deletion). A restore
// applies a chain (ResolvedCheckpoint in checkpoint_dir.h): the FULL
// checkpoint's rows into cleared tables, then each delta in order, its
// deletions first, then its rows, then its admission counts (LoadOwnedChain
// + ApplyChain).
//
// A table's schema fingerprint is TableSchemaFingerprint: a hash of the
// TableConfig's deterministic serialization and the row stride, so a restore
// into a job whose table differs in anything (dim, optimizer, init, ...) is
// refused naming the table.
//
// Thread-safety: StoreSnapshot is immutable after Take; the free functions
// are thread-compatible.
#ifndef SHARDPS_SERVER_SNAPSHOT_H_
#define SHARDPS_SERVER_SNAPSHOT_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/checkpoint_file.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "server/table_store.h"

namespace shardps {

// Partitions per partition group (see the top of this file). Frozen: only
// the writer uses it, but changing it changes file names.
inline constexpr uint32_t kPartitionsPerGroup = 64;

// Hash of `config`'s deterministic serialization and `row_stride`.
uint64_t TableSchemaFingerprint(const TableConfig& config, size_t row_stride);

// The file schema of every table of `store`, in id order.
std::vector<checkpoint::TableSchema> TableSchemas(const TableStore& store);

// The name of the file holding `partitions` (non-empty, sorted, all of group
// `partitions[0] / kPartitionsPerGroup`) of a job with `num_partitions`.
std::string SnapshotFileName(const std::vector<uint32_t>& partitions, uint32_t num_partitions);

// A copy of the rows of some partitions of every table of a store.
class StoreSnapshot {
 public:
  // Copies the rows whose partition p has owned[p] (owned.size() = the
  // job's P), one table stripe at a time under its lock. Consistent only if
  // nothing writes the tables meanwhile (the caller holds pushes).
  // Memory: the rows' keys and payloads.
  // With `since`: a delta, only rows changed after that table generation
  // and the deletions since (see "Deltas" above).
  static std::unique_ptr<StoreSnapshot> Take(const TableStore& store,
                                             const std::vector<bool>& owned,
                                             std::optional<uint32_t> since = std::nullopt);

  StoreSnapshot(const StoreSnapshot&) = delete;
  StoreSnapshot& operator=(const StoreSnapshot&) = delete;

  uint32_t num_partitions() const { return num_partitions_; }
  // The owned partitions, increasing.
  const std::vector<uint32_t>& partitions() const { return partitions_; }
  uint64_t rows() const { return rows_; }
  // Deleted keys (deltas only).
  uint64_t deletions() const { return deletions_; }
  bool delta() const { return delta_; }

  // Rows of one (partition index into partitions(), table index in id
  // order): keys and key-aligned payloads of `stride(table)` floats each.
  struct Rows {
    std::vector<uint64_t> keys;
    std::vector<float> payloads;
    std::vector<uint64_t> deleted;  // Deltas: keys deleted since the base.
    // Pending admission counts (deltas: those changed since the base).
    std::vector<uint64_t> count_keys;
    std::vector<AdmissionCount> counts;
  };
  const Rows& rows_of(size_t partition_index, size_t table_index) const {
    return rows_of_[partition_index * table_ids_.size() + table_index];
  }
  const std::vector<uint32_t>& table_ids() const { return table_ids_; }
  size_t stride(size_t table_index) const { return strides_[table_index]; }

 private:
  StoreSnapshot() = default;

  uint32_t num_partitions_ = 0;
  std::vector<uint32_t> partitions_;
  std::vector<uint32_t> table_ids_;
  std::vector<size_t> strides_;
  std::vector<Rows> rows_of_;  // [partition index][table index].
  uint64_t rows_ = 0;
  uint64_t deletions_ = 0;
  bool delta_ = false;
};

struct SnapshotWriteOptions {
  std::string dir;  // The checkpoint's directory; must exist.
  std::string job_name;
  uint64_t clock = 0;
  // The base checkpoint's clock, for a delta snapshot (ignored otherwise).
  uint64_t base_clock = 0;
  std::vector<checkpoint::TableSchema> tables;  // TableSchemas(store).
  checkpoint::WriterOptions writer;
};

// Writes `snapshot` as partition-group files into options.dir (each durable
// and atomically renamed; see checkpoint_file.h); delta files on
// options.base_clock if the snapshot is a delta. Returns the files written
// in group order; none if the snapshot has no partitions. On error, files
// already written stay (a checkpoint without MANIFEST is not complete).
absl::StatusOr<std::vector<checkpoint::WrittenFile>> WriteSnapshot(
    const StoreSnapshot& snapshot, const SnapshotWriteOptions& options);

// Paces a restore to a rate: Done(bytes) sleeps until `bytes` more of the
// work, counted from construction, are due at `bytes_per_sec` (a lead
// under 2 ms is kept for later). A restore counts half of each file's bytes
// as it is read and verified and half of its applied blocks' bytes (keys
// and payloads, a little less than the file) as its rows go in, so B bytes
// of files take a little under B / rate at least. 0 bytes_per_sec: no
// pace. Not thread-safe (one restore's thread).
class RestorePace {
 public:
  explicit RestorePace(uint64_t bytes_per_sec);
  void Done(uint64_t bytes);
  absl::Duration slept() const { return slept_; }

 private:
  const uint64_t bytes_per_sec_;
  const absl::Time start_;
  uint64_t bytes_ = 0;
  absl::Duration slept_;
};

// The verified files of one checkpoint that a server needs.
struct LoadedFiles {
  std::vector<std::unique_ptr<checkpoint::CheckpointFileReader>> files;
  uint64_t bytes = 0;
};

// Reads every file of `manifest` (in `checkpoint_dir`) holding a partition p
// with owned[p], and verifies all of it before returning: size and CRC32C
// against the manifest, then the reader's checks (block CRCs, truncation,
// job name, clock, P, partition list, file kind and base, table schemas
// equal to `tables`, keys in their block's partition). Errors name the file
// (NOT_FOUND missing, DATA_LOSS corrupt or truncated, FAILED_PRECONDITION
// mismatch). A DELTA manifest is refused (FAILED_PRECONDITION): alone it is
// not a checkpoint; use LoadOwnedChain.
// Memory: the files read, until the result is dropped.
absl::StatusOr<LoadedFiles> LoadOwnedFiles(const std::string& checkpoint_dir,
                                           const checkpoint::CheckpointManifest& manifest,
                                           const std::vector<bool>& owned,
                                           const std::vector<checkpoint::TableSchema>& tables);

// The same for every link of a resolved checkpoint (checkpoint_dir.h
// LoadCheckpoint / LatestComplete): element i holds the files of chain[i].
// Every file of every link is verified before it returns; an error names the
// file of the link at fault. Memory: the files of the whole chain.
// With `pace`, each file read counts towards it.
absl::StatusOr<std::vector<LoadedFiles>> LoadOwnedChain(
    const checkpoint::ResolvedCheckpoint& checkpoint, const std::vector<bool>& owned,
    const std::vector<checkpoint::TableSchema>& tables, RestorePace* pace = nullptr);

// Clears every table of `store`, then writes the rows of `files` whose
// partition p has owned[p]. Returns the rows written. `files` must come from
// LoadOwnedFiles with the same store's schemas (nothing left to fail).
uint64_t ApplyFiles(const LoadedFiles& files, const std::vector<bool>& owned, TableStore* store);

// Clears every table of `store`, then applies the links of `chain` (from
// LoadOwnedChain with the same store's schemas) in order: per file, its
// deletions, then its rows, of owned partitions. Returns the rows written
// (counting a row each time a link writes it).
uint64_t ApplyChain(const std::vector<LoadedFiles>& chain, const std::vector<bool>& owned,
                    TableStore* store);

// Resharding: drops the rows of the partitions p with partitions[p] from
// every table of `store` (Table::DropPartitions), then applies the links of
// `chain` (from LoadOwnedChain with `partitions` as its owned set and the
// same store's schemas) for those partitions only. Rows of every other
// partition stay as they are. Returns the rows written.
// With `pace`, each block applied counts towards it.
uint64_t AddPartitionsFromChain(const std::vector<LoadedFiles>& chain,
                                const std::vector<bool>& partitions, TableStore* store,
                                RestorePace* pace = nullptr);

// Resharding, a move's catch-up: applies `links` (the links of a chain after
// the checkpoint the partitions were added from, from LoadOwnedChain as
// above) onto the rows `store` holds for the partitions p with
// partitions[p], each link's deletions first, then its rows; nothing is
// dropped first. Returns the rows written.
uint64_t CatchUpPartitions(const std::vector<LoadedFiles>& links,
                           const std::vector<bool>& partitions, TableStore* store);

}  // namespace shardps

#endif  // SHARDPS_SERVER_SNAPSHOT_H_

// Loading a complete checkpoint into one process, for offline scoring and
// export (ps_score, ps_export).
//
// The checkpoint is the one the servers wrote (server/snapshot.h,
// common/checkpoint/): the latest complete one under a root, or the one at a
// given clock. It is read with the servers' own restore code, as a single
// server that owns every partition would: LatestComplete / LoadCheckpoint
// (manifest, file sizes), then LoadOwnedFiles (every file's size and CRC32C
// against the manifest, every block's CRC, the job name, clock, number of
// partitions, each table's schema fingerprint, keys in their partitions), all
// of it verified before a single row is written; then ApplyFiles into a
// TableStore built from the job config. So a corrupt, partial or mismatched
// checkpoint is refused with the same messages a restoring server gives, and
// the store then holds exactly the rows of the cut (weights and optimizer
// state), as the servers had them.
//
// The store is typically the one inside a local ParamStore
// (worker/param_store.h: MakeLocalParamStore(config)->local_tables()), so the
// trainer's own model and evaluation code can score with it unchanged.
//
// Errors: NOT_FOUND (no complete checkpoint under the root, naming it; a
// missing file), DATA_LOSS (corruption), FAILED_PRECONDITION (another job,
// another table config or P, or a checkpoint without the model's dense
// weights), UNIMPLEMENTED (a delta checkpoint), INVALID_ARGUMENT (bad
// arguments).
//
// Thread-safety: RestoreCheckpoint writes the store; nothing else may use it
// meanwhile.
#ifndef SHARDPS_WORKER_EXPORT_CHECKPOINT_LOADER_H_
#define SHARDPS_WORKER_EXPORT_CHECKPOINT_LOADER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"

namespace shardps {

class TableStore;

namespace exporter {

struct LoadedCheckpoint {
  std::string dir;     // The checkpoint's directory (<root>/ckpt-<clock>).
  uint64_t clock = 0;  // Holds the pushes of steps < clock.
  checkpoint::CheckpointManifest manifest;
  uint64_t rows = 0;                            // Rows written into the store.
  uint64_t bytes = 0;                           // Checkpoint file bytes read.
  std::map<uint32_t, uint64_t> rows_per_table;  // By table id (all tables).
};

// Restores the checkpoint at `clock` under `root` (nullopt: the latest
// complete one) of the job `config` (finalized, common/config.h) into
// `store` (built from the same config; its previous rows are dropped).
// Checks also that the model's dense table (model.dense_table, if set) holds
// every one of its `num_dense_chunks` chunk rows (0 = not checked): a cut
// taken before the dense weights were written is refused.
absl::StatusOr<LoadedCheckpoint> RestoreCheckpoint(const JobConfig& config, const std::string& root,
                                                   std::optional<uint64_t> clock,
                                                   uint64_t num_dense_chunks, TableStore* store);

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_CHECKPOINT_LOADER_H_

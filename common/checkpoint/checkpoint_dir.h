// The checkpoint directory of a job: layout, finding the newest complete
// checkpoint, and keep-N garbage collection.
//
// ## Layout
//
//   <root>/ckpt-000000000400/part-0000.shard ...   partition-group files
//   <root>/ckpt-000000000400/MANIFEST              written last
//
// One directory per checkpoint, named CheckpointId(clock). A directory
// without a valid MANIFEST, or whose listed files are missing or damaged, or
// whose delta chain cannot be resolved, is not a complete checkpoint. Names
// under <root> that are not checkpoint ids are never touched.
//
// ## Deltas
//
// A DELTA checkpoint holds the rows changed (and deleted) since its base, the
// previous checkpoint; restoring it means applying, in order, every
// checkpoint of its manifest's chain: a FULL one, then the deltas.
// LoadCheckpoint resolves and verifies the whole chain. Writers start a new
// chain with a FULL checkpoint after kMaxDeltasPerFull deltas, so a restore
// reads at most 1 + kMaxDeltasPerFull checkpoints. GarbageCollect keeps every
// link that a kept checkpoint's chain needs.
//
// Thread-safety: the functions are thread-compatible; GarbageCollect must not
// run concurrently with another GarbageCollect of the same root. It never
// touches checkpoints newer than the newest complete one, so it may run while
// the next checkpoint is being written.
#ifndef SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_
#define SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/checkpoint/manifest.h"
#include "proto/checkpoint.pb.h"

namespace shardps {
namespace checkpoint {

// The most deltas a chain holds after its FULL checkpoint (see "Deltas").
inline constexpr size_t kMaxDeltasPerFull = 8;

// "<root>/ckpt-000000000400".
std::string CheckpointPath(const std::string& root, uint64_t clock);

// Creates <root> (one level) and the checkpoint's directory if missing and
// returns the latter; several servers may call it for the same checkpoint.
// ALREADY_EXISTS if that checkpoint already has a MANIFEST.
absl::StatusOr<std::string> CreateCheckpointDir(const std::string& root, uint64_t clock);

// A checkpoint directory under the root (complete or not).
struct CheckpointEntry {
  uint64_t clock = 0;
  std::string id;   // CheckpointId(clock).
  std::string dir;  // <root>/<id>.
};

// The checkpoint directories under `root`, oldest first. NOT_FOUND if `root`
// does not exist.
absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root);

// A verified checkpoint and what restoring it takes.
struct ResolvedCheckpoint {
  std::string dir;
  CheckpointManifest manifest;
  // To restore, in order: chain[0] is FULL, the last is `manifest`. A FULL
  // checkpoint's chain is itself. dirs[i] is chain[i]'s directory.
  std::vector<CheckpointManifest> chain;
  std::vector<std::string> chain_dirs;
};

// Loads the checkpoint at `clock` and every checkpoint of its chain
// (LoadManifest on each: files present with the right size and CRC), and
// checks that the chain links up: chain[0] FULL, each delta's base is the
// previous link, all of one job (name, fingerprint, P). Errors name the
// checkpoint directory or file at fault.
absl::StatusOr<ResolvedCheckpoint> LoadCheckpoint(
    const std::string& root, uint64_t clock,
    const LoadManifestOptions& options = LoadManifestOptions());

// The newest checkpoint that LoadCheckpoint accepts. Newer ones that it
// refuses (no MANIFEST yet, corrupt, files missing, broken chain) are skipped
// with a WARNING log line naming the directory and why. NOT_FOUND (naming
// `root`) if there is none.
absl::StatusOr<ResolvedCheckpoint> LatestComplete(
    const std::string& root, const LoadManifestOptions& options = LoadManifestOptions());

struct GcOptions {
  uint32_t keep = 3;  // Complete checkpoints to keep; >= 1.
  // How completeness is judged (as LatestComplete does with the same
  // options); false checks sizes only, without reading every file.
  bool verify_file_crcs = true;
  // Clocks of checkpoints kept whatever `keep` says, with their chains (the
  // scheduler's best evaluated checkpoint and those waiting to be
  // evaluated).
  std::vector<uint64_t> pinned;
};

struct GcResult {
  std::vector<std::string> kept;     // Ids of complete checkpoints kept.
  std::vector<std::string> removed;  // Ids of checkpoint directories removed.
  uint64_t temp_files_removed = 0;
};

// Keeps the `keep` newest complete checkpoints and every checkpoint their
// chains need (a kept delta's base and its bases); removes the other complete
// ones, and every incomplete or corrupt checkpoint older than the newest
// complete one (a dead attempt, with its temporary files), and temporary
// files left in kept checkpoints. Incomplete checkpoints newer than the
// newest complete one may be in progress and are left alone. With no
// complete checkpoint at all, removes nothing. A directory is removed
// MANIFEST first, so a crash half-way leaves an incomplete checkpoint, never
// a complete-looking one with files missing.
absl::StatusOr<GcResult> GarbageCollect(const std::string& root, const GcOptions& options);

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_DIR_H_

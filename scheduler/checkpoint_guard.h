// What the scheduler itself checks of checkpoint.dir, beside what the
// servers check when they write or restore (checkpoint_client.h): that the
// directory is usable at all, which checkpoints in it are corrupt rather than
// merely incomplete, and the cleanup after a failed cut or a corrupt
// checkpoint.
//
//  - incomplete: a ckpt-<clock> directory without MANIFEST. A write cut
//    short (a crash, a failed cut): normal, never restored, skipped quietly.
//  - corrupt: a ckpt-<clock> directory whose MANIFEST is there but does not
//    load (unreadable or damaged MANIFEST, a listed file missing or of the
//    wrong size, a broken delta chain), or whose files a server refused at
//    restore (a CRC mismatch). The job refuses it loudly
//    (checkpoint.on_corrupt, job.h).
//
// Errors name the directory or file. Thread-compatible (the coordinator's
// control thread and its start).
#ifndef SHARDPS_SCHEDULER_CHECKPOINT_GUARD_H_
#define SHARDPS_SCHEDULER_CHECKPOINT_GUARD_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardps {

// Creates `root` (with its parents) if missing and proves it usable: writes
// a small file in it, fsyncs the file and the directory, and removes the
// file. The error says which step failed on which path (e.g. "mkdir
// /ckpt/job: Not a directory", "cannot create /ckpt/.probe...: Read-only
// file system").
absl::Status ProbeCheckpointDir(const std::string& root);

struct CorruptCheckpoint {
  uint64_t clock = 0;
  std::string dir;
  absl::Status why;  // LoadCheckpoint's refusal, naming the file.
};

// The corrupt checkpoints of `root` with a clock greater than `after` (all
// if `after` < 0), newest first; incomplete ones are not listed. An empty
// list if `root` does not exist.
absl::StatusOr<std::vector<CorruptCheckpoint>> FindCorruptCheckpoints(const std::string& root,
                                                                      int64_t after);

// Renames checkpoint directory `dir` to "<dir>.corrupt-<unix seconds of
// now>": not a checkpoint name, so it is never listed, restored or garbage
// collected again, and a new checkpoint at its clock can be written. Returns
// the new path.
absl::StatusOr<std::string> SetCheckpointAside(const std::string& dir, absl::Time now);

// Removes the directory of the checkpoint at `clock` under `root` if it has
// no MANIFEST (the part files of a cut that failed); OK if there is none.
// A complete checkpoint is never touched.
absl::Status RemoveIncompleteCheckpoint(const std::string& root, uint64_t clock);

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CHECKPOINT_GUARD_H_

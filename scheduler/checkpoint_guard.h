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
#include <memory>
#include <string>
#include <utility>
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

// One scheduler per checkpoint directory. Two jobs writing one directory
// delete and overwrite each other's checkpoints, evaluations and BEST (a job
// then waits on checkpoints that are gone, or restores another job's rows).
// The lock is flock(2) on <root>/LOCK, held while the object lives; the
// kernel releases it when the process dies, so a scheduler restarted after a
// crash takes it at once. The file names the holder, for the refusal.
class CheckpointDirLock {
 public:
  // Takes the lock on `root` (which exists: ProbeCheckpointDir), waiting up
  // to `wait` (polled every 100 ms) while another process holds it, as an
  // old scheduler still shutting down while its replacement starts.
  // `holder` describes this process (e.g. "job j, pid 12 on host h"); it is
  // written to the file once the lock is held. FAILED_PRECONDITION naming
  // the directory, what the file says of the holder and how long this one
  // waited, if it is still held after `wait`. On a file system without
  // flock (ENOLCK, EOPNOTSUPP, ENOSYS) the result holds no lock and
  // locked() is false: the caller warns and goes on.
  static absl::StatusOr<std::unique_ptr<CheckpointDirLock>> Acquire(const std::string& root,
                                                                    const std::string& holder,
                                                                    absl::Duration wait);
  ~CheckpointDirLock();  // Releases the lock.
  CheckpointDirLock(const CheckpointDirLock&) = delete;
  CheckpointDirLock& operator=(const CheckpointDirLock&) = delete;

  bool locked() const { return fd_ >= 0; }
  const std::string& path() const { return path_; }

 private:
  CheckpointDirLock(std::string path, int fd) : path_(std::move(path)), fd_(fd) {}
  const std::string path_;
  const int fd_;  // -1: the file system has no flock.
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CHECKPOINT_GUARD_H_

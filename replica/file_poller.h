// FilePoller: picks the checkpoint the replica moves to from its checkpoint
// directory (replica.h "What it serves" and "Rollbacks"), and remembers the
// checkpoints that did not load.
//
// A poll lists the directory (a checkpoint without a MANIFEST is being
// written: skipped) and, newest first, has the replica serve the first
// complete checkpoint that loads (Host::ServeCheckpoint), among:
//  - kFiles (the replica follows the files; its bootstrap): those newer
//    than the version served while that version's checkpoint is still on
//    disk as it was loaded (its MANIFEST's created_unix_micros unchanged);
//    once it is not (set aside, or written again after a rollback), every
//    complete checkpoint, older clocks included: a move to an older or the
//    same clock is a rollback;
//  - kResync (the stream cannot continue the version served): every
//    complete checkpoint, whatever its clock;
//  - kNewer (the stream is lost): those newer than the version served.
// A checkpoint that does not load is refused by identity (clock and
// created_unix_micros): logged, recorded as the replica's last error, and
// not tried again, while a good one written later at the same clock is.
// One written again while it loads is left for the next poll.
//
// Thread-safety: thread-safe; polls run one at a time (a second waits for
// the first: two polls build one version, not two). The poller calls the
// Host with its poll lock held, and no other lock.
#ifndef SHARDPS_REPLICA_FILE_POLLER_H_
#define SHARDPS_REPLICA_FILE_POLLER_H_

#include <atomic>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/mutex.h"
#include "replica/version_id.h"

namespace shardps {
namespace replica {

class FilePoller {
 public:
  enum class Mode { kFiles, kResync, kNewer };

  // What the move to a checkpoint is, for the replica's counters and log.
  struct Move {
    std::optional<VersionId> from;  // The version served when the poll began.
    bool rollback = false;          // To an older or rewritten checkpoint.
    bool resync = false;            // Mode kResync.
    uint64_t newest = 0;            // Newest clock with a MANIFEST on disk.
  };

  // The replica, as the poller uses it.
  class Host {
   public:
    virtual ~Host() = default;
    // The version served, nullopt before the first.
    virtual std::optional<VersionId> Served() const = 0;
    // Builds and serves the complete checkpoint `entry`, whose MANIFEST had
    // `created` when listed. ABORTED: not now (written again meanwhile, or
    // the version served is no longer move.from); other errors: it does not
    // load.
    virtual absl::Status ServeCheckpoint(const checkpoint::CheckpointEntry& entry, int64_t created,
                                         const Move& move) = 0;
    // The replica's last error (Status.last_error).
    virtual void RecordError(const std::string& error) = 0;
  };

  // `host` outlives the poller.
  FilePoller(std::string root, Host* host);
  FilePoller(const FilePoller&) = delete;
  FilePoller& operator=(const FilePoller&) = delete;

  // One poll (see the top); whether the version served changed.
  bool Poll(Mode mode);

  // The newest clock with a MANIFEST at the last poll (0: none).
  uint64_t newest_on_disk() const { return newest_on_disk_.load(std::memory_order_relaxed); }

 private:
  // The newest complete checkpoints first, while `newer_than` (if set)
  // is older.
  bool ServeNewest(const std::vector<checkpoint::CheckpointEntry>& entries,
                   std::optional<uint64_t> newer_than, const Move& move)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const std::string root_;
  Host* const host_;

  Mutex mu_;  // Held for a whole poll.
  absl::flat_hash_set<VersionId> refused_ ABSL_GUARDED_BY(mu_);
  // Written under mu_; read by Status without it.
  std::atomic<uint64_t> newest_on_disk_{0};
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_FILE_POLLER_H_

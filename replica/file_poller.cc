#include "replica/file_poller.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "replica/replica_metrics.h"

namespace shardps {
namespace replica {

FilePoller::FilePoller(std::string root, Host* host) : root_(std::move(root)), host_(host) {}

bool FilePoller::Poll(Mode mode) {
  MutexLock lock(&mu_);
  absl::StatusOr<std::vector<checkpoint::CheckpointEntry>> entries =
      checkpoint::ListCheckpoints(root_);
  if (!entries.ok()) return false;  // NOT_FOUND: the job has not written one yet.
  Move move;
  move.from = host_->Served();
  move.resync = mode == Mode::kResync;
  // Is the checkpoint served still on disk as it was loaded? If not (set
  // aside, or written again after a rollback), any complete checkpoint,
  // older ones included, replaces it. (A version from the stream: only
  // newer ones, unless resyncing.)
  const std::optional<VersionId>& served = move.from;
  const bool served_on_disk =
      served.has_value() &&
      (mode == Mode::kNewer ||
       (mode == Mode::kFiles &&
        CreatedMicros(checkpoint::CheckpointPath(root_, served->first)) == served->second));
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    if (CreatedMicros(it->dir).has_value()) {  // Else being written.
      move.newest = it->clock;
      break;
    }
  }
  newest_on_disk_.store(move.newest, std::memory_order_relaxed);
  Metrics().newest.Set(static_cast<double>(move.newest));
  Metrics().lag.Set(!served.has_value() || move.newest <= served->first
                        ? 0.0
                        : static_cast<double>(move.newest - served->first));
  if (ServeNewest(*entries, served_on_disk ? std::optional<uint64_t>(served->first) : std::nullopt,
                  move)) {
    return true;
  }
  if (served.has_value() && !served_on_disk && !move.resync) {
    host_->RecordError(absl::StrCat("version ", served->first,
                                    " is no longer on disk as it was loaded and no other complete "
                                    "checkpoint loads; still serving it"));
  }
  return false;
}

bool FilePoller::ServeNewest(const std::vector<checkpoint::CheckpointEntry>& entries,
                             std::optional<uint64_t> newer_than, const Move& move) {
  // Newest first: the first one that loads becomes the version.
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    if (newer_than.has_value() && it->clock <= *newer_than) break;
    const std::optional<int64_t> created = CreatedMicros(it->dir);
    if (!created.has_value()) continue;  // Being written.
    const VersionId id(it->clock, *created);
    if (refused_.contains(id)) continue;
    Move this_move = move;
    this_move.rollback = move.from.has_value() && it->clock <= move.from->first;
    const absl::Status st = host_->ServeCheckpoint(*it, *created, this_move);
    if (absl::IsAborted(st)) {
      LOG(INFO) << "replica: " << st.message() << "; next poll";
      return false;
    }
    if (st.ok()) return true;
    LOG(WARNING) << "replica: skipping " << it->dir << ": " << st;
    refused_.insert(id);
    host_->RecordError(absl::StrCat(it->dir, ": ", st.ToString()));
  }
  return false;
}

}  // namespace replica
}  // namespace shardps

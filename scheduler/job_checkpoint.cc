// JobCoordinator: writing checkpoint cuts and the checkpoint faults (an
// unusable directory, a failed cut, a corrupt checkpoint), job.h has the
// contract; checkpoint_guard.h the file-level checks.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_guard.h"
#include "scheduler/job.h"

namespace shardps {
namespace {

// A cut that failed because a server is gone or unreachable: the recovery
// that follows handles it; not a checkpoint fault.
bool ServerGone(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsCancelled(st) ||
         absl::IsAborted(st) || st.message().find("stale generation") != absl::string_view::npos;
}

}  // namespace

absl::Status JobCoordinator::CheckCheckpointDir() {
  if (!checkpoints_on_) return absl::OkStatus();
  const std::string& root = config_.checkpoint().dir();
  absl::Status st = ProbeCheckpointDir(root);
  if (st.ok()) st = LoadEvaluations();
  if (st.ok()) return st;
  st = absl::Status(st.code(),
                    absl::StrCat("checkpoint.dir ", root, " is unusable: ", st.message()));
  MutexLock lock(&mu_);
  FailLocked(std::string(st.message()));
  return st;
}

absl::Status JobCoordinator::Cut(uint64_t clock, uint64_t next, uint64_t serving, bool final) {
  Positions positions;
  uint64_t generation;
  std::vector<uint64_t> pinned;
  {
    MutexLock lock(&mu_);
    for (const auto& [rank, p] : positions_) positions[rank] = p.second;
    generation = generation_;
    pinned = evals_.Pinned();
  }
  ops_->PinCheckpoints(pinned);
  const std::optional<PartitionMapProto> map = members_.Map();
  const absl::Time start = absl::Now();
  absl::Status st = map ? ops_->CopyCut(*map, generation, clock)
                        : absl::FailedPreconditionError("checkpoint: no partition map");
  const absl::Time copied = absl::Now();
  // The workers go on while the files are written.
  if (next > 0) {
    clock_.Hold(next);
  } else {
    clock_.Release();
  }
  if (st.ok()) st = ops_->FinishCut(*map, generation, clock, positions);
  const absl::Time written = absl::Now();
  MutexLock lock(&mu_);
  cuts_.Completed(clock, st, serving, copied - start, written - copied, written);
  if (st.ok()) {
    LOG(INFO) << "checkpoint at clock " << clock << ": workers held "
              << absl::FormatDuration(copied - start) << " for the copy, files written in "
              << absl::FormatDuration(written - copied) << " behind them";
    evals_.Enqueue(clock, final);
  } else {
    LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << st;
  }
  changed_.SignalAll();
  return st;
}

bool JobCoordinator::AfterCut(uint64_t clock, const absl::Status& st) {
  if (st.ok()) return false;  // Cut reset the failures.
  // No orphan part files: a directory without MANIFEST is no checkpoint.
  // (Every server has answered, so none is still writing into it; a stalled
  // one that resumes finds it gone and its write fails.)
  if (absl::Status removed = RemoveIncompleteCheckpoint(config_.checkpoint().dir(), clock);
      !removed.ok()) {
    LOG(WARNING) << "cannot remove the failed checkpoint's files: " << removed;
  }
  MutexLock lock(&mu_);
  if (ServerGone(st) || recovery_.pending() != nullptr || Ended())
    return false;  // A recovery takes over.
  const std::optional<absl::Duration> backoff = cuts_.CountFailure(absl::Now());
  if (!backoff) {
    FailLocked(absl::StrCat("checkpoint at clock ", clock, " failed ", cuts_.failures(),
                            " times in a row (checkpoint.dir ", config_.checkpoint().dir(),
                            "): ", st.ToString()));
    return false;
  }
  LOG(ERROR) << "checkpoint at clock " << clock << ": attempt " << cuts_.failures() << " of "
             << CutBook::kAttempts << " failed; trying again in " << absl::FormatDuration(*backoff);
  return true;
}

void JobCoordinator::HoldFirstCut(uint64_t after) {
  if (!checkpoints_on_) return;
  // HoldFirstUnstarted keeps an earlier hold: the first of the two.
  for (uint64_t k : cuts_.multiples()) clock_.HoldFirstUnstarted(k, after + 1);
}

bool JobCoordinator::OnCorruptCheckpoint(const std::string& dir, const absl::Status& why) {
  if (config_.checkpoint().on_corrupt() != CheckpointConfig::FALL_BACK) {
    MutexLock lock(&mu_);
    FailLocked(absl::StrCat(
        "checkpoint ", dir, " is corrupt: ", why.message(),
        "; refusing to fall back to an older one (repair or remove it, or set "
        "checkpoint.on_corrupt: FALL_BACK to restore the newest usable checkpoint with the "
        "corrupt ones set aside)"));
    return false;
  }
  auto aside = SetCheckpointAside(dir, absl::Now());
  if (!aside.ok()) {
    MutexLock lock(&mu_);
    FailLocked(absl::StrCat("checkpoint ", dir, " is corrupt (", why.message(),
                            ") and cannot be set aside: ", aside.status().message()));
    return false;
  }
  LOG(WARNING) << "checkpoint " << dir << " is corrupt (" << why.message() << "): set aside as "
               << *aside << "; falling back to the checkpoint before it "
               << "(checkpoint.on_corrupt: FALL_BACK)";
  return true;
}

bool JobCoordinator::CheckNewerCheckpoints(int64_t newest_usable) {
  if (!checkpoints_on_) return true;
  auto corrupt = FindCorruptCheckpoints(config_.checkpoint().dir(), newest_usable);
  if (!corrupt.ok()) {
    LOG(WARNING) << "cannot look for corrupt checkpoints: " << corrupt.status();
    return true;
  }
  for (const CorruptCheckpoint& c : *corrupt) {
    if (!OnCorruptCheckpoint(c.dir, c.why)) return false;
  }
  return true;
}

}  // namespace shardps

// JobControl: the checkpoint cuts and their faults (a failed cut, a
// corrupt checkpoint); job_control.h has the contract, checkpoint_guard.h
// the file-level checks.
#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_guard.h"
#include "scheduler/job_control.h"

namespace shardps {

void JobControl::TakeFinalCut(uint64_t serving) {
  // Every worker is finished or dead. When all finished training
  // (their last pushes acknowledged, servers still up for the
  // evaluation), the end is a consistent cut too: the job's final
  // checkpoint.
  const std::optional<uint64_t> last = state_.FinalCutDue();
  if (!last) return;
  const auto states = clock_.States();
  const auto finished = [](auto s) { return s == ClockService::WorkerState::kFinished; };
  const bool all_finished = std::all_of(states.begin(), states.end(), finished);
  // Dead workers with data left: their shares are still to be
  // trained (WAIT, REASSIGN), or, when none finished, the job waits
  // for one to come back; the cuts and the final one go on then.
  if (!all_finished && (!drops_ || std::none_of(states.begin(), states.end(), finished))) {
    return;
  }
  if (clock_.MaxClock() > *last) {
    const uint64_t clock = clock_.MaxClock();
    // A failed final cut is taken again at the same clock (nothing
    // trains any more) before the job may end.
    if (AfterCut(clock, Cut(clock, 0, serving, /*final=*/true))) return;
  } else {
    clock_.Release();
  }
  state_.FinalCutTaken();
}

void JobControl::HoldOrRelease(uint64_t next) {
  if (next > 0) {
    clock_.Hold(next);
  } else {
    clock_.Release();
  }
}

absl::Status JobControl::Cut(uint64_t clock, uint64_t next, uint64_t serving, bool final,
                             bool delta_on_last) {
  const JobState::CutInput in = state_.BeginCut();
  const uint64_t generation = in.generation;
  ops_->PinCheckpoints(in.pinned);
  const std::optional<PartitionMapProto> map = members_.Map();
  const absl::Time start = absl::Now();
  absl::Status st = map ? ops_->CopyCut(*map, generation, clock, delta_on_last)
                        : absl::FailedPreconditionError("checkpoint: no partition map");
  const absl::Time copied = absl::Now();
  HoldOrRelease(next);  // The workers go on while the files are written.
  if (st.ok()) st = ops_->FinishCut(*map, generation, clock, in.positions);
  const absl::Time written = absl::Now();
  if (st.ok()) {
    last_cut_ = LastCut{clock, generation, map->version(), start};
  }
  state_.CutEnded(clock, st, serving, copied - start, written - copied, written, final);
  if (st.ok()) {
    LOG(INFO) << "checkpoint at clock " << clock << ": workers held "
              << absl::FormatDuration(copied - start) << " for the copy, files written in "
              << absl::FormatDuration(written - copied) << " behind them";
  } else {
    LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << st;
  }
  return st;
}

void JobControl::CutVersion(uint64_t clock, uint64_t next) {
  const uint64_t generation = state_.generation();
  const std::optional<PartitionMapProto> map = members_.Map();
  const absl::Time start = absl::Now();
  const absl::Status st = map ? ops_->VersionCut(*map, generation, clock)
                              : absl::FailedPreconditionError("version: no partition map");
  const absl::Duration hold = absl::Now() - start;
  HoldOrRelease(next);
  state_.VersionEnded(clock, st, hold);
  if (st.ok()) {
    LOG(INFO) << "version at clock " << clock << " (no files): workers held "
              << absl::FormatDuration(hold) << " for the copy";
  } else {
    LOG(WARNING) << "version at clock " << clock
                 << " failed; the replicas wait for the next cut: " << st;
  }
}

bool JobControl::AfterCut(uint64_t clock, const absl::Status& st) {
  if (st.ok()) return false;  // Cut reset the failures.
  // No orphan part files: a directory without MANIFEST is no checkpoint.
  // (Every server has answered, so none is still writing into it; a stalled
  // one that resumes finds it gone and its write fails.)
  if (absl::Status removed = RemoveIncompleteCheckpoint(config_.checkpoint().dir(), clock);
      !removed.ok()) {
    LOG(WARNING) << "cannot remove the failed checkpoint's files: " << removed;
  }
  // A cut that failed because a server is gone or unreachable is the
  // recovery's that follows, not a checkpoint fault.
  return state_.CutFailed(clock, st, ServerUnreachable(st), config_.checkpoint().dir()).has_value();
}

bool JobControl::OnCorruptCheckpoint(const std::string& dir, const absl::Status& why) {
  if (config_.checkpoint().on_corrupt() != CheckpointConfig::FALL_BACK) {
    state_.Fail(absl::StrCat(
        "checkpoint ", dir, " is corrupt: ", why.message(),
        "; refusing to fall back to an older one (repair or remove it, or set "
        "checkpoint.on_corrupt: FALL_BACK to restore the newest usable checkpoint with the "
        "corrupt ones set aside)"));
    return false;
  }
  auto aside = SetCheckpointAside(dir, absl::Now());
  if (!aside.ok()) {
    state_.Fail(absl::StrCat("checkpoint ", dir, " is corrupt (", why.message(),
                             ") and cannot be set aside: ", aside.status().message()));
    return false;
  }
  LOG(WARNING) << "checkpoint " << dir << " is corrupt (" << why.message() << "): set aside as "
               << *aside << "; falling back to the checkpoint before it "
               << "(checkpoint.on_corrupt: FALL_BACK)";
  return true;
}

bool JobControl::CheckNewerCheckpoints(int64_t newest_usable) {
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

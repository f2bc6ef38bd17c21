#include "scheduler/clock.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/generation.h"

namespace shardps {

ClockService::ClockService(uint32_t num_workers, uint32_t staleness)
    : staleness_(staleness),
      clock_(num_workers, 0),
      state_(num_workers, WorkerState::kLive),
      may_tick_to_(num_workers, 0) {}

std::optional<uint64_t> ClockService::MinLocked() const {
  std::optional<uint64_t> min;
  for (size_t r = 0; r < clock_.size(); ++r) {
    if (state_[r] != WorkerState::kLive) continue;
    if (!min || clock_[r] < *min) min = clock_[r];
  }
  return min;
}

bool ClockService::MayStartLocked(uint64_t step) const {
  if (paused_) return false;
  if (hold_ && step >= *hold_) return false;
  if (staleness_ == kUnbounded) return true;
  const std::optional<uint64_t> min = MinLocked();
  if (!min) return true;
  // min >= step - s, written without unsigned underflow.
  return *min + staleness_ >= step;
}

void ClockService::RecordSpreadLocked() {
  const std::optional<uint64_t> min = MinLocked();
  if (!min) return;
  uint64_t max = *min;
  for (size_t r = 0; r < clock_.size(); ++r) {
    if (state_[r] == WorkerState::kLive) max = std::max(max, clock_[r]);
  }
  max_spread_ = std::max(max_spread_, max - *min);
}

absl::StatusOr<uint64_t> ClockService::WaitToStart(uint32_t rank, uint64_t step,
                                                   absl::Time deadline, uint64_t generation) {
  MutexLock lock(&mu_);
  if (rank >= clock_.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("worker rank ", rank, " out of range [0, ", clock_.size(), ")"));
  }
  while (true) {
    if (!abort_reason_.empty()) return absl::AbortedError(abort_reason_);
    if (generation != generation_) {
      return CheckGeneration("the scheduler's clock", generation, generation_);
    }
    if (state_[rank] != WorkerState::kLive) {
      return absl::FailedPreconditionError(absl::StrCat("worker ", rank, " is no longer live"));
    }
    if (stop_ && step >= *stop_) {
      return absl::OutOfRangeError(
          absl::StrCat("training stopped at clock ", *stop_, ": ", stop_reason_));
    }
    if (MayStartLocked(step)) {
      max_granted_ = std::max(max_granted_, step);
      if (step < UINT64_MAX) may_tick_to_[rank] = std::max(may_tick_to_[rank], step + 1);
      return MinLocked().value_or(step);
    }
    if (!changed_.WaitUntil(&mu_, deadline) && !MayStartLocked(step)) {
      return absl::DeadlineExceededError(absl::StrCat("worker ", rank, " waited for step ", step,
                                                      "; min clock is ", MinLocked().value_or(0),
                                                      paused_ ? " (job paused)" : ""));
    }
  }
}

absl::StatusOr<uint64_t> ClockService::Tick(uint32_t rank, uint64_t clock, uint64_t generation) {
  MutexLock lock(&mu_);
  if (rank >= clock_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("worker rank ", rank, " out of range"));
  }
  if (generation != generation_) {
    return CheckGeneration("the scheduler's clock", generation, generation_);
  }
  if (clock != clock_[rank] && clock != clock_[rank] + 1) {
    return absl::InvalidArgumentError(absl::StrCat("worker ", rank, " ticked to clock ", clock,
                                                   " from clock ", clock_[rank],
                                                   "; clocks advance by one"));
  }
  if (clock != clock_[rank] && clock > may_tick_to_[rank]) {
    return absl::FailedPreconditionError(absl::StrCat(
        "worker ", rank, " ticked to clock ", clock, " but was allowed to start steps < ",
        may_tick_to_[rank], " only (a step is started after WaitClock grants it)"));
  }
  const std::optional<uint64_t> before = MinLocked();
  clock_[rank] = clock;
  RecordSpreadLocked();
  const std::optional<uint64_t> after = MinLocked();
  // Waiters only ever wait for the minimum to rise (or for membership,
  // pause, hold and abort changes, which signal on their own): waking them
  // on every tick costs a thundering herd of futile wake-ups.
  if (after != before) changed_.SignalAll();
  return after.value_or(clock);
}

void ClockService::Rewind(uint64_t generation, uint64_t clock, const std::vector<bool>& live) {
  MutexLock lock(&mu_);
  generation_ = generation;
  for (size_t r = 0; r < clock_.size(); ++r) {
    clock_[r] = clock;
    may_tick_to_[r] = clock;
    state_[r] = r < live.size() && live[r] ? WorkerState::kLive : WorkerState::kDead;
  }
  hold_.reset();
  stop_.reset();
  max_granted_ = clock;
  changed_.SignalAll();
}

void ClockService::SetGeneration(uint64_t generation) {
  MutexLock lock(&mu_);
  generation_ = generation;
  changed_.SignalAll();
}

uint64_t ClockService::generation() const {
  MutexLock lock(&mu_);
  return generation_;
}

void ClockService::MarkDead(uint32_t rank) {
  MutexLock lock(&mu_);
  if (rank >= state_.size() || state_[rank] == WorkerState::kFinished) return;
  state_[rank] = WorkerState::kDead;
  changed_.SignalAll();
}

void ClockService::MarkFinished(uint32_t rank) {
  MutexLock lock(&mu_);
  if (rank >= state_.size()) return;
  state_[rank] = WorkerState::kFinished;
  changed_.SignalAll();
}

void ClockService::Revive(uint32_t rank, uint64_t clock) {
  MutexLock lock(&mu_);
  if (rank >= state_.size()) return;
  state_[rank] = WorkerState::kLive;
  clock_[rank] = clock;
  may_tick_to_[rank] = clock;
  changed_.SignalAll();
}

void ClockService::Hold(uint64_t clock) {
  MutexLock lock(&mu_);
  hold_ = clock;
  changed_.SignalAll();  // A later hold may let waiters start.
}

void ClockService::ResetMaxSpread() {
  MutexLock lock(&mu_);
  max_spread_ = 0;
}

void ClockService::NoteGranted(uint64_t step) {
  MutexLock lock(&mu_);
  max_granted_ = std::max(max_granted_, step);
}

void ClockService::NoteGranted(uint64_t step, uint32_t rank) {
  MutexLock lock(&mu_);
  max_granted_ = std::max(max_granted_, step);
  if (rank < may_tick_to_.size() && step < UINT64_MAX) {
    may_tick_to_[rank] = std::max(may_tick_to_[rank], step + 1);
  }
}

uint64_t ClockService::HoldFirstUnstarted(uint64_t k, uint64_t at_least) {
  k = std::max<uint64_t>(k, 1);
  MutexLock lock(&mu_);
  uint64_t first = std::max(max_granted_ + 1, at_least);
  for (uint32_t r = 0; r < clock_.size(); ++r) {
    if (state_[r] == WorkerState::kLive) first = std::max(first, clock_[r]);
  }
  const uint64_t cut = (first + k - 1) / k * k;
  if (!hold_ || *hold_ > cut) {
    hold_ = cut;
    changed_.SignalAll();
  }
  return *hold_;
}

uint64_t ClockService::StopAtFirstUnstarted(const std::string& why) {
  MutexLock lock(&mu_);
  uint64_t first = max_granted_ + 1;
  for (uint32_t r = 0; r < clock_.size(); ++r) {
    if (state_[r] == WorkerState::kLive) first = std::max(first, clock_[r]);
  }
  if (!stop_ || *stop_ > first) {
    stop_ = first;
    stop_reason_ = why;
    changed_.SignalAll();
  }
  return *stop_;
}

void ClockService::StopAt(uint64_t clock, const std::string& why) {
  MutexLock lock(&mu_);
  if (!stop_ || *stop_ > clock) {
    stop_ = clock;
    stop_reason_ = why;
    changed_.SignalAll();
  }
}

std::optional<uint64_t> ClockService::StopClock() const {
  MutexLock lock(&mu_);
  return stop_;
}

void ClockService::Release() {
  MutexLock lock(&mu_);
  hold_.reset();
  changed_.SignalAll();
}

bool ClockService::AllReachedHold() const {
  MutexLock lock(&mu_);
  if (!hold_) return false;
  const std::optional<uint64_t> min = MinLocked();
  return !min || *min >= *hold_;
}

void ClockService::Abort(const std::string& reason) {
  MutexLock lock(&mu_);
  abort_reason_ = reason.empty() ? "job aborted" : reason;
  changed_.SignalAll();
}

void ClockService::SetPaused(bool paused) {
  MutexLock lock(&mu_);
  paused_ = paused;
  changed_.SignalAll();
}

std::optional<uint64_t> ClockService::HeldClock() const {
  MutexLock lock(&mu_);
  return hold_;
}

uint64_t ClockService::MaxGranted() const {
  MutexLock lock(&mu_);
  return max_granted_;
}

std::optional<uint64_t> ClockService::MinClock() const {
  MutexLock lock(&mu_);
  return MinLocked();
}

uint64_t ClockService::MaxClock() const {
  MutexLock lock(&mu_);
  uint64_t max = 0;
  for (uint64_t c : clock_) max = std::max(max, c);
  return max;
}

uint64_t ClockService::MaxSpread() const {
  MutexLock lock(&mu_);
  return max_spread_;
}

std::vector<uint64_t> ClockService::Clocks() const {
  MutexLock lock(&mu_);
  return clock_;
}

uint64_t ClockService::MayTickTo(uint32_t rank) const {
  MutexLock lock(&mu_);
  return rank < may_tick_to_.size() ? may_tick_to_[rank] : 0;
}

std::vector<ClockService::WorkerState> ClockService::States() const {
  MutexLock lock(&mu_);
  return state_;
}

std::vector<uint32_t> ClockService::LiveRanks() const {
  MutexLock lock(&mu_);
  std::vector<uint32_t> live;
  for (uint32_t r = 0; r < state_.size(); ++r) {
    if (state_[r] == WorkerState::kLive) live.push_back(r);
  }
  return live;
}

}  // namespace shardps

// The clock service: enforces BSP / SSP(s) / ASP between workers
// (docs/design.md, "Consistency modes").
//
// A worker's clock c is the number of steps it has completed. Let min be the
// minimum clock over live, unfinished workers (dead and finished workers
// leave the minimum; with none left, nothing waits). A worker may start step
// t only when min >= t - s. BSP is s = 0; ASP never waits (s = kUnbounded).
// Consequence checked by tests: the spread max - min of completed clocks over
// live unfinished workers never exceeds s + 1.
//
// A checkpoint barrier can *hold* the clocks at C: no worker may start step
// C (or later) until Release(), whatever the mode.
//
// Job generations (common/generation.h): waits and ticks name the worker's
// generation; one other than the service's is refused (a stale one with
// FAILED_PRECONDITION "stale generation: ..."). Rewind() moves the service
// into a new generation with every clock set back, and wakes every wait of
// the old one, which is then refused.
//
// Thread-safe. WaitToStart blocks (condition variable, no polling) until
// allowed, the deadline, or Abort().
#ifndef SHARDPS_SCHEDULER_CLOCK_H_
#define SHARDPS_SCHEDULER_CLOCK_H_

#include <cstdint>
#include <limits>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shardps {

class ClockService {
 public:
  static constexpr uint32_t kUnbounded = std::numeric_limits<uint32_t>::max();

  enum class WorkerState { kLive, kDead, kFinished };

  // `staleness`: 0 for BSP, s for SSP, kUnbounded for ASP.
  ClockService(uint32_t num_workers, uint32_t staleness);
  ClockService(const ClockService&) = delete;
  ClockService& operator=(const ClockService&) = delete;

  // Blocks until worker `rank` may start `step`. Returns the minimum clock at
  // that moment. DEADLINE_EXCEEDED at `deadline`; INVALID_ARGUMENT for a bad
  // rank; FAILED_PRECONDITION if the worker is dead or finished; ABORTED
  // after Abort() (with its reason).
  absl::StatusOr<uint64_t> WaitToStart(uint32_t rank, uint64_t step, absl::Time deadline,
                                       uint64_t generation = 0);

  // Worker `rank` has completed `clock` steps. Clocks only move forward by
  // one: a repeated tick is accepted (idempotent retry), a jump or a step back
  // is INVALID_ARGUMENT. A worker completes only steps it was allowed to
  // start: a tick to a clock beyond its largest granted step + 1 (WaitToStart,
  // or NoteGranted for a rejoining process) is FAILED_PRECONDITION. Returns
  // the new minimum.
  absl::StatusOr<uint64_t> Tick(uint32_t rank, uint64_t clock, uint64_t generation = 0);

  // Moves into `generation`: every worker's clock becomes `clock`; workers
  // with live[r] are live, the others dead; the hold is released and the
  // largest granted step becomes `clock` (nothing at or after it started).
  void Rewind(uint64_t generation, uint64_t clock, const std::vector<bool>& live);
  uint64_t generation() const;
  // Moves into `generation` keeping every clock (a restarted scheduler
  // taking over the job's state as it is).
  void SetGeneration(uint64_t generation);

  // Membership changes. A dead worker may come back (Revive) at a clock,
  // e.g. its last recorded one after a restart; it may tick past that clock
  // only after a grant (WaitToStart, NoteGranted).
  void MarkDead(uint32_t rank);
  void MarkFinished(uint32_t rank);
  void Revive(uint32_t rank, uint64_t clock);
  // Records that some worker was allowed to start `step` elsewhere (a
  // process rejoining a restarted scheduler), so no cut is placed at or
  // below it.
  void NoteGranted(uint64_t step);
  // The same for worker `rank` itself: it may complete `step` (tick step + 1)
  // without asking this service again.
  void NoteGranted(uint64_t step, uint32_t rank);

  // Checkpoint barrier: workers may not start step >= `clock` until Release
  // (or a Hold at a later clock).
  void Hold(uint64_t clock);
  // Atomically holds at the smallest multiple of `k` (k >= 1) that is
  // >= `at_least` and that no worker has started, i.e. >= MaxGranted() + 1
  // and >= every live clock; an existing earlier hold is kept. Returns the
  // held clock.
  uint64_t HoldFirstUnstarted(uint64_t k, uint64_t at_least = 1);
  void Release();
  // True once every live unfinished worker has completed >= the held clock.
  bool AllReachedHold() const;
  // The held clock, if any.
  std::optional<uint64_t> HeldClock() const;
  // The largest step any worker has been allowed to start (0 if none): a
  // hold at MaxGranted() + 1 cuts no started step in two.
  uint64_t MaxGranted() const;

  // Early stopping: no worker may start step >= the first clock no worker
  // has started (as HoldFirstUnstarted with k = 1), which is returned; a
  // wait for such a step fails with OUT_OF_RANGE ("training stopped at clock
  // S: <why>"), which the trainer takes as the end of its data. An earlier
  // stop is kept. StopAt sets a known stop clock (a restarted scheduler);
  // Rewind lifts the stop.
  uint64_t StopAtFirstUnstarted(const std::string& why);
  void StopAt(uint64_t clock, const std::string& why);
  std::optional<uint64_t> StopClock() const;

  // Fails every current and future wait with ABORTED(reason).
  void Abort(const std::string& reason);
  // Pauses (true) or resumes starts, e.g. while a server is dead.
  void SetPaused(bool paused);

  // The minimum over live unfinished workers, or nullopt if there are none.
  std::optional<uint64_t> MinClock() const;
  uint64_t MaxClock() const;
  // The largest spread (max - min of completed clocks over live unfinished
  // workers) observed after any tick.
  uint64_t MaxSpread() const;
  void ResetMaxSpread();
  std::vector<uint64_t> Clocks() const;
  // The largest clock worker `rank` may tick to (its largest granted step
  // + 1, or the clock it was set to); 0 for a bad rank.
  uint64_t MayTickTo(uint32_t rank) const;
  std::vector<WorkerState> States() const;
  // The ranks whose state is kLive, increasing: the workers whose pushes
  // close a BSP clock (ControlRequest.active_workers).
  std::vector<uint32_t> LiveRanks() const;
  uint32_t staleness() const { return staleness_; }

 private:
  std::optional<uint64_t> MinLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool MayStartLocked(uint64_t step) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RecordSpreadLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const uint32_t staleness_;

  mutable Mutex mu_;
  CondVar changed_;
  std::vector<uint64_t> clock_ ABSL_GUARDED_BY(mu_);
  std::vector<WorkerState> state_ ABSL_GUARDED_BY(mu_);
  // Per worker: the largest clock it may tick to (its largest granted step
  // + 1, or the clock it was set to).
  std::vector<uint64_t> may_tick_to_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> hold_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> stop_ ABSL_GUARDED_BY(mu_);
  std::string stop_reason_ ABSL_GUARDED_BY(mu_);
  bool paused_ ABSL_GUARDED_BY(mu_) = false;
  std::string abort_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t max_spread_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t max_granted_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CLOCK_H_

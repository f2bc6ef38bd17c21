// JobClock: what the trainer (trainer.h) needs from the job's clock, in a
// header of its own so that the trainer's parts use it without the
// trainer's public header.
#ifndef SHARDPS_WORKER_JOB_CLOCK_H_
#define SHARDPS_WORKER_JOB_CLOCK_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"

namespace shardps {

// What the trainer needs from the job's clock (PS mode: the scheduler,
// through an adapter over SchedulerClient; tests: a fake). Called from the
// training thread and from the push chain, possibly at once: must be
// thread-safe.
class JobClock {
 public:
  virtual ~JobClock() = default;
  // Blocks until worker `rank` may start step `step` (OK), or `timeout`
  // passed (DEADLINE_EXCEEDED). A zero timeout probes without waiting. The
  // trainer waits in slices of 10 s (asking again after DEADLINE_EXCEEDED,
  // up to 1000 times). OUT_OF_RANGE: the job stopped training before
  // `step` (early stopping); Train ends there as at the end of its data and
  // returns OK. Any other error (e.g. a stale generation) ends training.
  virtual absl::Status WaitClock(uint32_t rank, uint64_t step, absl::Duration timeout) = 0;
  // Worker `rank` finished step clock - 1 (its push acknowledged); `position`
  // is its data position after that step (EncodePosition).
  virtual absl::Status Tick(uint32_t rank, uint64_t clock, const std::string& position) = 0;
  // A periodic progress report; best effort (the trainer ignores errors).
  virtual absl::Status ReportMetrics(const MetricsReport& report) = 0;
  // The job's minimum clock (every live worker has ticked it) as the clock
  // last reported it (answers to WaitClock and Tick) in this worker's
  // current generation; nullopt if unknown. The embedding cache tags the
  // rows it pulls with it (embedding_cache.h); without it a row is only
  // known to be fresh for the step it was pulled for.
  virtual std::optional<uint64_t> MinClock() const { return std::nullopt; }
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_JOB_CLOCK_H_

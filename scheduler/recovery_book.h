// RecoveryBook: the scheduler's book of the job's recoveries (job.h has the
// recovery contract), kept apart from the coordinator's other state:
//
//   - the pending recovery: the failures the control thread has yet to
//     recover from (servers declared dead or replaced, a worker's request to
//     roll back), gathered into one, since one rollback covers them all;
//   - what the running recovery does, for the job's state ("recovering") and
//     for the messages of requests that wait for it;
//   - the report of every recovery; a rollback's report is complete once
//     every live worker has started again (the end of its rewind).
//
// The book decides nothing: the control thread (job_control.h) pauses the
// clocks, restores the servers and rewinds the workers, and tells the book
// what it did.
//
// Not thread-safe: JobState (job_state.h) holds it under its lock.
#ifndef SHARDPS_SCHEDULER_RECOVERY_BOOK_H_
#define SHARDPS_SCHEDULER_RECOVERY_BOOK_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/scheduler.pb.h"

namespace shardps {

class RecoveryBook {
 public:
  // Failures the control thread has to recover from.
  struct Pending {
    std::string cause;          // "; "-joined, each cause once.
    absl::Time failed_at;       // The first failed process's last heartbeat.
    absl::Time detected_at;     // When the first failure was seen.
    std::set<uint32_t> silent;  // Servers declared dead; may come back with state.
    std::set<uint32_t> lost;    // Servers replaced by a new process: state gone.
    bool roll_back = false;     // A worker asked for a rollback.
  };

  // Opens the pending recovery, or adds `cause` to the open one (unless it
  // is there already). Returns it.
  Pending& Pend(const std::string& cause, absl::Time failed_at, absl::Time now);
  // The pending recovery, or nullptr.
  Pending* pending() { return pending_ ? &*pending_ : nullptr; }
  const Pending* pending() const { return pending_ ? &*pending_ : nullptr; }
  // Forgets the pending failures: the recovery starting now covers them.
  void ClearPending() { pending_.reset(); }

  // What the running recovery does now (shown to requests waiting for it).
  void SetDoing(std::string what) { doing_ = std::move(what); }
  // The running recovery is over (or none runs).
  void ClearDoing() { doing_.clear(); }
  // Nothing pending and nothing running.
  bool idle() const { return !pending_ && doing_.empty(); }
  // What a request waiting for the job to be idle waits for ("" if idle).
  std::string Waiting() const;

  // Adds `report` (complete or not) to the job's recoveries.
  void Record(const RecoveryReport& report);
  // A rollback's rewind began at `now`: the workers start again.
  void RewindStarted(absl::Time now) { rewind_started_ = now; }
  // Completes the newest incomplete report: its rewind ends at `now`, its
  // total is the sum of its phases. No-op if every report is complete.
  void CompleteRewind(absl::Time now);
  const std::vector<RecoveryReport>& reports() const { return reports_; }

 private:
  std::optional<Pending> pending_;
  std::string doing_;
  std::vector<RecoveryReport> reports_;
  absl::Time rewind_started_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_RECOVERY_BOOK_H_

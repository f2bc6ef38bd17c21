// CutBook: the scheduler's book of checkpoint cuts (job.h has the
// checkpoint contract), kept apart from the coordinator's other state:
//
//   - where cuts go: at multiples of checkpoint.every_steps and
//     training.eval_every_steps, after checkpoint.every_seconds, and for
//     on-demand requests (numbered; a cut placed after a request serves it);
//     and which of them are versions only (checkpoint.version_every_steps:
//     no files, VersionOnly);
//   - what the cuts did: the last one's clock, outcome and timings, the
//     checkpoints written, the last complete one, and whether the job's
//     final cut is taken (in this generation);
//   - failures in a row of cuts that failed for a reason of their own (not a
//     server gone: a recovery handles that), and when to try again:
//     1 s after the first, 2 s after the second, and the third fails the
//     job.
//
// The book decides nothing about servers or clocks: the control thread
// (job_control.h) holds the clocks, copies and writes, and tells the book
// what happened.
//
// Not thread-safe: JobState (job_state.h) holds it under its lock.
#ifndef SHARDPS_SCHEDULER_CUT_BOOK_H_
#define SHARDPS_SCHEDULER_CUT_BOOK_H_

#include <cstdint>
#include <optional>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"

namespace shardps {

class CutBook {
 public:
  // Cuts tried in a row before the job fails.
  static constexpr int kAttempts = 3;

  // Reads checkpoint.every_steps, every_seconds and
  // training.eval_every_steps. With every_seconds, the first cut is due at
  // once (at the first clock no worker has started).
  explicit CutBook(const JobConfig& config);

  // ---- Where cuts go ----
  // The non-zero step multiples cuts are placed at.
  const std::vector<uint64_t>& multiples() const { return multiples_; }
  // The first multiple after `clock` (0: none).
  uint64_t NextAfter(uint64_t clock) const;
  // every_seconds have passed since the last cut (never when it is 0).
  bool TimeDue(absl::Time now) const;
  // The cut at `clock` is a version for the serving replicas only
  // (config.proto CheckpointConfig.version_every_steps): `clock` is a
  // multiple of version_every_steps and of no checkpoint multiple, a
  // complete checkpoint of this generation exists to be its base, and no
  // checkpoint is due otherwise (by time, a retry, a request not served).
  bool VersionOnly(uint64_t clock, absl::Time now) const;
  // A version-only cut at `clock` ended with `status` after holding the
  // workers for `hold` (it does not count as a cut for the others).
  void VersionCompleted(uint64_t clock, const absl::Status& status, absl::Duration hold);
  uint64_t versions() const { return versions_; }
  uint64_t last_version() const { return last_version_; }
  // A failed cut waits to be tried again and its time has come.
  bool RetryDue(absl::Time now) const { return failures_ > 0 && now >= retry_at_; }
  // The final cut is still to be taken and no failed cut waits.
  bool FinalDue(absl::Time now) const { return !final_done_ && now >= retry_at_; }

  // ---- On-demand requests ----
  // Numbers a new request.
  uint64_t Request() { return ++requested_; }
  // The newest request's number (0: none).
  uint64_t requested() const { return requested_; }
  // A cut that completed (well or not) after request `seq` was made.
  bool Served(uint64_t seq) const { return served_ >= seq; }
  // The last cut's clock, or its error.
  absl::StatusOr<uint64_t> LastCut() const;

  // ---- What cuts did ----
  // A cut at `clock` ended with `status` at `end`, after holding the
  // workers for `hold` and writing for `write`; it served the requests up
  // to `served`. A written one is complete and resets the failures.
  void Completed(uint64_t clock, const absl::Status& status, uint64_t served, absl::Duration hold,
                 absl::Duration write, absl::Time end);
  // The last cut failed for a reason of its own at `now`. Returns the wait
  // before it is tried again, or nullopt if that was the kAttempts-th
  // failure in a row (the job fails).
  std::optional<absl::Duration> CountFailure(absl::Time now);
  int failures() const { return failures_; }

  // The job's final cut is taken (in this generation).
  void FinalDone() { final_done_ = true; }
  bool final_done() const { return final_done_; }
  // The job took over (nothing rolled back) with `last_complete` the newest
  // complete checkpoint, or rolled back to a checkpoint at `last_complete`
  // (0: to the initial values): the final cut is to be taken again.
  void StartFrom(uint64_t last_complete);
  uint64_t last_complete() const { return last_complete_; }
  // Clocks of the checkpoints written, oldest first.
  const std::vector<uint64_t>& written() const { return written_; }
  // The last written cut's timings.
  double last_hold_sec() const { return last_hold_sec_; }
  double last_write_sec() const { return last_write_sec_; }
  double last_version_hold_sec() const { return last_version_hold_sec_; }

 private:
  std::vector<uint64_t> multiples_;  // Versions' included.
  std::vector<uint64_t> checkpoint_multiples_;
  uint64_t version_every_ = 0;
  absl::Duration every_;   // every_seconds; zero: off.
  uint64_t versions_ = 0;  // Version-only cuts that succeeded.
  uint64_t last_version_ = 0;
  double last_version_hold_sec_ = 0;

  uint64_t requested_ = 0;
  uint64_t served_ = 0;
  absl::Status last_status_;
  uint64_t last_clock_ = 0;
  absl::Time last_time_;
  uint64_t last_complete_ = 0;
  bool final_done_ = false;
  std::vector<uint64_t> written_;
  int failures_ = 0;
  absl::Time retry_at_;
  double last_hold_sec_ = 0;
  double last_write_sec_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CUT_BOOK_H_

// EvalBook: the scheduler's record of periodic evaluation
// (training.eval_every_steps): which checkpoints wait to be evaluated, who
// evaluates each, their results, the best one, and early stopping.
//
// A checkpoint is *due* for evaluation when it is written at a clock that is
// a multiple of every_steps, or it is the job's final one (Enqueue). A
// worker's evaluator takes the oldest due checkpoint nobody holds (Take);
// its lease ends when it reports (Record / Failed), when the coordinator
// says the holder is gone (Release), or when it has held the checkpoint for
// longer than Options::lease (ExpireLeases: an evaluator alive but stuck
// counts as a failed attempt). A checkpoint whose evaluation failed
// kMaxAttempts times is dropped with a warning (the job does not wait for
// it forever).
//
// Best and early stopping. The *best* evaluation is the one with the
// highest AUC (the earliest of equal ones); its checkpoint is the job's
// kept one. Early stopping (patience >= 1) walks the evaluations in clock
// order, up to the first clock still due: an evaluation *improves* when its
// AUC exceeds the last improving one's by more than min_delta (the first
// always does); `patience` evaluations in a row that do not improve say the
// job should stop (ShouldStop). A NaN AUC (one class only) never improves.
//
// Persistence: every change of the results or of the stop clock rewrites
// <dir>/EVALUATIONS (text, one "eval <clock> <auc> <logloss> <examples>
// <seconds>" line per evaluation, "stopped_at <clock>") and <dir>/BEST
// (the best clock, one line; what ps_score and ps_export load by default),
// each atomically. Load() reads them back, so a restarted scheduler keeps
// the best checkpoint and the stop. DropAfter(c) forgets what lies after a
// rollback to clock c.
//
// Thread-compatible: the coordinator calls it under its lock.
#ifndef SHARDPS_SCHEDULER_EVAL_BOOK_H_
#define SHARDPS_SCHEDULER_EVAL_BOOK_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"

namespace shardps {

class EvalBook {
 public:
  static constexpr int kMaxAttempts = 3;
  static constexpr const char* kEvaluationsFile = "EVALUATIONS";
  static constexpr const char* kBestFile = "BEST";

  struct Options {
    std::string dir;           // checkpoint.dir; empty: nothing persisted.
    uint64_t every_steps = 0;  // 0: periodic evaluation off.
    uint32_t patience = 0;     // 0: no early stopping.
    double min_delta = 0;
    // How long one evaluation may take before it is given to another
    // worker (and counted as a failed attempt).
    absl::Duration lease = absl::Hours(1);
  };

  explicit EvalBook(Options options);

  bool on() const { return o_.every_steps > 0; }

  // Reads <dir>/EVALUATIONS if it exists (NOT_FOUND is not an error).
  // DATA_LOSS naming the file and line for a malformed one.
  absl::Status Load();

  // The checkpoint at `clock` was written; `final`: the job's last one.
  // Queued if due and not evaluated yet.
  void Enqueue(uint64_t clock, bool final);
  // The oldest due checkpoint not held by anyone, now held by `rank` from
  // `now` on.
  std::optional<uint64_t> Take(uint32_t rank, absl::Time now = absl::Now());
  // Leases taken before now - Options::lease end as failed attempts, with a
  // warning naming the worker and the clock.
  void ExpireLeases(absl::Time now = absl::Now());
  // Every checkpoint held by `rank` is due again (its holder is gone).
  void Release(uint32_t rank);
  // The evaluation of e.clock() by `rank`: recorded and persisted. An
  // evaluation of a checkpoint that is not due (a duplicate, or one a
  // rollback dropped) is ignored (OK). INVALID_ARGUMENT for an AUC outside
  // [0, 1] (NaN allowed) or a negative logloss; FAILED_PRECONDITION, nothing
  // recorded, when the checkpoint is leased to another rank (only the
  // holder reports; one nobody holds, as after a scheduler restart, is
  // taken from any rank).
  absl::Status Record(uint32_t rank, const CheckpointEval& e);
  // The evaluation of `clock` by `rank` failed; it is due again, or dropped
  // after kMaxAttempts. Ignored from a rank that does not hold it.
  void Failed(uint32_t rank, uint64_t clock, const std::string& why);
  // Forgets evaluations, due checkpoints and a stop after `clock`.
  absl::Status DropAfter(uint64_t clock);

  // Checkpoints due or held (not yet evaluated).
  bool Outstanding() const { return !due_.empty(); }
  std::vector<uint64_t> DueClocks() const;
  // The checkpoints GC must keep: the best one and those not evaluated yet.
  std::vector<uint64_t> Pinned() const;
  std::optional<CheckpointEval> Best() const;
  const std::map<uint64_t, CheckpointEval>& evaluations() const { return evals_; }
  // The newest evaluation, if any.
  std::optional<CheckpointEval> Latest() const;

  bool ShouldStop() const;
  uint64_t stopped_at() const { return stopped_at_; }  // 0: not stopped.
  absl::Status SetStopped(uint64_t clock);

 private:
  struct Due {
    std::optional<uint32_t> holder;
    absl::Time taken;  // When holder took it.
    int attempts = 0;
  };
  absl::Status Persist() const;

  const Options o_;
  std::map<uint64_t, CheckpointEval> evals_;
  std::map<uint64_t, Due> due_;
  uint64_t stopped_at_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_EVAL_BOOK_H_

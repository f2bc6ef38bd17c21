// CheckpointEvaluator: a worker's side of periodic evaluation
// (training.eval_every_steps; docs/design.md, "Periodic evaluation").
//
// A thread of its own asks the scheduler for a checkpoint to evaluate
// (SchedulerClient::Evaluation, a long poll), restores it into this process
// (worker/export/restored_job.h: the checkpoint's files, all verified, into
// local tables; the same code as ps_score), scores the eval files with
// Trainer::Evaluate and reports the AUC and logloss with its next request.
// Training goes on meanwhile: the checkpoint is a consistent cut the
// servers already copied, so the evaluation equals ps_score's on that
// checkpoint, whatever the job does since. Every worker runs one; the
// scheduler gives each checkpoint to one of them.
//
// Costs: while it evaluates, the worker holds a second copy of the whole
// model (the checkpoint's rows) and uses one more thread's CPU. It needs to
// read checkpoint.dir (shared with the scheduler and servers).
//
// Errors: a failed restore or evaluation is reported to the scheduler
// (which gives the checkpoint to a worker again, kMaxAttempts times); an
// unreachable scheduler is retried every second until Stop.
//
// Thread-safe: the constructor starts the thread, the destructor stops it
// (an evaluation under way is cancelled at its next batch).
#ifndef SHARDPS_WORKER_CHECKPOINT_EVALUATOR_H_
#define SHARDPS_WORKER_CHECKPOINT_EVALUATOR_H_

#include <atomic>
#include <cstdint>
#include <string>
#include <thread>
#include <vector>

#include "common/client/scheduler_client.h"

namespace shardps {

class CheckpointEvaluator {
 public:
  struct Options {
    uint32_t rank = 0;
    std::string config_path;     // The job config (RestoreJob loads it).
    std::string checkpoint_dir;  // checkpoint.dir.
    std::vector<std::string> eval_files;
    SchedulerClient* scheduler = nullptr;  // Not owned; outlives this.
  };

  explicit CheckpointEvaluator(Options options);
  ~CheckpointEvaluator();
  CheckpointEvaluator(const CheckpointEvaluator&) = delete;
  CheckpointEvaluator& operator=(const CheckpointEvaluator&) = delete;

 private:
  void Loop();
  // Restores the checkpoint at `clock` and evaluates it into `done`.
  absl::Status EvaluateCheckpoint(uint64_t clock, CheckpointEval* done);

  const Options o_;
  std::atomic<bool> stop_{false};
  std::thread thread_;  // Last: started once the rest is built.
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_CHECKPOINT_EVALUATOR_H_

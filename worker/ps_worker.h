// The worker process: what ps_worker does once its flags are parsed, as a
// library the binary's main calls (worker/ps_worker_main.cc).
//
// PS mode: registers with the scheduler (which gives the rank, the data
// shard and the partition map), trains against the servers under the job's
// consistency mode, then waits for every worker to finish; rank 0 evaluates
// the held-out files. With training.eval_every_steps every worker also
// evaluates the checkpoints the scheduler hands it (checkpoint_evaluator.h)
// and stops early when the scheduler says so. Local mode: the same trainer
// with the tables in this process, the single-machine baseline.
//
// In PS mode the worker stays up after its part until the job ends: if the
// job rolls back (a server failed), it trains again from the scheduler's
// start point; with cluster.on_worker_loss REASSIGN it may be handed a lost
// worker's share to train as that rank (WaitStartResponse.adopt_rank).
// Restart it with the same flags when it dies: it takes its rank back and
// resumes from its last acknowledged step.
//
// Prints one line "PS_WORKER_RESULT key=value ..." at the end. Exit status 0
// on success, 1 on a training error (reported to the scheduler first), 2 on
// bad flags or config, 3 when the job failed or the scheduler gave this
// worker up.
#ifndef SHARDPS_WORKER_PS_WORKER_H_
#define SHARDPS_WORKER_PS_WORKER_H_

#include <cstdint>
#include <string>

#include "proto/config.pb.h"

namespace shardps {

// ps_worker's flags.
struct WorkerOptions {
  std::string config_path;      // The job config's file (checkpoint evaluation reloads it).
  std::string scheduler;        // host:port (PS mode).
  int rank = -1;                // The rank to ask for; -1: any.
  std::string device = "auto";  // auto, cpu or cuda.
  uint64_t max_steps = 0;       // Stop at this clock (0: training.max_steps or the data's end).
  std::string loss_log;         // Per-step losses, if set.
  bool checksum = false;        // Print a checksum of the trained rows' final weights.
  int step_delay_ms = 0;        // Testing: sleep this long in every step.
  std::string wire = "fp32";    // fp32, fp16 or bf16.
  // Testing: "RANK:CLOCK:MARKER" (PsClient::Options::testing_exit_mid_push_clock).
  std::string testing_exit_mid_push;
};

// Local mode: the tables in this process. Returns the exit status.
int RunLocalWorker(JobConfig config, const WorkerOptions& options);
// PS mode (options.scheduler set). Returns the exit status.
int RunPsWorker(JobConfig config, const WorkerOptions& options);

}  // namespace shardps

#endif  // SHARDPS_WORKER_PS_WORKER_H_

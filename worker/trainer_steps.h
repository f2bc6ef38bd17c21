// The trainer's step pipelines (internal to worker/trainer): how the steps
// of one Train() are scheduled against the data, the parameters and the job
// clock. worker/trainer.h says what a step does and why; here is which
// pipeline runs when:
//
//  - kSynchronous (BSP, or no prefetch): per step, take the batch, wait for
//    the clock, pull, compute, push and wait for the acknowledgement, tick.
//  - kPrefetching (SSP/ASP with prefetch, with a clock or in local mode):
//    read-your-own-writes prefetch (worker/trainer_split_pull.h). While step
//    t computes, the rows of step t + 1 that step t does not push are
//    already pulled (if the clock allows step t + 1 then); once step t's
//    push is acknowledged, the rows it pushed and the dense chunks are
//    pulled and clock t + 1 ticked, then step t + 1 computes. Every step
//    sees all of this worker's earlier pushes: with one worker the run is
//    the synchronous one, bit for bit.
//
// Either pipeline, with the embedding cache (StepEnv::cache): a step's rows
// the cache serves are not pulled; the others come with their optimizer
// state and go into the cache before the step computes, when the hits are
// copied out; each step's gradients are applied to the cached rows after it
// computes (trainer_split_pull.h).
//
// Thread-safety: RunSteps blocks the calling thread and calls the
// ParamStore and the JobClock from that thread only.
#ifndef SHARDPS_WORKER_TRAINER_STEPS_H_
#define SHARDPS_WORKER_TRAINER_STEPS_H_

#include <cstdint>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/config.pb.h"
#include "worker/embedding_cache.h"
#include "worker/job_clock.h"
#include "worker/model/model.h"
#include "worker/train_summary.h"
#include "worker/trainer_data.h"
#include "worker/trainer_params.h"
#include "worker/trainer_progress.h"

namespace shardps {
namespace trainer_internal {

enum class StepPipeline { kSynchronous, kPrefetching };

// The pipeline for `config` (finalized), with or without a job clock.
StepPipeline ChooseStepPipeline(const JobConfig& config, bool has_clock);

// What the steps of one Train() use. Nothing is owned.
struct StepEnv {
  DataPipeline* data = nullptr;
  StepParams* params = nullptr;
  Model* model = nullptr;
  TrainProgress* progress = nullptr;
  JobClock* clock = nullptr;  // Null: local mode (every step may start).
  uint32_t rank = 0;
  LrScheduleConfig lr_schedule;
  uint64_t start_step = 0;
  uint64_t max_steps = 0;                            // The clock to stop at; 0: the data's end.
  absl::Duration step_delay = absl::ZeroDuration();  // Slept in every step.
  // Every key trained on, per model table; null: not tracked.
  std::vector<absl::flat_hash_set<uint64_t>>* seen = nullptr;
  // The job's tables (finalized): with prefetch, the trainer replays its
  // own pending step where it can (trainer_split_pull.h). Null: never.
  const JobConfig* config = nullptr;
  // The embedding cache (training.cache; not owned); null: off. Used only
  // where it holds: with a clock, SSP or ASP, and replay where prefetching.
  EmbeddingCache* cache = nullptr;
};

// Runs steps start_step, start_step + 1, ... until max_steps or the end of
// the data, every step reported to env.progress. Returns the clock after
// the last step (start_step if none ran), once the last push is
// acknowledged and ticked. The first error of the data, the model, the
// parameters or the clock ends the steps and is returned.
absl::StatusOr<uint64_t> RunSteps(StepPipeline pipeline, const StepEnv& env);

}  // namespace trainer_internal
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_STEPS_H_

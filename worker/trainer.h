// Trainer: one worker's training loop, the same in local and PS mode.
//
// Per step t: take a prepared batch (read, keys deduplicated per table, on
// the data thread), wait for the job clock to allow step t, pull the
// batch's unique rows and every dense chunk, run forward/backward, push one
// gradient per unique key and the dense gradient, wait for the push to be
// acknowledged, tick the clock to t + 1 with the data position after the
// batch (where a restart from a checkpoint at clock t + 1 resumes).
//
// The clock (JobClock below; PS mode: the scheduler's) decides when a step
// may start. In local mode there is none: no waiting, ticks or reports.
// A wait refused with OUT_OF_RANGE (early stopping: the scheduler stopped
// every worker at that step) ends Train normally there. Any other clock
// error than a wait's DEADLINE_EXCEEDED (e.g. a stale generation,
// common/generation.h) ends Train, which returns it and neither pulls nor
// pushes any later step.
//
// Prefetch (staleness >= 1 and training.prefetch) reads the worker's own
// writes (trainer_split_pull.h): step t + 1's pull is split against step
// t's keys. The rows step t does not push are pulled while step t computes
// (if the clock allows step t + 1 right then: a probe, WaitClock with a
// zero timeout). The rows it pushes and the dense chunks are pulled at the
// same time with their optimizer state, before step t's push is sent, and
// step t's gradients are replayed on them with the servers' optimizer
// (where that holds: fp32 on the wire, no admission); otherwise they are
// pulled once step t's push is acknowledged. A chain on its own thread
// sends step t's push, waits for its acknowledgement, ticks clock t + 1 and
// probes and starts step t + 2's pulls. So every step sees all of this
// worker's earlier pushes; with one worker, prefetch changes nothing, bit
// for bit.
// In BSP there is no prefetch: the next pull must see this step's
// (aggregated) push.
//
// The embedding cache (training.cache; SSP and ASP, in PS mode, where
// replay holds: fp32 on the wire, no admission): rows within the staleness
// bound are served from the worker's cache instead of pulled, the worker's
// own pushes applied to them (embedding_cache.h, trainer_split_pull.h). In
// BSP it is off: every step pulls every row, bit for bit as without it. It
// lives for one Train(): a rollback or a new generation starts empty.
//
// Dense compression (training.dense_compression): the dense gradient goes
// through a DenseCompressor (dense_compression.h: top-k with error
// feedback) and is pushed in sparse form. Mixed precision is the model's
// (ModelOptions::precision); the trainer always sees fp32 gradients.
//
// Restarts: Train runs steps start_step .. max_steps - 1 (or to the end of
// the data), reading from start_position; its first clock wait is for
// start_step and its ticks continue from start_step + 1.
//
// Determinism: with one intra-op thread, a fixed seed and data order, local
// mode and a 1-worker/1-server BSP job take identical steps (the parity
// test): one dedup function (worker/model/dedup.h), the same optimizer code
// (server/), fp32 on the wire.
//
// Layout (the other files are private to the trainer): trainer_data.h (the
// data thread: read, dedup, buffers), trainer_params.h (a step's pulls and
// pushes), trainer_steps.h (the step pipelines: synchronous and
// prefetching), trainer_split_pull.h (the read-your-own-writes split),
// trainer_progress.h (loss log, summary, metrics, reports).
//
// Not thread-safe: one Trainer per process; it runs a data thread of its
// own, and with prefetch the push chain on another.
#ifndef SHARDPS_WORKER_TRAINER_H_
#define SHARDPS_WORKER_TRAINER_H_

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "worker/data/batch.h"
#include "worker/job_clock.h"
#include "worker/model/model.h"
#include "worker/param_store.h"
#include "worker/train_summary.h"

namespace shardps {

struct TrainerOptions {
  JobConfig config;  // Finalized (common/config.h).
  uint32_t rank = 0;
  uint32_t num_workers = 1;
  std::vector<std::string> train_files;
  std::vector<std::string> eval_files;
  ParamStore* params = nullptr;  // Not owned; required.
  JobClock* clock = nullptr;     // Not owned; null in local mode.
  ModelOptions model_options;    // Device.
  // The clock to stop at (the last step is max_steps - 1, whatever
  // start_step); 0: training.max_steps, or the data's end.
  uint64_t max_steps = 0;
  uint64_t start_step = 0;     // Clock to start at (a restarted worker).
  std::string start_position;  // Data position to seek to (EncodePosition).
  std::string loss_log;        // If set: "step loss" lines, %.17g (per Train).
  absl::Duration report_every = absl::Seconds(2);
  // Remember every key trained on, for WeightsChecksum (tests; costs memory).
  bool track_keys = false;
  // Testing: sleep this long in every step (a slow worker).
  absl::Duration step_delay = absl::ZeroDuration();
};

struct EvalResult {
  uint64_t examples = 0;
  double auc = 0;
  double logloss = 0;
};

class Trainer {
 public:
  static absl::StatusOr<std::unique_ptr<Trainer>> Create(TrainerOptions options);
  ~Trainer();
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Writes the model's initial dense weights where they are missing (every
  // worker may call it: the write is if-absent and the values agree).
  absl::Status InitDenseWeights();

  // Trains this worker's share of the data (epochs of the config), or up to
  // max_steps. Blocks. Errors from the reader, the model, the servers or the
  // scheduler end training and are returned.
  absl::StatusOr<TrainSummary> Train();

  // Scores `files` (all of them, this process alone) with evaluation pulls,
  // which never insert rows. Blocks.
  absl::StatusOr<EvalResult> Evaluate(const std::vector<std::string>& files);

  // Called by Evaluate after each batch with the batch and its predictions
  // (probs[i] is example i of the batch; batches in reading order). A non-OK
  // status stops the evaluation and is returned by Evaluate.
  using EvalBatchCallback =
      std::function<absl::Status(const data::Batch& batch, absl::Span<const float> probs)>;
  // The same, calling `on_batch` (if set) per batch: offline scoring writes
  // per-example predictions with exactly the evaluation the trainer runs.
  absl::StatusOr<EvalResult> Evaluate(const std::vector<std::string>& files,
                                      const EvalBatchCallback& on_batch);

  // Scores one parsed batch exactly as Evaluate scores each of its batches
  // (evaluation pulls, no row inserted, the same model code): probs[i] is
  // example i's probability. `batch` is used as scratch and left as given.
  // Serving replicas call it (replica/replica.h). Blocks.
  absl::Status Predict(data::Batch* batch, std::vector<float>* probs);

  uint64_t NumDenseParams() const;

  // A fingerprint of the current weights of every row this worker trained
  // (needs track_keys) and of the dense weights: keys sorted, rows read with
  // evaluation pulls, hashed bit for bit. Two runs that end with identical
  // weights give identical checksums; in a multi-worker job each worker
  // covers its own keys. Blocks.
  absl::StatusOr<uint64_t> WeightsChecksum();

 private:
  class Impl;
  explicit Trainer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_H_

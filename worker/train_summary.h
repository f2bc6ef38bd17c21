// What one Trainer::Train() did (trainer.h): steps, samples, time per
// phase, the embedding cache's figures. In a header of its own so that the
// trainer's parts fill it without the trainer's public header.
#ifndef SHARDPS_WORKER_TRAIN_SUMMARY_H_
#define SHARDPS_WORKER_TRAIN_SUMMARY_H_

#include <cstdint>

namespace shardps {

// Seconds spent per phase of the step, summed over steps.
struct StepTimes {
  double data = 0, wait = 0, pull = 0, compute = 0, push = 0;
};

// The embedding cache's figures of one Train() (training.cache).
struct CacheSummary {
  bool on = false;            // The cache ran (else the rest is 0).
  uint64_t lookups = 0;       // Embedding keys of the trained steps.
  uint64_t hits = 0;          // Served from the cache: rows not pulled.
  uint64_t bytes_saved = 0;   // Pull payload the hits did not move.
  uint64_t state_bytes = 0;   // Optimizer state pulled only to cache rows.
  double staleness_mean = 0;  // Over hits: step - the minimum clock the row was read at.
  uint64_t staleness_max = 0;
  uint64_t rows = 0;  // Held at the end.
  uint64_t evictions = 0;
  uint64_t clears = 0;  // Emptied for a lower minimum clock.
};

struct TrainSummary {
  uint64_t steps = 0;
  uint64_t samples = 0;  // Trained by this Train().
  // Trained into the model by this worker's share from the data's start:
  // `samples` plus those before the start position (MetricsReport.samples).
  uint64_t job_samples = 0;
  double seconds = 0;
  double samples_per_sec = 0;
  double mean_loss = 0;  // Over all steps.
  double last_loss = 0;  // Mean of the last 50 steps.
  StepTimes times;
  CacheSummary cache;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAIN_SUMMARY_H_

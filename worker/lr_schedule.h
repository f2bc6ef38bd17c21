// Learning-rate schedules (proto LrScheduleConfig): the factor by which a
// table's configured learning rate is multiplied at a step.
//
// For step s (0-based: the number of steps already taken), warm-up W =
// warmup_steps, total steps T (0 = unknown) and m = min_scale (clamped to
// [0, 1]):
//
//   warm-up    w(s) = (s + 1) / W   for s < W (a line from 0 at s = -1 to 1
//                                   at s = W - 1), else 1.
//   progress   p(s) = clamp((s - W) / (T - 1 - W), 0, 1) after the warm-up;
//              0 while T is unknown or T - 1 <= W.
//   CONSTANT   d = 1
//   LINEAR     d = 1 - (1 - m) p          (m at the last step, s = T - 1)
//   COSINE     d = m + (1 - m) (1 + cos(pi p)) / 2
//   STEP       d = max(m, gamma^floor((s - W) / step_every)) for s >= W;
//              gamma = step_gamma (0 = 0.1); step_every 0 = no decay.
//
// The multiplier is w(s) * d(s). The job config refuses min_scale and
// step_gamma outside [0, 1] (common/config.h). Pure functions, thread-safe.
#ifndef SHARDPS_WORKER_LR_SCHEDULE_H_
#define SHARDPS_WORKER_LR_SCHEDULE_H_

#include <cstdint>

#include "proto/config.pb.h"

namespace shardps {

double LearningRateMultiplier(const LrScheduleConfig& config, uint64_t step, uint64_t total_steps);

}  // namespace shardps

#endif  // SHARDPS_WORKER_LR_SCHEDULE_H_

#include "worker/lr_schedule.h"

#include <algorithm>
#include <cmath>

namespace shardps {

double LearningRateMultiplier(const LrScheduleConfig& config, uint64_t step, uint64_t total_steps) {
  const uint64_t warmup = config.warmup_steps();
  const double warm = step < warmup ? static_cast<double>(step + 1) / warmup : 1.0;
  const double min_scale = std::min(1.0, std::max(0.0, double{config.min_scale()}));
  double progress = 0;
  if (total_steps > 0 && total_steps - 1 > warmup && step > warmup) {
    progress = std::min(
        1.0, static_cast<double>(step - warmup) / static_cast<double>(total_steps - 1 - warmup));
  }
  double decay = 1;
  switch (config.decay()) {
    case LrScheduleConfig::LINEAR:
      decay = 1 - (1 - min_scale) * progress;
      break;
    case LrScheduleConfig::COSINE:
      decay = min_scale + (1 - min_scale) * (1 + std::cos(M_PI * progress)) / 2;
      break;
    case LrScheduleConfig::STEP:
      if (config.step_every() > 0 && step >= warmup) {
        const double gamma = config.step_gamma() == 0 ? 0.1 : config.step_gamma();
        const double k = static_cast<double>((step - warmup) / config.step_every());
        decay = std::max(min_scale, std::pow(gamma, k));
      }
      break;
    default:
      break;
  }
  return warm * decay;
}

}  // namespace shardps

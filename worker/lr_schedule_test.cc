#include "worker/lr_schedule.h"

#include <cmath>

#include "gtest/gtest.h"

namespace shardps {
namespace {

LrScheduleConfig Schedule(uint64_t warmup, LrScheduleConfig::Decay decay, float min_scale = 0,
                          uint64_t step_every = 0, float gamma = 0) {
  LrScheduleConfig c;
  c.set_warmup_steps(warmup);
  c.set_decay(decay);
  c.set_min_scale(min_scale);
  c.set_step_every(step_every);
  c.set_step_gamma(gamma);
  return c;
}

TEST(LrScheduleTest, WarmupIsLinearFromZero) {
  const auto c = Schedule(4, LrScheduleConfig::CONSTANT);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 0, 100), 0.25);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 1, 100), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 3, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 50, 100), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(Schedule(0, LrScheduleConfig::CONSTANT), 0, 0), 1.0);
}

TEST(LrScheduleTest, LinearReachesMinScaleAtTheLastStep) {
  const auto c = Schedule(0, LrScheduleConfig::LINEAR, 0.1f);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 0, 11), 1.0);
  EXPECT_NEAR(LearningRateMultiplier(c, 5, 11), 0.55, 1e-7);
  EXPECT_NEAR(LearningRateMultiplier(c, 10, 11), 0.1, 1e-7);
  EXPECT_NEAR(LearningRateMultiplier(c, 20, 11), 0.1, 1e-7);
  // Unknown total: no decay.
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 5, 0), 1.0);
  // With warm-up: decay starts after it.
  const auto w = Schedule(2, LrScheduleConfig::LINEAR, 0.0f);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(w, 0, 12), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(w, 2, 12), 1.0);
  EXPECT_NEAR(LearningRateMultiplier(w, 7, 12), 1 - 5.0 / 9, 1e-12);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(w, 11, 12), 0.0);
}

TEST(LrScheduleTest, CosineFollowsHalfACosine) {
  const auto c = Schedule(2, LrScheduleConfig::COSINE, 0.0f);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 0, 13), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 2, 13), 1.0);
  EXPECT_NEAR(LearningRateMultiplier(c, 7, 13), 0.5, 1e-12);
  EXPECT_NEAR(LearningRateMultiplier(c, 4, 13), (1 + std::cos(M_PI * 0.2)) / 2, 1e-12);
  EXPECT_NEAR(LearningRateMultiplier(c, 12, 13), 0.0, 1e-12);
  const auto m = Schedule(0, LrScheduleConfig::COSINE, 0.2f);
  EXPECT_NEAR(LearningRateMultiplier(m, 10, 11), 0.2, 1e-7);
  EXPECT_NEAR(LearningRateMultiplier(m, 5, 11), 0.6, 1e-7);
}

TEST(LrScheduleTest, StepDecaysByGammaDownToMinScale) {
  const auto c = Schedule(0, LrScheduleConfig::STEP, 0.2f, 10, 0.5f);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 9, 0), 1.0);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 10, 0), 0.5);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(c, 25, 0), 0.25);
  EXPECT_NEAR(LearningRateMultiplier(c, 30, 0), 0.2, 1e-7);
  // gamma 0 means 0.1; warm-up shifts the steps.
  const auto d = Schedule(5, LrScheduleConfig::STEP, 0.0f, 10, 0.0f);
  EXPECT_DOUBLE_EQ(LearningRateMultiplier(d, 14, 0), 1.0);
  EXPECT_NEAR(LearningRateMultiplier(d, 15, 0), 0.1, 1e-12);
  EXPECT_NEAR(LearningRateMultiplier(d, 25, 0), 0.01, 1e-12);
}

}  // namespace
}  // namespace shardps

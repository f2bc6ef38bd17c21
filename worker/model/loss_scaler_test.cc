#include "worker/model/loss_scaler.h"

#include <limits>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(LossScalerTest, UnscalesGoodStepsAndGrowsAfterTheInterval) {
  LossScaler s(1024.0f, /*growth_interval=*/3);
  std::vector<float> a = {1024.0f, -2048.0f}, b = {512.0f};
  EXPECT_TRUE(s.Unscale({&a, &b}));
  EXPECT_EQ(a, (std::vector<float>{1.0f, -2.0f}));
  EXPECT_EQ(b, (std::vector<float>{0.5f}));
  EXPECT_EQ(s.scale(), 1024.0f);
  for (int i = 0; i < 2; ++i) {
    std::vector<float> g = {1.0f};
    EXPECT_TRUE(s.Unscale({&g}));
  }
  EXPECT_EQ(s.scale(), 2048.0f) << "3 good steps in a row double the scale";
}

TEST(LossScalerTest, AnOverflowSkipsTheStepAndHalvesTheScale) {
  LossScaler s(1024.0f, 3);
  std::vector<float> ok = {1024.0f};
  EXPECT_TRUE(s.Unscale({&ok}));
  std::vector<float> a = {4.0f, std::numeric_limits<float>::infinity()};
  std::vector<float> b = {3.0f, std::numeric_limits<float>::quiet_NaN()};
  EXPECT_FALSE(s.Unscale({&a, &b}));
  EXPECT_EQ(a, (std::vector<float>{0.0f, 0.0f})) << "a skipped step pushes zeros";
  EXPECT_EQ(b, (std::vector<float>{0.0f, 0.0f}));
  EXPECT_EQ(s.scale(), 512.0f);
  EXPECT_EQ(s.skipped_steps(), 1u);
  // The good-step count started again: two more good steps do not grow it.
  for (int i = 0; i < 2; ++i) {
    std::vector<float> g = {1.0f};
    EXPECT_TRUE(s.Unscale({&g}));
  }
  EXPECT_EQ(s.scale(), 512.0f);
  // Never below 1.
  LossScaler low(1.0f, 3);
  std::vector<float> inf = {std::numeric_limits<float>::infinity()};
  EXPECT_FALSE(low.Unscale({&inf}));
  EXPECT_EQ(low.scale(), 1.0f);
}

}  // namespace
}  // namespace shardps

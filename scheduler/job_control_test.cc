// JobControl: the control thread on its own (no JobCoordinator), with real
// membership and clocks and fake servers (job_test_util.h).
#include "scheduler/job_control.h"

#include <functional>

#include "absl/time/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

using testing::Config;
using testing::FakeServerOps;
using testing::Req;

class JobControlTest : public ::testing::Test {
 protected:
  JobControlTest()
      : config_(Config(0, ASP, ::testing::TempDir() + "/job_control_test")),
        members_(config_, ConfigFingerprint(config_)),
        clock_(config_.cluster().num_workers(), ClockService::kUnbounded),
        ops_(config_),
        state_(config_, &members_, &clock_, nullptr, absl::Now()),
        control_(config_, &state_, &members_, &clock_, &ops_, absl::Now()) {
    clock_.SetPaused(true);  // As the coordinator starts it.
  }
  ~JobControlTest() override {
    state_.WakeWaiters();
    clock_.Abort("test over");
    control_.Stop();
  }

  // Polls `condition`; false after 20 s.
  bool WaitFor(const std::function<bool()>& condition) {
    const absl::Time deadline = absl::Now() + absl::Seconds(20);
    while (absl::Now() < deadline) {
      if (condition()) return true;
      absl::SleepFor(absl::Milliseconds(5));
    }
    return false;
  }

  uint64_t Formed() {
    EXPECT_TRUE(members_.Register(Req(config_, SERVER, 0, 1), absl::Now()).ok());
    control_.Start();
    EXPECT_TRUE(WaitFor([&] { return state_.formed(); })) << "the job did not form";
    return state_.generation();
  }

  const JobConfig config_;
  Membership members_;
  ClockService clock_;
  FakeServerOps ops_;
  JobState state_;
  JobControl control_;
};

// Formation: once the server registered, it is reset to its initial values
// in a new generation, which the clocks take, and the clocks run.
TEST_F(JobControlTest, FormsAFreshJobInANewGeneration) {
  const uint64_t generation = Formed();
  ASSERT_EQ(ops_.restores().size(), 1u);
  EXPECT_TRUE(ops_.restores()[0].point.initial);
  EXPECT_EQ(ops_.restores()[0].generation, generation);
  EXPECT_EQ(clock_.generation(), generation);
  EXPECT_TRUE(clock_.WaitToStart(0, 0, absl::Now() + absl::Seconds(5), generation).ok());
}

// An on-demand cut is placed at the first clock no worker has started, and
// written with each worker's position at that clock.
TEST_F(JobControlTest, OnDemandCutIsWrittenAtTheFirstUnstartedClock) {
  const uint64_t generation = Formed();
  for (uint32_t rank = 0; rank < 2; ++rank) {
    for (uint64_t t = 0; t < 2; ++t) {
      ASSERT_TRUE(clock_.WaitToStart(rank, t, absl::Now() + absl::Seconds(5), generation).ok());
      ASSERT_TRUE(state_
                      .Ticked(rank, t + 1, generation,
                              "w" + std::to_string(rank) + "@" + std::to_string(t + 1), 0)
                      .ok());
    }
  }
  const uint64_t request = state_.RequestCut();
  auto clock = state_.WaitCut(request, absl::Now() + absl::Seconds(20));
  ASSERT_TRUE(clock.ok()) << clock.status();
  EXPECT_EQ(*clock, 2u);
  EXPECT_EQ(state_.CheckpointsWritten(), std::vector<uint64_t>{2});
  ASSERT_EQ(ops_.cuts().size(), 1u);
  EXPECT_EQ(ops_.cuts()[0].clock, 2u);
  EXPECT_EQ(ops_.cuts()[0].generation, generation);
  EXPECT_EQ(ops_.cuts()[0].positions.at(0), "w0@2");
  EXPECT_EQ(ops_.cuts()[0].positions.at(1), "w1@2");
}

}  // namespace
}  // namespace shardps

#include "common/mutex.h"

#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(MutexTest, GuardsACounterAcrossThreads) {
  Mutex mu;
  int counter = 0;
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([&] {
      for (int i = 0; i < 10000; ++i) {
        MutexLock lock(&mu);
        ++counter;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(counter, 40000);
}

TEST(CondVarTest, WaitUntilTimesOutAndWakes) {
  Mutex mu;
  CondVar cv;
  bool ready = false;
  {
    MutexLock lock(&mu);
    EXPECT_FALSE(cv.WaitUntil(&mu, absl::Now() + absl::Milliseconds(20)));
  }
  std::thread setter([&] {
    MutexLock lock(&mu);
    ready = true;
    cv.SignalAll();
  });
  {
    MutexLock lock(&mu);
    const absl::Time deadline = absl::Now() + absl::Seconds(30);
    while (!ready && cv.WaitUntil(&mu, deadline)) {
    }
    EXPECT_TRUE(ready);
  }
  setter.join();
}

}  // namespace
}  // namespace shardps

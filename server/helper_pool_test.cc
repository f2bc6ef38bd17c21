#include "server/helper_pool.h"

#include <pthread.h>
#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <memory>
#include <set>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/mutex.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// Runs ParallelFor(chunks) and checks that every chunk ran exactly once.
void ExpectEachChunkOnce(HelperPool& pool, int chunks) {
  std::vector<std::atomic<int>> calls(chunks);
  for (auto& c : calls) c.store(0);
  pool.ParallelFor(chunks, [&](int c) { calls[c].fetch_add(1); });
  for (int c = 0; c < chunks; ++c) {
    ASSERT_EQ(calls[c].load(), 1) << "chunk " << c << " of " << chunks;
  }
}

TEST(HelperPoolTest, EveryChunkRunsExactlyOnce) {
  HelperPool pool(2, /*only_when_idle=*/false);
  for (int round = 0; round < 300; ++round) {
    ExpectEachChunkOnce(pool, round % 40);
  }
}

TEST(HelperPoolTest, ConcurrentCallersEachGetEveryChunkOnce) {
  HelperPool pool(2, /*only_when_idle=*/false);
  std::vector<std::thread> callers;
  for (int t = 0; t < 4; ++t) {
    callers.emplace_back([&pool] {
      for (int round = 0; round < 200; ++round) ExpectEachChunkOnce(pool, 16);
    });
  }
  for (std::thread& t : callers) t.join();
}

TEST(HelperPoolTest, AHelperTakesChunksWhileTheCallerIsBusy) {
  // Whichever chunk starts first blocks until the other one has started: the
  // other can then only run on a second thread, so the call ends with two
  // threads seen (or, were no helper to join, times out with one).
  HelperPool pool(1, /*only_when_idle=*/false);
  for (int round = 0; round < 20; ++round) {
    Mutex mu;
    CondVar started;
    int running = 0;
    std::set<std::thread::id> threads;
    pool.ParallelFor(2, [&](int) {
      MutexLock lock(&mu);
      threads.insert(std::this_thread::get_id());
      if (++running == 1) {
        const absl::Time deadline = absl::Now() + absl::Seconds(30);
        while (running < 2 && started.WaitUntil(&mu, deadline)) {
        }
      } else {
        started.SignalAll();
      }
    });
    MutexLock lock(&mu);
    ASSERT_EQ(threads.size(), 2u) << "round " << round;
  }
}

TEST(HelperPoolTest, WithEveryCoreBusyTheCallerWorksAlone) {
  ASSERT_EQ(access("/proc/stat", R_OK), 0) << "no /proc/stat: the pool cannot see idle cores";
  // One spinning thread pinned to each core of the machine leaves no idle
  // time anywhere (/proc/stat counts the whole machine, whatever else runs,
  // and whatever CPUs this process was started on, e.g. by taskset): once
  // the pool has seen that (its estimate covers >= 100 ms), it must not
  // wake its helpers.
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  std::atomic<bool> stop{false};
  std::atomic<int> tried{0}, pinned{0};
  std::vector<std::thread> spinners;
  for (int i = 0; i < cores; ++i) {
    spinners.emplace_back([&stop, &tried, &pinned, i] {
      cpu_set_t one;
      CPU_ZERO(&one);
      CPU_SET(i, &one);
      if (pthread_setaffinity_np(pthread_self(), sizeof one, &one) == 0) ++pinned;
      ++tried;
      while (!stop.load(std::memory_order_relaxed)) {
      }
    });
  }
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (tried < cores && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));  // Polls; bounded by `deadline`.
  }
  if (pinned < cores) {
    stop = true;
    for (std::thread& t : spinners) t.join();
    FAIL() << "could pin spinners to only " << pinned << " of " << cores
           << " cores: the machine is not all busy";
  }
  HelperPool pool(2);
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::set<std::thread::id> threads;
  Mutex mu;
  for (int round = 0; round < 20; ++round) {
    pool.ParallelFor(16, [&](int) {
      std::this_thread::sleep_for(std::chrono::microseconds(100));
      MutexLock lock(&mu);
      threads.insert(std::this_thread::get_id());
    });
  }
  stop = true;
  for (std::thread& t : spinners) t.join();
  MutexLock lock(&mu);
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
}

TEST(HelperPoolTest, NoHelpersRunsEverythingOnTheCaller) {
  HelperPool pool(0, /*only_when_idle=*/false);
  EXPECT_EQ(pool.helpers(), 0);
  std::set<std::thread::id> threads;
  std::vector<int> order;
  pool.ParallelFor(8, [&](int c) {
    threads.insert(std::this_thread::get_id());
    order.push_back(c);
  });
  EXPECT_EQ(threads, std::set<std::thread::id>{std::this_thread::get_id()});
  EXPECT_EQ(order, (std::vector<int>{0, 1, 2, 3, 4, 5, 6, 7}));
}

TEST(HelperPoolTest, DestroyingAnIdlePoolJoinsItsHelpers) {
  for (int i = 0; i < 20; ++i) {
    auto pool = std::make_unique<HelperPool>(3, /*only_when_idle=*/false);
    ExpectEachChunkOnce(*pool, 5);
    pool.reset();
  }
}

}  // namespace
}  // namespace shardps

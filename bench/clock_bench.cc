// Clock-service throughput: ticks/s with 8 simulated workers, each a thread
// that waits for permission to start a step and then ticks, in ASP and in
// SSP(2) (and BSP for reference). In-process: measures the clock service
// itself (scheduler/clock.h), not gRPC.
//
//   bazel run -c opt //bench:clock_bench -- [steps per worker]
#include <cstdio>
#include <cstdlib>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "scheduler/clock.h"

namespace {

double TicksPerSecond(uint32_t staleness, int workers, uint64_t steps) {
  shardps::ClockService clock(workers, staleness);
  const absl::Time start = absl::Now();
  std::vector<std::thread> threads;
  for (int r = 0; r < workers; ++r) {
    threads.emplace_back([&clock, r, steps] {
      for (uint64_t t = 0; t < steps; ++t) {
        if (!clock.WaitToStart(r, t, absl::InfiniteFuture()).ok()) std::abort();
        if (!clock.Tick(r, t + 1).ok()) std::abort();
      }
      clock.MarkFinished(r);
    });
  }
  for (auto& t : threads) t.join();
  return workers * steps / absl::ToDoubleSeconds(absl::Now() - start);
}

}  // namespace

int main(int argc, char** argv) {
  const uint64_t steps = argc > 1 ? std::strtoull(argv[1], nullptr, 10) : 20000;
  const int workers = 8;
  const double asp = TicksPerSecond(shardps::ClockService::kUnbounded, workers, steps);
  const double ssp = TicksPerSecond(2, workers, steps);
  const double bsp = TicksPerSecond(0, workers, steps);
  std::printf("clock service, %d simulated workers, %llu steps each\n", workers,
              static_cast<unsigned long long>(steps));
  std::printf("  ASP     %12.0f ticks/s\n", asp);
  std::printf("  SSP(2)  %12.0f ticks/s  (%.2fx ASP)\n", ssp, ssp / asp);
  std::printf("  BSP     %12.0f ticks/s  (%.2fx ASP)\n", bsp, bsp / asp);
  return 0;
}

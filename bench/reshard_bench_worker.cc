// reshard_bench_worker: the one worker of bench/reshard_bench.py's job, and
// its memcpy reference. Two modes:
//
//   reshard_bench_worker --config=JOB --scheduler=HOST:PORT --rows=N
//       --steps_file=F --stop_file=S [--fill_batch=100000] [--step_keys=4096]
//     Joins the job as worker 0 (as ps_worker: registered, heartbeating,
//     stepping under the scheduler's clock, the PsClient refreshing a stale
//     partition map on its own), fills the sparse table 1 with exactly N
//     distinct keys (a push of a missing key creates its row), prints
//     "PS_RESHARD_BENCH_FILLED rows=N sec=S", then steps back to back (pull
//     TRAIN + push of --step_keys existing keys, a window sliding over all N
//     rows, or over the first --hot_rows of them, then Tick) until the file S
//     exists. Every completed step's end
//     (unix microseconds, one a line) goes to F, written at the end; then it
//     prints "PS_RESHARD_BENCH_STEPS steps=K keys=--step_keys" and exits 0.
//     A rollback (stale generation) rewinds to the scheduler's start point,
//     as ps_worker does, and is counted (rewinds=).
//
//   reshard_bench_worker --memcpy_bytes=B
//     One thread's memcpy of B bytes from memory it touched into fresh pages
//     and into the same pages again: "PS_RESHARD_BENCH_MEMCPY bytes=B
//     fresh_sec=X touched_sec=Y".
//
// Figures only, for the bench; nothing here passes or fails on time.
#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "bench/recovery_bench_util.h"
#include "bench/recovery_bench_worker.h"
#include "common/client/ps_client.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "common/generation.h"
#include "common/init.h"
#include "common/status_macros.h"

ABSL_FLAG(std::string, config, "", "The job's config.");
ABSL_FLAG(std::string, scheduler, "", "The scheduler's host:port.");
ABSL_FLAG(uint64_t, rows, 1000000, "Distinct keys to fill table 1 with.");
ABSL_FLAG(uint32_t, fill_batch, 100000, "Keys a push while filling.");
ABSL_FLAG(uint32_t, step_keys, 4096, "Keys a step (pull + push) after the fill.");
ABSL_FLAG(uint64_t, hot_rows, 0,
          "Steps touch only the first this many rows (0: all of them): the ids a job "
          "is training on, a small share of a large table.");
ABSL_FLAG(std::string, steps_file, "", "Where each step's end goes (unix microseconds).");
ABSL_FLAG(std::string, stop_file, "", "Stop stepping once this file exists.");
ABSL_FLAG(uint64_t, memcpy_bytes, 0, "Only measure a memcpy of this many bytes.");

namespace shardps::rbench {
namespace {

int Main() {
  if (const uint64_t bytes = absl::GetFlag(FLAGS_memcpy_bytes); bytes > 0) {
    auto m = MeasureMemcpy(bytes);
    if (!m.ok()) {
      std::fprintf(stderr, "memcpy: %s\n", m.status().ToString().c_str());
      return 1;
    }
    std::printf("PS_RESHARD_BENCH_MEMCPY bytes=%llu fresh_sec=%.6f touched_sec=%.6f\n",
                static_cast<unsigned long long>(bytes), m->fresh, m->touched);
    return 0;
  }
  if (absl::GetFlag(FLAGS_config).empty() || absl::GetFlag(FLAGS_scheduler).empty() ||
      absl::GetFlag(FLAGS_steps_file).empty() || absl::GetFlag(FLAGS_stop_file).empty()) {
    std::fprintf(stderr,
                 "reshard_bench_worker: --config, --scheduler, --steps_file and "
                 "--stop_file are required (or --memcpy_bytes)\n");
    return 2;
  }
  auto config = LoadJobConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    return 2;
  }
  Worker worker(*config, absl::GetFlag(FLAGS_scheduler));
  std::vector<int64_t> ends;  // Each completed step's end (unix microseconds).
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  absl::Status st = worker.Join();
  const absl::Time t = absl::Now();
  if (st.ok()) st = worker.Fill(rows, absl::GetFlag(FLAGS_fill_batch));
  if (st.ok()) {
    std::printf("PS_RESHARD_BENCH_FILLED rows=%llu sec=%.3f\n",
                static_cast<unsigned long long>(rows), Secs(absl::Now() - t));
    std::fflush(stdout);
    // Back to back until the stop file exists.
    const std::string stop_file = absl::GetFlag(FLAGS_stop_file);
    const uint64_t hot = absl::GetFlag(FLAGS_hot_rows);
    st = worker.Idle(
        hot > 0 && hot < rows ? hot : rows, absl::GetFlag(FLAGS_step_keys), absl::ZeroDuration(),
        [&stop_file] { return access(stop_file.c_str(), F_OK) == 0; },
        [&ends] { ends.push_back(absl::ToUnixMicros(absl::Now())); });
  }
  {
    std::ofstream out(absl::GetFlag(FLAGS_steps_file));
    for (int64_t e : ends) out << e << "\n";
  }
  if (!st.ok()) {
    std::fprintf(stderr, "reshard_bench_worker: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("PS_RESHARD_BENCH_STEPS steps=%zu keys=%u rewinds=%d\n", ends.size(),
              absl::GetFlag(FLAGS_step_keys), worker.rewinds());
  return 0;
}

}  // namespace
}  // namespace shardps::rbench

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "reshard_bench_worker --config=JOB --scheduler=HOST:PORT --rows=N "
                       "--steps_file=F --stop_file=S | --memcpy_bytes=B");
  shardps::TuneMallocForLargeMessages();
  return shardps::rbench::Main();
}

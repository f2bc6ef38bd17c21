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
//     rows, then Tick) until the file S exists. Every completed step's end
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
ABSL_FLAG(std::string, steps_file, "", "Where each step's end goes (unix microseconds).");
ABSL_FLAG(std::string, stop_file, "", "Stop stepping once this file exists.");
ABSL_FLAG(uint64_t, memcpy_bytes, 0, "Only measure a memcpy of this many bytes.");

namespace shardps::rbench {
namespace {

constexpr uint32_t kWorkerRank = 0;

class Worker {
 public:
  Worker(JobConfig config, const std::string& scheduler)
      : config_(std::move(config)), scheduler_(scheduler) {}

  absl::Status Join() {
    const ClusterConfig& k = config_.cluster();
    RegisterRequest request;
    request.set_role(WORKER);
    request.set_requested_index(kWorkerRank);
    request.set_config_fingerprint(ConfigFingerprint(config_));
    ASSIGN_OR_RETURN(const RegisterResponse reg, scheduler_.Register(request, absl::Minutes(2)));
    scheduler_.EnableRejoin(request, nullptr);
    scheduler_.StartHeartbeats(
        WORKER, reg.index(), reg.job_id(), absl::Milliseconds(k.heartbeat_ms()),
        absl::Milliseconds(3 * k.dead_after_ms()), [this](bool job_ended, const std::string& why) {
          std::lock_guard<std::mutex> lock(stop_mu_);
          stopped_ = absl::StrCat(job_ended ? "the job ended: " : "", why);
        });
    ASSIGN_OR_RETURN(const WaitStartResponse start,
                     scheduler_.WaitStart(kWorkerRank, std::nullopt, absl::Minutes(2)));
    if (start.job_ended()) return absl::FailedPreconditionError("the job ended at once");
    generation_ = start.generation();
    clock_ = start.clock();
    scheduler_.NoteStart(generation_, clock_, start.position());
    PsClient::Options o;
    o.worker_rank = kWorkerRank;
    o.max_message_bytes = k.max_message_bytes();
    o.generation = generation_;
    o.retry_budget = absl::Milliseconds(k.server_deadline_ms()) + absl::Seconds(60);
    o.newest_generation = [this] { return scheduler_.scheduler_generation(); };
    ASSIGN_OR_RETURN(client_, PsClient::Create(o, start.map(), [this](uint64_t v) {
                       return scheduler_.GetPartitionMap(v, absl::Milliseconds(300));
                     }));
    return absl::OkStatus();
  }

  // Pushes a gradient for rows [0, rows), `batch` keys a step: creates them.
  absl::Status Fill(uint64_t rows, uint32_t batch) {
    keys_.resize(batch);
    grads_.assign(size_t{batch} * kDim, 0.01f);
    for (uint64_t next = 0; next < rows;) {
      const size_t n = std::min<uint64_t>(batch, rows - next);
      for (size_t j = 0; j < n; ++j) keys_[j] = Key(next + j);
      const int rewinds = rewinds_;
      ASSIGN_OR_RETURN(const bool stepped, Step(n, /*pull=*/false));
      if (rewinds_ != rewinds) {
        return absl::AbortedError("the job rolled back while the table was being filled");
      }
      if (stepped) next += n;
    }
    return absl::OkStatus();
  }

  // Steps back to back on `n` existing keys a step (a window sliding over
  // rows [0, rows)) until `stop_file` exists; each step's end in ends_.
  absl::Status Run(uint64_t rows, uint32_t n, const std::string& stop_file) {
    n = static_cast<uint32_t>(std::min<uint64_t>(n, rows));
    keys_.resize(n);
    grads_.assign(size_t{n} * kDim, 0.001f);
    values_.resize(size_t{n} * kDim);
    uint64_t window = 0;
    while (access(stop_file.c_str(), F_OK) != 0) {
      for (size_t j = 0; j < n; ++j) keys_[j] = Key((window + j) % rows);
      ASSIGN_OR_RETURN(const bool stepped, Step(n, /*pull=*/true));
      if (stepped) {
        window = (window + n) % rows;
        ends_.push_back(absl::ToUnixMicros(absl::Now()));
      }
    }
    return absl::OkStatus();
  }

  const std::vector<int64_t>& ends() const { return ends_; }
  int rewinds() const { return rewinds_; }

 private:
  // One step of keys_[0, n): wait for the clock (in 1 s slices), pull
  // (TRAIN), push, tick. False if it did not run: the clock is held (the
  // slice ran out), or the job rolled back (the worker rewound).
  absl::StatusOr<bool> Step(size_t n, bool pull) {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (!stopped_.empty()) return absl::AbortedError(stopped_);
    }
    absl::Status st = scheduler_.WaitClock(kWorkerRank, clock_, absl::Seconds(1));
    if (absl::IsDeadlineExceeded(st)) return false;
    if (st.ok() && pull) {
      st = client_->PullAsync({{kTable, kDim, keys_.data(), n, values_.data()}}, TRAIN, clock_)
               ->Wait();
    }
    if (st.ok()) {
      st = client_
               ->PushAsync({{kTable, kDim, keys_.data(), n, grads_.data()}}, clock_, 1.0f,
                           /*to_every_server=*/false)
               ->Wait();
    }
    if (st.ok()) st = scheduler_.Tick(kWorkerRank, clock_ + 1);
    if (st.ok()) {
      ++clock_;
      return true;
    }
    if (!IsStaleGeneration(st)) return st;
    RETURN_IF_ERROR(Rewind());
    return false;
  }

  // Restarts from the scheduler's start point after a rollback.
  absl::Status Rewind() {
    ASSIGN_OR_RETURN(const WaitStartResponse start,
                     scheduler_.WaitStart(kWorkerRank, generation_, absl::Minutes(10)));
    if (start.job_ended()) return absl::FailedPreconditionError("the job ended");
    generation_ = start.generation();
    clock_ = start.clock();
    scheduler_.NoteStart(generation_, clock_, start.position());
    client_->set_generation(generation_);
    RETURN_IF_ERROR(client_->UpdateMap(start.map()));
    ++rewinds_;
    return absl::OkStatus();
  }

  const JobConfig config_;
  SchedulerClient scheduler_;
  std::unique_ptr<PsClient> client_;
  uint64_t generation_ = 0;
  uint64_t clock_ = 0;
  int rewinds_ = 0;
  std::vector<uint64_t> keys_;
  std::vector<float> grads_, values_;
  std::vector<int64_t> ends_;
  std::mutex stop_mu_;
  std::string stopped_;  // Why the heartbeats stopped ("" while they run).
};

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
  const uint64_t rows = absl::GetFlag(FLAGS_rows);
  absl::Status st = worker.Join();
  const absl::Time t = absl::Now();
  if (st.ok()) st = worker.Fill(rows, absl::GetFlag(FLAGS_fill_batch));
  if (st.ok()) {
    std::printf("PS_RESHARD_BENCH_FILLED rows=%llu sec=%.3f\n",
                static_cast<unsigned long long>(rows), Secs(absl::Now() - t));
    std::fflush(stdout);
    st = worker.Run(rows, absl::GetFlag(FLAGS_step_keys), absl::GetFlag(FLAGS_stop_file));
  }
  {
    std::ofstream out(absl::GetFlag(FLAGS_steps_file));
    for (int64_t e : worker.ends()) out << e << "\n";
  }
  if (!st.ok()) {
    std::fprintf(stderr, "reshard_bench_worker: %s\n", st.ToString().c_str());
    return 1;
  }
  std::printf("PS_RESHARD_BENCH_STEPS steps=%zu keys=%u rewinds=%d\n", worker.ends().size(),
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

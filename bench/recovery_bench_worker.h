// The one worker of recovery_bench's job (in the bench's process,
// recovery_bench.cc) and of reshard_bench's (reshard_bench_worker.cc).
// Header-only, for these benches.
#ifndef SHARDPS_BENCH_RECOVERY_BENCH_WORKER_H_
#define SHARDPS_BENCH_RECOVERY_BENCH_WORKER_H_

#include <functional>

#include "bench/recovery_bench_util.h"

namespace shardps::rbench {

// ---- the worker -----------------------------------------------------------------

// The job's only worker, as ps_worker runs one (worker/ps_worker_main.cc):
// registered, heartbeating, stepping under the scheduler's clock, rewinding
// to the scheduler's start point when refused as of a stale generation.
// Steps run on one thread at a time.
class Worker {
 public:
  Worker(JobConfig config, const std::string& scheduler)
      : config_(std::move(config)), scheduler_(scheduler) {}

  absl::Status Join() {
    const ClusterConfig& k = config_.cluster();
    RegisterRequest request;
    request.set_role(WORKER);
    request.set_requested_index(kRank);
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
                     scheduler_.WaitStart(kRank, std::nullopt, absl::Minutes(2)));
    if (start.job_ended()) return absl::FailedPreconditionError("the job ended at once");
    generation_ = start.generation();
    clock_ = start.clock();
    scheduler_.NoteStart(generation_, clock_, start.position());
    PsClient::Options o;
    o.worker_rank = kRank;
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

  // Steps on existing keys (a window of `n` sliding over rows [0, rows)),
  // one every `pause`, until `stop()`; `stepped` (if set) after each step
  // that ran.
  absl::Status Idle(uint64_t rows, uint32_t n, absl::Duration pause,
                    const std::function<bool()>& stop,
                    const std::function<void()>& stepped = nullptr) {
    n = static_cast<uint32_t>(std::min<uint64_t>(n, rows));
    keys_.resize(n);
    grads_.assign(size_t{n} * kDim, 0.001f);
    values_.resize(size_t{n} * kDim);
    uint64_t window = 0;
    while (!stop()) {
      for (size_t j = 0; j < n; ++j) keys_[j] = Key((window + j) % rows);
      ASSIGN_OR_RETURN(const bool ran, Step(n, /*pull=*/true));
      if (ran) {
        window = (window + n) % rows;
        if (stepped) stepped();
      }
      absl::SleepFor(pause);
    }
    return absl::OkStatus();
  }

  int rewinds() const { return rewinds_; }

 private:
  // One step of keys_[0, n): wait for the clock (in 1 s slices), pull
  // (TRAIN), push, tick. False if it did not run: the clock is held or
  // paused (the slice ran out), or the job rolled back (the worker rewound).
  absl::StatusOr<bool> Step(size_t n, bool pull) {
    {
      std::lock_guard<std::mutex> lock(stop_mu_);
      if (!stopped_.empty()) return absl::AbortedError(stopped_);
    }
    absl::Status st = scheduler_.WaitClock(kRank, clock_, absl::Seconds(1));
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
    if (st.ok()) st = scheduler_.Tick(kRank, clock_ + 1);
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
                     scheduler_.WaitStart(kRank, generation_, absl::Minutes(10)));
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
  std::atomic<int> rewinds_{0};
  std::vector<uint64_t> keys_;
  std::vector<float> grads_, values_;
  std::mutex stop_mu_;
  std::string stopped_;  // Why the heartbeats stopped ("" while they run).
};

}  // namespace shardps::rbench

#endif  // SHARDPS_BENCH_RECOVERY_BENCH_WORKER_H_

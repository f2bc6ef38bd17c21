// ps_worker's process logic (ps_worker.h).
#include "worker/ps_worker.h"

#include <sys/resource.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "common/generation.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/checkpoint_evaluator.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"
#include "worker/model/model_factory.h"
#include "worker/param_store.h"
#include "worker/trainer.h"

namespace shardps {
namespace {

absl::Status ResolveData(JobConfig* config, std::vector<std::string>* train,
                         std::vector<std::string>* eval) {
  train->assign(config->data().train_files().begin(), config->data().train_files().end());
  eval->assign(config->data().eval_files().begin(), config->data().eval_files().end());
  if (!train->empty()) return absl::OkStatus();
  auto summary = data::ReadSyntheticSummary(config->data().synthetic_dir());
  if (!summary.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("no train_files and no generated data in ", config->data().synthetic_dir(),
                     " (", summary.status().message(), "); generate it with ps_datagen"));
  }
  *train = summary->train_files;
  if (eval->empty()) *eval = summary->eval_files;
  return absl::OkStatus();
}

// Every train and eval file can be opened for reading, and the train files
// are not all empty: found before training, not after it (an eval file) or
// never (a job that ends "done" with 0 samples). FAILED_PRECONDITION naming
// the file.
absl::Status CheckDataFiles(const std::vector<std::string>& train,
                            const std::vector<std::string>& eval) {
  uint64_t train_bytes = 0;
  for (const auto* files : {&train, &eval}) {
    for (const std::string& path : *files) {
      const char* kind = files == &train ? "train" : "eval";
      std::error_code ec;
      const bool regular = std::filesystem::is_regular_file(path, ec);
      std::ifstream in(path, std::ios::binary);
      if (!regular || !in) {
        return absl::FailedPreconditionError(absl::StrCat(
            kind, " file ", path, " cannot be read: ",
            ec ? ec.message() : (regular ? std::strerror(errno) : "not a regular file")));
      }
      if (files == &train) train_bytes += std::filesystem::file_size(path, ec);
    }
  }
  if (!train.empty() && train_bytes == 0) {
    return absl::FailedPreconditionError(absl::StrCat("every train file is empty (", train.size(),
                                                      " files, the first ", train[0], ")"));
  }
  return absl::OkStatus();
}

c10::Device PickDevice(const std::string& name) {
  if (name == "cpu") return c10::Device(c10::DeviceType::CPU);
  if (name == "cuda") return c10::Device(c10::DeviceType::CUDA, 0);
  return DefaultDevice();
}

Encoding WireEncoding(const std::string& name) {
  if (name == "fp16") return Encoding::kFp16;
  if (name == "bf16") return Encoding::kBf16;
  return Encoding::kFp32;
}

// " checksum=<hex>" when --checksum, else "".
// " push_bytes_dense=.. push_bytes_sparse=.. pull_bytes_dense=..
// pull_bytes_sparse=..": the payload bytes this worker exchanged with the
// servers so far (PsClient::Traffic, counted since the process started),
// split between the dense table and the sparse tables.
std::string TrafficFields(const PsClient& client, const JobConfig& config) {
  const TableConfig* dense = FindTable(config, config.model().dense_table());
  uint64_t push[2] = {0, 0}, pull[2] = {0, 0};  // [sparse, dense]
  for (const auto& [table_id, t] : client.Traffic()) {
    const int d = dense != nullptr && dense->id() == table_id;
    push[d] += t.push_bytes;
    pull[d] += t.pull_bytes;
  }
  return absl::StrCat(" push_bytes_dense=", push[1], " push_bytes_sparse=", push[0],
                      " pull_bytes_dense=", pull[1], " pull_bytes_sparse=", pull[0]);
}

std::string ChecksumField(Trainer* trainer, const WorkerOptions& w) {
  if (!w.checksum) return "";
  auto sum = trainer->WeightsChecksum();
  if (!sum.ok()) {
    LOG(ERROR) << "checksum: " << sum.status();
    return " checksum=error";
  }
  return absl::StrCat(" checksum=", absl::Hex(*sum, absl::kZeroPad16));
}

// This process's peak resident set so far (getrusage), in MiB.
double PeakRssMb() {
  struct rusage usage;
  if (getrusage(RUSAGE_SELF, &usage) != 0) return 0.0;
  return static_cast<double>(usage.ru_maxrss) / 1024.0;  // KiB on Linux.
}

// " cache_hit_rate=.. cache_rows_saved=.. cache_bytes_saved=..
// cache_state_bytes=.. cache_hit_staleness_mean=.. cache_hit_staleness_max=..
// cache_rows=..": the embedding cache's figures (training.cache), when it ran.
std::string CacheFields(const CacheSummary& c) {
  if (!c.on) return "";
  return absl::StrCat(
      " cache_hit_rate=", absl::StrFormat("%.4f", c.lookups ? double(c.hits) / c.lookups : 0.0),
      " cache_rows_saved=", c.hits, " cache_bytes_saved=", c.bytes_saved,
      " cache_state_bytes=", c.state_bytes,
      " cache_hit_staleness_mean=", absl::StrFormat("%.2f", c.staleness_mean),
      " cache_hit_staleness_max=", c.staleness_max, " cache_rows=", c.rows);
}

void PrintResult(uint32_t rank, const TrainSummary& s, const EvalResult* eval,
                 const std::string& extra) {
  std::printf(
      "PS_WORKER_RESULT rank=%u steps=%llu samples=%llu seconds=%.2f "
      "samples_per_sec=%.1f last_loss=%.6f data=%.2f wait=%.2f pull=%.2f "
      "compute=%.2f push=%.2f eval_examples=%llu eval_auc=%.6f eval_logloss=%.6f "
      "peak_rss_mb=%.1f%s\n",
      rank, (unsigned long long)s.steps, (unsigned long long)s.samples, s.seconds,
      s.samples_per_sec, s.last_loss, s.times.data, s.times.wait, s.times.pull, s.times.compute,
      s.times.push, (unsigned long long)(eval ? eval->examples : 0), eval ? eval->auc : 0.0,
      eval ? eval->logloss : 0.0, PeakRssMb(), (extra + CacheFields(s.cache)).c_str());
  std::fflush(stdout);
}

}  // namespace

int RunLocalWorker(JobConfig config, const WorkerOptions& w) {
  std::vector<std::string> train, eval;
  absl::Status data = ResolveData(&config, &train, &eval);
  if (data.ok()) data = CheckDataFiles(train, eval);
  if (!data.ok()) {
    LOG(ERROR) << data.message();
    return 2;
  }
  auto params = MakeLocalParamStore(config);
  if (!params.ok()) {
    LOG(ERROR) << params.status();
    return 2;
  }
  TrainerOptions o;
  o.config = config;
  o.train_files = train;
  o.params = params->get();
  o.model_options.device = PickDevice(w.device);
  o.max_steps = w.max_steps;
  o.loss_log = w.loss_log;
  o.track_keys = w.checksum;
  auto trainer = Trainer::Create(std::move(o));
  if (!trainer.ok()) {
    LOG(ERROR) << trainer.status();
    return 2;
  }
  absl::Status st = (*trainer)->InitDenseWeights();
  auto summary = st.ok() ? (*trainer)->Train() : absl::StatusOr<TrainSummary>(st);
  if (!summary.ok()) {
    LOG(ERROR) << "training failed: " << summary.status();
    return 1;
  }
  absl::StatusOr<EvalResult> result = EvalResult();
  if (!eval.empty()) result = (*trainer)->Evaluate(eval);
  if (!result.ok()) {
    LOG(ERROR) << "evaluation failed: " << result.status();
    return 1;
  }
  PrintResult(0, *summary, eval.empty() ? nullptr : &*result, ChecksumField(trainer->get(), w));
  return 0;
}

namespace {

// The trainer's clock in PS mode: the scheduler's.
class SchedulerJobClock final : public JobClock {
 public:
  explicit SchedulerJobClock(SchedulerClient* scheduler) : scheduler_(scheduler) {}
  absl::Status WaitClock(uint32_t rank, uint64_t step, absl::Duration timeout) override {
    return scheduler_->WaitClock(rank, step, timeout);
  }
  absl::Status Tick(uint32_t rank, uint64_t clock, const std::string& position) override {
    // The samples the position records (0 for a position without them).
    auto decoded = data::DecodePosition(position);
    return scheduler_->Tick(rank, clock, position, decoded.ok() ? decoded->samples : 0);
  }
  absl::Status ReportMetrics(const MetricsReport& report) override {
    return scheduler_->ReportMetrics(report);
  }
  std::optional<uint64_t> MinClock() const override { return scheduler_->min_clock(); }

 private:
  SchedulerClient* const scheduler_;
};

// What one start of training in a generation produced.
struct Outcome {
  TrainSummary summary;
  std::optional<EvalResult> eval;
  std::string checksum;
  std::string traffic;  // TrafficFields after training, before evaluation.
};

// Trains a lost worker's share in this process (TrainAdopted).
using AdoptFn = std::function<void(uint32_t rank)>;

// Trains from `start` to the end of this worker's data, reports done,
// evaluates (rank 0, once every worker has trained) and sends the final
// report. While it waits for every worker to have trained, the scheduler
// may hand it a lost worker's share (REASSIGN), trained with `adopt` (null:
// never asked for). A refusal for a stale generation (the job rolled back)
// or any other error is returned as it is.
absl::StatusOr<Outcome> TrainGeneration(const WorkerOptions& w, const JobConfig& config,
                                        uint32_t rank, uint32_t num_workers,
                                        const std::vector<std::string>& train,
                                        const std::vector<std::string>& eval,
                                        const WaitStartResponse& start, SchedulerClient* scheduler,
                                        ParamStore* params, const PsClient* client,
                                        const AdoptFn& adopt) {
  RETURN_IF_ERROR(CheckDataFiles(train, eval));
  TrainerOptions o;
  o.config = config;
  o.rank = rank;
  o.num_workers = num_workers;
  o.train_files = train;
  o.params = params;
  SchedulerJobClock clock(scheduler);
  o.clock = &clock;
  o.model_options.device = PickDevice(w.device);
  o.max_steps = w.max_steps;
  o.start_step = start.clock();
  o.start_position = start.position();
  o.step_delay = absl::Milliseconds(w.step_delay_ms);
  o.loss_log = w.loss_log;
  o.track_keys = w.checksum;
  ASSIGN_OR_RETURN(std::unique_ptr<Trainer> trainer, Trainer::Create(std::move(o)));
  RETURN_IF_ERROR(trainer->InitDenseWeights());
  Outcome out;
  ASSIGN_OR_RETURN(out.summary, trainer->Train());
  if (client != nullptr) out.traffic = TrafficFields(*client, config);
  MetricsReport done;
  done.set_rank(rank);
  done.set_step(out.summary.steps + start.clock());
  done.set_samples(out.summary.job_samples);
  done.set_train_loss(out.summary.last_loss);
  done.set_done(true);
  RETURN_IF_ERROR(scheduler->ReportMetrics(done));
  // Evaluation and checksums read the final weights: wait until every worker
  // has finished training (the job does not end before our final report).
  // With periodic evaluation the final checkpoint is evaluated instead
  // (CheckpointEvaluator), like every other.
  const bool evaluate = rank == 0 && !eval.empty() && !PeriodicEvaluation(config.training());
  if (evaluate || w.checksum) {
    while (true) {
      std::optional<uint32_t> lost;
      RETURN_IF_ERROR(
          scheduler->Barrier("trained", rank, absl::Hours(24), adopt ? &lost : nullptr));
      if (!lost) break;
      adopt(*lost);
    }
  }
  if (w.checksum) {
    ASSIGN_OR_RETURN(const uint64_t sum, trainer->WeightsChecksum());
    out.checksum = absl::StrCat(" checksum=", absl::Hex(sum, absl::kZeroPad16));
  }
  if (evaluate) {
    ASSIGN_OR_RETURN(out.eval, trainer->Evaluate(eval));
    metrics::GetGauge("shardps_worker_eval_auc", "AUC on the held-out split.").Set(out.eval->auc);
    metrics::GetGauge("shardps_worker_eval_logloss", "Logloss on the held-out split.")
        .Set(out.eval->logloss);
    done.set_eval_auc(out.eval->auc);
    done.set_eval_loss(out.eval->logloss);
    done.set_eval_examples(out.eval->examples);
  }
  done.set_final(true);
  RETURN_IF_ERROR(scheduler->ReportMetrics(done));
  return out;
}

// BSP with cluster.on_worker_loss WAIT: a step redone after a restart must
// be the step first computed. A restarted worker redoes its last unticked
// step; if part of its push of it had reached a server, that server applied
// the step (with every worker's push) and its values are of a later clock,
// while a server the push did not reach still waits for the gradient of the
// earlier values. Such a pull is refused (PsClient::Options::
// refuse_applied_clock) and the worker has the job roll back instead.
bool RedoneStepsExact(const JobConfig& config) {
  return config.cluster().mode() == BSP &&
         EffectiveOnWorkerLoss(config.cluster()) == ClusterConfig::WAIT;
}

// The servers' refusal of a redone step (PullRequest.refuse_applied_clock).
bool AppliedClockRefused(const absl::Status& st) {
  return absl::IsAlreadyExists(st) && absl::StrContains(st.message(), "has applied clock");
}

// An error worth starting again from the scheduler's start point (a server
// or the scheduler was briefly unreachable), rather than ending the worker.
bool Transient(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsAborted(st) ||
         absl::IsCancelled(st);
}

// One worker rank's connection to the servers, made at its first start.
struct Remote {
  std::unique_ptr<ParamStore> params;
  PsClient* client = nullptr;  // Owned by params.
};

// Creates `remote` for `rank` at its first start, or moves it to `start`'s
// generation and map.
absl::Status Connect(const WorkerOptions& w, const JobConfig& config, uint32_t rank,
                     const WaitStartResponse& start, SchedulerClient* scheduler, Remote* remote) {
  if (remote->params != nullptr) {
    remote->client->set_generation(start.generation());
    return remote->client->UpdateMap(start.map());
  }
  const ClusterConfig& k = config.cluster();
  PsClient::Options co;
  co.worker_rank = rank;
  co.encoding = WireEncoding(w.wire);
  co.max_message_bytes = k.max_message_bytes();
  co.generation = start.generation();
  // A server being replaced and restored must not fail the worker.
  co.retry_budget = absl::Milliseconds(k.server_deadline_ms()) + absl::Seconds(60);
  co.newest_generation = [scheduler] { return scheduler->scheduler_generation(); };
  co.refuse_applied_clock = RedoneStepsExact(config);
  if (!w.testing_exit_mid_push.empty()) {
    const std::vector<std::string> f =
        absl::StrSplit(w.testing_exit_mid_push, absl::MaxSplits(':', 2));
    uint32_t at_rank = 0;
    uint64_t at_clock = 0;
    if (f.size() != 3 || !absl::SimpleAtoi(f[0], &at_rank) || !absl::SimpleAtoi(f[1], &at_clock) ||
        f[2].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--testing_exit_mid_push=", w.testing_exit_mid_push, ": expected RANK:CLOCK:MARKER"));
    }
    if (at_rank == rank) {
      co.testing_exit_mid_push_clock = at_clock;
      co.testing_exit_mid_push_marker = f[2];
    }
  }
  auto created = PsClient::Create(co, start.map(), [scheduler](uint64_t v) {
    // Short: after ABORTED the scheduler has the newer map already; after
    // UNAVAILABLE it may not (yet: a server restarting at another address),
    // and the client retries.
    return scheduler->GetPartitionMap(v, absl::Milliseconds(300));
  });
  if (!created.ok()) return created.status();
  remote->client = created->get();
  remote->params = MakeRemoteParamStore(*std::move(created), k.mode() == BSP);
  return absl::OkStatus();
}

RegisterRequest WorkerRegistration(const JobConfig& config, std::optional<uint32_t> rank) {
  RegisterRequest request;
  request.set_role(WORKER);
  if (rank) request.set_requested_index(*rank);
  request.set_config_fingerprint(ConfigFingerprint(config));
  return request;
}

// cluster.on_worker_loss REASSIGN: trains lost worker `rank`'s unfinished
// share in this process, which has finished its own: registers for that
// rank (a new process taking its silent slot), trains from its clock and
// data position, reports it done. Gives the share up (returns) when the
// job rolls back, when its own process comes back first or takes the slot
// back, or on an error: the scheduler then offers it again.
absl::Status TrainAdopted(const WorkerOptions& w, const JobConfig& config, uint32_t rank,
                          const std::vector<std::string>& train,
                          const std::vector<std::string>& eval) {
  const ClusterConfig& k = config.cluster();
  SchedulerClient scheduler(w.scheduler);
  RegisterRequest request = WorkerRegistration(config, rank);
  ASSIGN_OR_RETURN(const RegisterResponse reg,
                   scheduler.Register(request, absl::Milliseconds(2 * k.dead_after_ms())));
  LOG(INFO) << "training lost worker " << rank << "'s share";
  scheduler.EnableRejoin(request, nullptr);
  // Losing the slot ends the adoption at the next refused request.
  scheduler.StartHeartbeats(WORKER, rank, reg.job_id(), absl::Milliseconds(k.heartbeat_ms()),
                            absl::Milliseconds(k.dead_after_ms() * 3),
                            [rank](bool job_ended, const std::string& why) {
                              if (!job_ended) LOG(WARNING) << "worker " << rank << ": " << why;
                            });
  ASSIGN_OR_RETURN(
      const WaitStartResponse start,
      scheduler.WaitStart(rank, std::nullopt, absl::Milliseconds(k.start_deadline_ms())));
  if (start.job_ended() || start.has_adopt_rank()) return absl::OkStatus();
  scheduler.NoteStart(start.generation(), start.clock(), start.position());
  Remote remote;
  RETURN_IF_ERROR(Connect(w, config, rank, start, &scheduler, &remote));
  LOG(INFO) << "worker " << rank << "'s share resumes at clock " << start.clock()
            << " (job generation " << start.generation() << ")";
  auto result = TrainGeneration(w, config, rank, reg.shard().num_workers(), train, eval, start,
                                &scheduler, remote.params.get(), remote.client, nullptr);
  if (!result.ok()) return result.status();
  LOG(INFO) << "worker " << rank << "'s share is trained (" << result->summary.steps
            << " steps in this process)";
  return absl::OkStatus();
}

// Registers with the scheduler (the rank asked for, if any), then keeps
// heartbeating: a heartbeat that hears the job failed sets *job_failed, one
// that hears this process was replaced or lost ends it (exit 3). An error
// says why no job can be joined.
absl::StatusOr<RegisterResponse> JoinJob(const JobConfig& config, const WorkerOptions& w,
                                         SchedulerClient* scheduler,
                                         std::atomic<bool>* job_failed) {
  const ClusterConfig& k = config.cluster();
  std::optional<uint32_t> requested;
  if (w.rank >= 0) requested = w.rank;
  RegisterRequest request = WorkerRegistration(config, requested);
  auto reg = scheduler->Register(request, absl::Milliseconds(k.start_deadline_ms()));
  if (!reg.ok() && absl::IsUnavailable(reg.status())) {
    // A scheduler stays a while after its job ended or failed to answer
    // late processes; gone, it leaves nothing to join.
    return absl::UnavailableError(absl::StrCat(
        "cannot reach the scheduler at ", w.scheduler, " within start_deadline_ms (",
        k.start_deadline_ms(),
        " ms), so no job to join (if it ran, it has ended): ", reg.status().message()));
  }
  if (!reg.ok()) {
    return absl::Status(reg.status().code(),
                        absl::StrCat("registration refused: ", reg.status().ToString()));
  }
  const uint32_t rank = reg->index();
  LOG(INFO) << "worker rank " << rank << " of " << reg->shard().num_workers();
  request.set_requested_index(rank);
  scheduler->EnableRejoin(request, nullptr);
  scheduler->StartHeartbeats(WORKER, rank, reg->job_id(), absl::Milliseconds(k.heartbeat_ms()),
                             absl::Milliseconds(k.dead_after_ms() * 3),
                             [job_failed](bool job_ended, const std::string& why) {
                               if (job_ended) {  // The main thread sees it in WaitStart.
                                 if (why.find("failed") != std::string::npos) {
                                   LOG(ERROR) << why;
                                   *job_failed = true;
                                 }
                                 return;
                               }
                               LOG(ERROR) << "stopping: " << why;
                               std::fflush(nullptr);
                               std::_Exit(3);
                             });
  return reg;
}

// With periodic evaluation and eval files: the evaluator of the checkpoints
// the scheduler leases to this worker; else nullptr.
std::unique_ptr<CheckpointEvaluator> StartEvaluator(const JobConfig& config, const WorkerOptions& w,
                                                    uint32_t rank,
                                                    const std::vector<std::string>& eval,
                                                    SchedulerClient* scheduler) {
  if (!PeriodicEvaluation(config.training()) || eval.empty()) return nullptr;
  CheckpointEvaluator::Options eo;
  eo.rank = rank;
  eo.config_path = w.config_path;
  eo.checkpoint_dir = config.checkpoint().dir();
  eo.eval_files = eval;
  eo.scheduler = scheduler;
  return std::make_unique<CheckpointEvaluator>(std::move(eo));
}

// What a worker does after training in a generation failed with `st`.
enum class Retry {
  kNewerGeneration,  // Wait for the next generation (a rollback).
  kFromLastStep,     // Start again from the scheduler's start point now.
  kGiveUp,
};

// A stale generation: the job rolled back. A step that cannot be redone
// exactly (BSP + WAIT): ask the scheduler to roll back. A transient error:
// start again, at most 5 times in a row (*transient_failures). Anything
// else: the worker reports the error to the scheduler and gives up.
Retry AfterFailedGeneration(const absl::Status& st, const JobConfig& config, uint32_t rank,
                            const WaitStartResponse& start, SchedulerClient* scheduler,
                            int* transient_failures) {
  if (IsStaleGeneration(st)) {
    LOG(WARNING) << "the job rolled back (" << st.message()
                 << "); restarting from the scheduler's start point";
    return Retry::kNewerGeneration;
  }
  if (AppliedClockRefused(st) && RedoneStepsExact(config)) {
    LOG(WARNING) << "worker " << rank << " cannot redo step " << start.clock() << " exactly ("
                 << st.message() << "): part of its push of it reached "
                 << "the servers before it was lost; asking for a rollback to the last "
                 << "checkpoint";
    const absl::Status asked =
        scheduler->RequestRollBack(rank, start.clock(), std::string(st.message()));
    if (asked.ok()) return Retry::kNewerGeneration;  // The rollback's generation.
    LOG(WARNING) << "asking for a rollback: " << asked;
    if (++*transient_failures <= 5) return Retry::kFromLastStep;
  }
  if (Transient(st) && ++*transient_failures <= 5) {
    LOG(WARNING) << "training stopped (" << st << "); starting again from the last "
                 << "acknowledged step (attempt " << *transient_failures << " of 5)";
    return Retry::kFromLastStep;
  }
  LOG(ERROR) << "training failed: " << st;
  MetricsReport failed;
  failed.set_rank(rank);
  failed.set_error(std::string(st.message()));
  (void)scheduler->ReportMetrics(failed);
  return Retry::kGiveUp;
}

// Prints the worker's result line (if it trained) and returns its exit
// status: 3 if the job failed, else 0.
int Finish(uint32_t rank, const std::optional<Outcome>& outcome, bool job_failed) {
  if (outcome) {
    PrintResult(rank, outcome->summary, outcome->eval ? &*outcome->eval : nullptr,
                outcome->checksum + outcome->traffic);
  }
  if (job_failed) {
    LOG(ERROR) << "the scheduler stopped the job";
    return 3;
  }
  return 0;
}

}  // namespace

int RunPsWorker(JobConfig config, const WorkerOptions& w) {
  std::vector<std::string> train, eval;
  if (absl::Status st = ResolveData(&config, &train, &eval); !st.ok()) {
    LOG(ERROR) << st.message();
    return 2;
  }
  const ClusterConfig& k = config.cluster();
  std::atomic<bool> job_failed{false};  // Heartbeats saw it (outlive `scheduler`).
  SchedulerClient scheduler(w.scheduler);
  auto reg = JoinJob(config, w, &scheduler, &job_failed);
  if (!reg.ok()) {
    LOG(ERROR) << reg.status().message();
    return 2;
  }
  const uint32_t rank = reg->index();
  // Periodic evaluation: this worker evaluates the checkpoints the
  // scheduler gives it, beside training (stopped before `scheduler` goes).
  const std::unique_ptr<CheckpointEvaluator> evaluator =
      StartEvaluator(config, w, rank, eval, &scheduler);
  // Long enough for every server to register and a recovery to finish.
  const absl::Duration start_timeout =
      absl::Milliseconds(uint64_t{k.start_deadline_ms()} + k.server_deadline_ms()) +
      absl::Minutes(30);
  const AdoptFn adopt = [&](uint32_t lost) {
    const absl::Status adopted = TrainAdopted(w, config, lost, train, eval);
    if (!adopted.ok()) LOG(WARNING) << "gave worker " << lost << "'s share up: " << adopted;
  };
  Remote remote;
  std::optional<uint64_t> after;  // Wait for a generation newer than this.
  std::optional<Outcome> outcome;
  int transient_failures = 0;
  while (true) {
    auto start = scheduler.WaitStart(rank, after, start_timeout);
    if (!start.ok()) {
      if (absl::IsAborted(start.status())) {
        LOG(ERROR) << "the job failed: " << start.status().message();
        job_failed = true;
        break;
      }
      LOG(ERROR) << "no start point: " << start.status();
      return 1;
    }
    if (start->job_ended()) break;
    if (start->has_adopt_rank()) {
      adopt(start->adopt_rank());
      continue;  // `after` unchanged: the job's end, a rollback, or another share.
    }
    const uint64_t generation = start->generation();
    scheduler.NoteStart(generation, start->clock(), start->position());
    if (absl::Status st = Connect(w, config, rank, *start, &scheduler, &remote); !st.ok()) {
      LOG(ERROR) << st;
      return 2;
    }
    LOG(INFO) << "worker " << rank << " starts at clock " << start->clock() << " (job generation "
              << generation << ")";
    auto result = TrainGeneration(w, config, rank, reg->shard().num_workers(), train, eval, *start,
                                  &scheduler, remote.params.get(), remote.client, adopt);
    if (result.ok()) {
      outcome = *std::move(result);
      transient_failures = 0;
      after = generation;  // Done: wait for the job's end, a rollback or a lost share.
      continue;
    }
    switch (AfterFailedGeneration(result.status(), config, rank, *start, &scheduler,
                                  &transient_failures)) {
      case Retry::kNewerGeneration:
        after = generation;
        break;
      case Retry::kFromLastStep:
        after.reset();
        break;
      case Retry::kGiveUp:
        return 1;
    }
  }
  return Finish(rank, outcome, job_failed);
}

}  // namespace shardps

#include "worker/trainer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <deque>
#include <future>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/partition.h"
#include "common/metrics.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "common/client/scheduler_client.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/lr_schedule.h"
#include "worker/data/metrics.h"
#include "worker/model/dedup.h"
#include "worker/model/model_factory.h"

namespace shardps {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

// A batch made ready for a step: keys deduplicated per table, bags as
// indices into the unique rows, buffers for the pulled rows. Reused.
struct Prepared {
  data::Batch batch;
  std::vector<std::vector<uint64_t>> unique_keys;  // Per model table.
  std::vector<std::vector<int64_t>> indices;       // Per field.
  std::vector<std::vector<float>> rows;            // Per model table.
  std::vector<float> dense_params;                 // Whole chunks.
  std::vector<TableRows> table_rows;
  std::vector<FieldBag> field_bags;
};

// Turns batches into Prepared steps with one deduper per table.
class Preparer {
 public:
  explicit Preparer(const ModelSpec& spec)
      : spec_(spec), dedup_(spec.tables.size()) {}

  void Prepare(Prepared* p) {
    const size_t num_tables = spec_.tables.size();
    p->unique_keys.resize(num_tables);
    p->rows.resize(num_tables);
    p->indices.resize(spec_.fields.size());
    for (size_t t = 0; t < num_tables; ++t) {
      size_t total = 0;
      for (size_t f = 0; f < spec_.fields.size(); ++f) {
        if (spec_.fields[f].table == static_cast<int>(t)) total += p->batch.fields[f].keys.size();
      }
      KeyDeduper& d = dedup_[t];
      d.Reset(total);
      for (size_t f = 0; f < spec_.fields.size(); ++f) {
        if (spec_.fields[f].table != static_cast<int>(t)) continue;
        const size_t start = d.inverse().size();
        d.Add(p->batch.fields[f].keys);
        p->indices[f].assign(d.inverse().begin() + start, d.inverse().end());
      }
      p->unique_keys[t] = d.unique_keys();
      p->rows[t].resize(d.unique_keys().size() * spec_.tables[t].dim);
    }
  }

 private:
  const ModelSpec& spec_;
  std::vector<KeyDeduper> dedup_;
};

// Reads and prepares batches on its own thread, a few steps ahead.
class DataPipeline {
 public:
  DataPipeline(std::unique_ptr<data::CriteoReader> reader, const ModelSpec& spec,
               int batch_size, int depth)
      : reader_(std::move(reader)), preparer_(spec), batch_size_(batch_size),
        num_dense_(static_cast<int>(spec.num_dense)), num_fields_(spec.fields.size()) {
    for (int i = 0; i < depth; ++i) free_.push_back(std::make_unique<Prepared>());
    thread_ = std::thread([this] { Loop(); });
  }
  ~DataPipeline() {
    {
      MutexLock lock(&mu_);
      stop_ = true;
      changed_.SignalAll();
    }
    thread_.join();
  }

  // The next prepared step; nullptr at the end of the data.
  absl::StatusOr<std::unique_ptr<Prepared>> Next() {
    MutexLock lock(&mu_);
    while (ready_.empty() && !finished_) changed_.Wait(&mu_);
    if (!ready_.empty()) {
      auto p = std::move(ready_.front());
      ready_.pop_front();
      changed_.SignalAll();
      return p;
    }
    if (!status_.ok()) return status_;
    return std::unique_ptr<Prepared>();
  }

  void Recycle(std::unique_ptr<Prepared> p) {
    if (!p) return;
    MutexLock lock(&mu_);
    free_.push_back(std::move(p));
    changed_.SignalAll();
  }

 private:
  void Loop() {
    while (true) {
      std::unique_ptr<Prepared> p;
      {
        MutexLock lock(&mu_);
        while (free_.empty() && !stop_) changed_.Wait(&mu_);
        if (stop_) return;
        p = std::move(free_.back());
        free_.pop_back();
      }
      p->batch.Reset(num_dense_, num_fields_);
      auto more = reader_->NextBatch(batch_size_, &p->batch);
      if (more.ok() && *more) preparer_.Prepare(p.get());
      MutexLock lock(&mu_);
      if (!more.ok() || !*more) {
        status_ = more.status();
        finished_ = true;
        changed_.SignalAll();
        return;
      }
      ready_.push_back(std::move(p));
      changed_.SignalAll();
    }
  }

  const std::unique_ptr<data::CriteoReader> reader_;
  Preparer preparer_;
  const int batch_size_;
  const int num_dense_;
  const size_t num_fields_;
  Mutex mu_;
  CondVar changed_;
  std::vector<std::unique_ptr<Prepared>> free_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Prepared>> ready_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

// The worker's Prometheus series (label rank), looked up once per Trainer.
class StepMetrics {
 public:
  explicit StepMetrics(uint32_t rank)
      : l_{{"rank", std::to_string(rank)}},
        steps_(metrics::GetCounter("shardps_worker_steps_total", "Training steps done.", l_)),
        samples_(metrics::GetCounter("shardps_worker_samples_total", "Examples trained.", l_)),
        sps_(metrics::GetGauge("shardps_worker_samples_per_second",
                               "Examples/s over the last report period.", l_)),
        loss_(metrics::GetGauge("shardps_worker_train_loss",
                                "Mean training logloss over the last report period.", l_)) {
    for (const char* phase : {"data", "wait", "pull", "compute", "push"}) {
      phases_.push_back(&metrics::GetCounter(
          "shardps_worker_step_seconds_total",
          "Seconds spent per step phase (data, wait for clock, pull, compute, push).",
          {{"rank", l_.at("rank")}, {"phase", phase}}));
    }
  }
  void Step(uint64_t samples, const StepTimes& total) {
    steps_.Increment();
    samples_.Increment(static_cast<double>(samples));
    const double now[] = {total.data, total.wait, total.pull, total.compute, total.push};
    for (size_t i = 0; i < phases_.size(); ++i) phases_[i]->Increment(now[i] - last_[i]);
    std::copy(std::begin(now), std::end(now), last_);
  }
  void Report(double samples_per_sec, double loss) {
    sps_.Set(samples_per_sec);
    loss_.Set(loss);
  }

 private:
  const metrics::Labels l_;
  prometheus::Counter& steps_;
  prometheus::Counter& samples_;
  prometheus::Gauge& sps_;
  prometheus::Gauge& loss_;
  std::vector<prometheus::Counter*> phases_;
  double last_[5] = {0, 0, 0, 0, 0};
};

}  // namespace

class Trainer::Impl {
 public:
  Impl(TrainerOptions options, std::unique_ptr<Model> model, uint32_t dense_table,
       uint32_t chunk)
      : o_(std::move(options)), model_(std::move(model)), dense_table_(dense_table),
        chunk_(chunk),
        num_chunks_((model_->NumDenseParams() + chunk - 1) / chunk),
        staleness_(EffectiveStaleness(o_.config.cluster())),
        bsp_(o_.config.cluster().mode() == BSP) {
    for (uint64_t c = 0; c < num_chunks_; ++c) chunk_keys_.push_back(c);
    dense_grad_.assign(num_chunks_ * chunk_, 0.0f);
  }

  absl::Status InitDenseWeights() {
    std::vector<float> init(num_chunks_ * chunk_, 0.0f);
    const TableConfig* t = nullptr;
    for (const TableConfig& tc : o_.config.tables()) {
      if (tc.id() == dense_table_) t = &tc;
    }
    model_->InitDenseParams(t ? t->seed() : 0, init.data());
    return o_.params->InitRows(dense_table_, chunk_, chunk_keys_.data(), num_chunks_,
                               init.data());
  }

  std::unique_ptr<PsClient::Op> StartPull(Prepared* p, PullPurpose purpose, uint64_t step) {
    std::vector<TablePull> pulls;
    const auto& tables = model_->spec().tables;
    for (size_t t = 0; t < tables.size(); ++t) {
      if (p->unique_keys[t].empty()) continue;
      pulls.push_back({tables[t].id, static_cast<uint32_t>(tables[t].dim),
                       p->unique_keys[t].data(), p->unique_keys[t].size(),
                       p->rows[t].data()});
    }
    p->dense_params.resize(num_chunks_ * chunk_);
    pulls.push_back({dense_table_, chunk_, chunk_keys_.data(), num_chunks_,
                     p->dense_params.data()});
    return o_.params->Pull(std::move(pulls), purpose, step);
  }

  ModelInputs Inputs(Prepared* p) {
    p->table_rows.clear();
    for (const auto& rows : p->rows) p->table_rows.push_back({rows});
    p->field_bags.clear();
    for (size_t f = 0; f < p->indices.size(); ++f) {
      p->field_bags.push_back({p->indices[f], p->batch.fields[f].offsets});
    }
    ModelInputs in;
    in.batch_size = p->batch.size;
    in.labels = p->batch.labels;
    in.dense = p->batch.dense;
    in.dense_params = absl::MakeConstSpan(p->dense_params.data(), model_->NumDenseParams());
    in.tables = p->table_rows;
    in.fields = p->field_bags;
    return in;
  }

  std::unique_ptr<PsClient::Op> StartPush(Prepared* p, uint64_t step, float lr_scale) {
    return StartPush(p, step, lr_scale, result_, &dense_grad_);
  }
  // `r` and `dense_buf` must stay untouched until the op's Wait() returns.
  std::unique_ptr<PsClient::Op> StartPush(Prepared* p, uint64_t step, float lr_scale,
                                          const StepResult& r, std::vector<float>* dense_buf) {
    std::vector<TablePush> pushes;
    const auto& tables = model_->spec().tables;
    for (size_t t = 0; t < tables.size(); ++t) {
      if (p->unique_keys[t].empty()) continue;
      pushes.push_back({tables[t].id, static_cast<uint32_t>(tables[t].dim),
                        p->unique_keys[t].data(), p->unique_keys[t].size(),
                        r.table_grads[t].data()});
    }
    dense_buf->resize(num_chunks_ * chunk_);
    std::copy(r.dense_grad.begin(), r.dense_grad.end(), dense_buf->begin());
    pushes.push_back({dense_table_, chunk_, chunk_keys_.data(), num_chunks_,
                      dense_buf->data()});
    return o_.params->Push(std::move(pushes), step, lr_scale);
  }

  // Whether `step` may start right now (never blocks for long).
  absl::StatusOr<bool> TryStart(uint64_t step) {
    if (o_.scheduler == nullptr) return true;
    const absl::Status st = o_.scheduler->WaitClock(o_.rank, step, absl::ZeroDuration());
    if (absl::IsDeadlineExceeded(st)) return false;
    if (!st.ok()) return st;
    return true;
  }

  absl::Status WaitClock(uint64_t step) {
    if (o_.scheduler == nullptr) return absl::OkStatus();
    absl::Status st;
    for (int i = 0; i < 1000; ++i) {  // Long waits (a dead server) in slices.
      st = o_.scheduler->WaitClock(o_.rank, step, absl::Seconds(10));
      if (!absl::IsDeadlineExceeded(st)) return st;
    }
    return st;
  }

  absl::StatusOr<TrainSummary> Train();
  absl::StatusOr<EvalResult> Evaluate(const std::vector<std::string>& files,
                                      const EvalBatchCallback& on_batch);
  absl::StatusOr<uint64_t> WeightsChecksum();

  void TrackKeys(const Prepared& p) {
    if (!o_.track_keys) return;
    seen_.resize(p.unique_keys.size());
    for (size_t t = 0; t < p.unique_keys.size(); ++t) {
      seen_[t].insert(p.unique_keys[t].begin(), p.unique_keys[t].end());
    }
  }

  TrainerOptions o_;
  std::vector<absl::flat_hash_set<uint64_t>> seen_;
  uint64_t final_step_ = 0;
  data::MetricAccumulator window_;  // Training predictions since the last report.  // Clock after Train(): reads wait for it (BSP).
  std::unique_ptr<Model> model_;
  const uint32_t dense_table_;
  const uint32_t chunk_;
  const uint64_t num_chunks_;
  const uint32_t staleness_;
  const bool bsp_;
  std::vector<uint64_t> chunk_keys_;
  std::vector<float> dense_grad_;
  StepResult result_;
  // Async push (SSP/ASP with prefetch): the step after computes into the
  // other buffer while this one's push is in flight.
  std::vector<float> dense_grad2_;
  StepResult result2_;
};

absl::StatusOr<TrainSummary> Trainer::Impl::Train() {
  ASSIGN_OR_RETURN(data::ReaderOptions ro,
                   data::ReaderOptionsFromConfig(o_.config, o_.train_files, o_.rank,
                                                 o_.num_workers, true));
  ASSIGN_OR_RETURN(auto reader, data::CriteoReader::Create(std::move(ro)));
  if (!o_.start_position.empty()) {
    ASSIGN_OR_RETURN(data::ReaderPosition position, data::DecodePosition(o_.start_position));
    RETURN_IF_ERROR(reader->Seek(position));
    LOG(INFO) << "worker " << o_.rank << " resumes at step " << o_.start_step
              << " from data position " << o_.start_position;
  }
  DataPipeline pipe(std::move(reader), model_->spec(), o_.config.training().batch_size(), 4);
  const uint64_t max_steps =
      o_.max_steps ? o_.max_steps : o_.config.training().max_steps();
  const bool prefetch = o_.config.training().prefetch() && staleness_ >= 1;
  // SSP/ASP with prefetch: step t's push is acknowledged, clock t+1 ticked
  // and step t+2's pull issued by a chain that runs during step t+1's
  // compute (the pull still misses this worker's push of the step before,
  // as with the synchronous prefetch). BSP keeps the push synchronous.
  const bool async_push = prefetch && !bsp_ && o_.scheduler != nullptr;
  struct InFlight {  // Step t's push and what follows it.
    std::unique_ptr<Prepared> batch;  // Its keys are being pushed.
    std::unique_ptr<PsClient::Op> push;
    std::future<absl::StatusOr<std::unique_ptr<PsClient::Op>>> done;  // -> pull t+2
  };
  std::optional<InFlight> inflight;
  std::unique_ptr<Prepared> ahead;  // Async: batch t+1 while step t runs.
  FILE* loss_log = o_.loss_log.empty() ? nullptr : std::fopen(o_.loss_log.c_str(), "w");

  TrainSummary s;
  const absl::Time start = absl::Now();
  absl::Time last_report = start;
  uint64_t report_steps = 0, report_samples = 0;
  double report_loss = 0, loss_sum = 0;
  std::deque<double> recent;
  uint64_t step = o_.start_step;
  StepMetrics step_metrics(o_.rank);

  absl::Time t0 = absl::Now();
  ASSIGN_OR_RETURN(std::unique_ptr<Prepared> cur, pipe.Next());
  s.times.data += Seconds(t0);
  std::unique_ptr<PsClient::Op> pull;
  if (cur) {
    t0 = absl::Now();
    RETURN_IF_ERROR(WaitClock(step));
    s.times.wait += Seconds(t0);
    pull = StartPull(cur.get(), TRAIN, step);
    if (async_push && (max_steps == 0 || step + 1 < max_steps)) {
      t0 = absl::Now();
      ASSIGN_OR_RETURN(ahead, pipe.Next());
      s.times.data += Seconds(t0);
    }
  }
  while (cur && (max_steps == 0 || step < max_steps)) {
    t0 = absl::Now();
    std::optional<absl::StatusOr<std::unique_ptr<PsClient::Op>>> chained;
    if (pull == nullptr) {  // Async: the chain could not prefetch this step.
      // Its push first (this pull then sees it, whatever the timing).
      if (inflight) chained = inflight->done.get();
      RETURN_IF_ERROR(WaitClock(step));
      s.times.wait += Seconds(t0);
      t0 = absl::Now();
      pull = StartPull(cur.get(), TRAIN, step);
    }
    RETURN_IF_ERROR(pull->Wait());
    s.times.pull += Seconds(t0);

    std::unique_ptr<Prepared> next;
    std::unique_ptr<PsClient::Op> next_pull;
    const bool more = max_steps == 0 || step + 1 < max_steps;
    if (prefetch && more && !async_push) {
      t0 = absl::Now();
      ASSIGN_OR_RETURN(next, pipe.Next());
      s.times.data += Seconds(t0);
      // Prefetch only if step + 1 may start now. Waiting here would
      // deadlock against a checkpoint hold at step + 1 (which waits for this
      // step's tick) and gains nothing when the bound is reached anyway.
      ASSIGN_OR_RETURN(bool may_start, TryStart(step + 1));
      if (next && may_start) next_pull = StartPull(next.get(), TRAIN, step + 1);
    }

    TrackKeys(*cur);
    t0 = absl::Now();
    StepResult& res = async_push && step % 2 == 1 ? result2_ : result_;
    RETURN_IF_ERROR(model_->ForwardBackward(Inputs(cur.get()), true, &res));
    if (o_.step_delay > absl::ZeroDuration()) absl::SleepFor(o_.step_delay);
    s.times.compute += Seconds(t0);

    t0 = absl::Now();
    const float lr_scale = static_cast<float>(
        data::LearningRateMultiplier(o_.config.training().lr_schedule(), step, max_steps));
    if (async_push) {
      // Step t-1's chain ran during this compute: its push is acknowledged,
      // clock t ticked, and maybe this step + 1's pull issued.
      if (inflight) {
        auto next_op = chained ? *std::move(chained) : inflight->done.get();
        if (!next_op.ok()) return next_op.status();
        next_pull = *std::move(next_op);
        // Step t+1's pull must not see this step's push (which follows):
        // with one worker the run is then the same whatever the timing.
        if (next_pull) RETURN_IF_ERROR(next_pull->Wait());
        pipe.Recycle(std::move(inflight->batch));
        inflight.reset();
      }
      next = std::move(ahead);
      if (max_steps == 0 || step + 2 < max_steps) {
        const absl::Time td = absl::Now();
        ASSIGN_OR_RETURN(ahead, pipe.Next());
        s.times.data += Seconds(td);
      }
    } else {
      RETURN_IF_ERROR(StartPush(cur.get(), step, lr_scale)->Wait());
      if (o_.scheduler) {
        RETURN_IF_ERROR(o_.scheduler->Tick(o_.rank, step + 1,
                                           data::EncodePosition(cur->batch.end_position)));
      }
    }
    s.times.push += Seconds(t0);

    if (loss_log) std::fprintf(loss_log, "%llu %.17g\n", (unsigned long long)step, res.loss);
    s.samples += cur->batch.size;
    loss_sum += res.loss;
    recent.push_back(res.loss);
    if (recent.size() > 50) recent.pop_front();
    report_loss += res.loss;
    window_.AddBatch(cur->batch.labels, res.probs);
    report_steps++;
    report_samples += cur->batch.size;
    ++step;
    step_metrics.Step(cur->batch.size, s.times);

    if (absl::Now() - last_report >= o_.report_every) {
      const double secs = Seconds(last_report);
      step_metrics.Report(report_samples / secs, report_loss / report_steps);
      LOG(INFO) << "worker " << o_.rank << " step " << step << " loss "
                << report_loss / report_steps << " " << report_samples / secs
                << " samples/s (data " << s.times.data << "s wait " << s.times.wait
                << "s pull " << s.times.pull << "s compute " << s.times.compute
                << "s push " << s.times.push << "s)";
      if (o_.scheduler) {
        MetricsReport r;
        r.set_rank(o_.rank);
        r.set_step(step);
        r.set_samples(s.samples);
        r.set_samples_per_sec(report_samples / secs);
        r.set_train_loss(report_loss / report_steps);
        const double auc = window_.Auc();
        r.set_train_auc(std::isnan(auc) ? 0 : auc);
        r.set_data_sec(s.times.data);
        r.set_wait_sec(s.times.wait);
        r.set_pull_sec(s.times.pull);
        r.set_compute_sec(s.times.compute);
        r.set_push_sec(s.times.push);
        (void)o_.scheduler->ReportMetrics(r);
      }
      last_report = absl::Now();
      report_steps = report_samples = 0;
      report_loss = 0;
      window_.Clear();
    }

    if (async_push) {
      // Push step t - 1 (== `step` now) and chain the tick and the pull of
      // the step after next behind it.
      InFlight f;
      f.push = StartPush(cur.get(), step - 1, lr_scale, res,
                         &res == &result_ ? &dense_grad_ : &dense_grad2_);
      f.batch = std::move(cur);
      Prepared* const after = ahead.get();  // Batch step + 1, if any.
      f.done = std::async(std::launch::async,
                          [this, push = f.push.get(), batch = f.batch.get(), after,
                           tick = step]() -> absl::StatusOr<std::unique_ptr<PsClient::Op>> {
        RETURN_IF_ERROR(push->Wait());
        RETURN_IF_ERROR(o_.scheduler->Tick(o_.rank, tick,
                                           data::EncodePosition(batch->batch.end_position)));
        if (after == nullptr) return nullptr;
        ASSIGN_OR_RETURN(bool may_start, TryStart(tick + 1));
        if (!may_start) return nullptr;
        return StartPull(after, TRAIN, tick + 1);
      });
      inflight = std::move(f);
      cur = std::move(next);
      pull = std::move(next_pull);
      continue;
    }
    pipe.Recycle(std::move(cur));
    if (prefetch && (next_pull || !next)) {
      cur = std::move(next);
      pull = std::move(next_pull);
    } else if (prefetch) {  // Prefetch was not allowed: pull now.
      cur = std::move(next);
      t0 = absl::Now();
      RETURN_IF_ERROR(WaitClock(step));
      s.times.wait += Seconds(t0);
      pull = StartPull(cur.get(), TRAIN, step);
    } else if (more) {
      t0 = absl::Now();
      ASSIGN_OR_RETURN(cur, pipe.Next());
      s.times.data += Seconds(t0);
      if (cur) {
        t0 = absl::Now();
        RETURN_IF_ERROR(WaitClock(step));
        s.times.wait += Seconds(t0);
        pull = StartPull(cur.get(), TRAIN, step);
      }
    }
  }
  if (inflight) {  // The last push: acknowledged and ticked before the end.
    auto op = inflight->done.get();
    if (!op.ok()) return op.status();
    if (*op) (void)(*op)->Wait();
    inflight.reset();
  }
  if (pull && cur) (void)pull->Wait();  // A prefetched pull past max_steps.
  if (loss_log) std::fclose(loss_log);
  s.steps = step - o_.start_step;
  final_step_ = step;
  s.seconds = Seconds(start);
  s.samples_per_sec = s.seconds > 0 ? s.samples / s.seconds : 0;
  s.mean_loss = s.steps ? loss_sum / s.steps : 0;
  for (double l : recent) s.last_loss += l / recent.size();
  return s;
}

absl::StatusOr<EvalResult> Trainer::Impl::Evaluate(const std::vector<std::string>& files,
                                                    const EvalBatchCallback& on_batch) {
  ASSIGN_OR_RETURN(data::ReaderOptions ro,
                   data::ReaderOptionsFromConfig(o_.config, files, 0, 1, false));
  ASSIGN_OR_RETURN(auto reader, data::CriteoReader::Create(std::move(ro)));
  Preparer preparer(model_->spec());
  Prepared p;
  data::MetricAccumulator acc;
  StepResult result;
  while (true) {
    p.batch.Reset(static_cast<int>(model_->spec().num_dense), model_->spec().fields.size());
    ASSIGN_OR_RETURN(bool more, reader->NextBatch(o_.config.training().batch_size(), &p.batch));
    if (!more) break;
    preparer.Prepare(&p);
    RETURN_IF_ERROR(StartPull(&p, EVAL, final_step_)->Wait());
    RETURN_IF_ERROR(model_->ForwardBackward(Inputs(&p), false, &result));
    acc.AddBatch(p.batch.labels, result.probs);
    if (on_batch) RETURN_IF_ERROR(on_batch(p.batch, result.probs));
  }
  EvalResult r;
  r.examples = acc.count();
  r.auc = acc.Auc();
  r.logloss = acc.LogLoss();
  return r;
}

absl::StatusOr<uint64_t> Trainer::Impl::WeightsChecksum() {
  uint64_t h = 0x6a09e667f3bcc908ULL;
  auto mix_rows = [&h](const std::vector<uint64_t>& keys, const std::vector<float>& rows) {
    for (uint64_t k : keys) h = Mix64(h ^ k);
    for (float v : rows) {
      uint32_t bits;
      std::memcpy(&bits, &v, sizeof bits);
      h = Mix64(h ^ bits);
    }
  };
  const auto& tables = model_->spec().tables;
  for (size_t t = 0; t < tables.size() && t < seen_.size(); ++t) {
    std::vector<uint64_t> keys(seen_[t].begin(), seen_[t].end());
    std::sort(keys.begin(), keys.end());
    std::vector<float> rows(keys.size() * tables[t].dim);
    RETURN_IF_ERROR(o_.params->Pull({{tables[t].id, static_cast<uint32_t>(tables[t].dim),
                                      keys.data(), keys.size(), rows.data()}},
                                    EVAL, final_step_)->Wait());
    mix_rows(keys, rows);
  }
  std::vector<float> dense(num_chunks_ * chunk_);
  RETURN_IF_ERROR(o_.params->Pull({{dense_table_, chunk_, chunk_keys_.data(), num_chunks_,
                                    dense.data()}}, EVAL, final_step_)->Wait());
  mix_rows(chunk_keys_, dense);
  return h;
}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::Create(TrainerOptions options) {
  if (options.params == nullptr) return absl::InvalidArgumentError("trainer: no ParamStore");
  at::set_num_threads(static_cast<int>(options.config.training().intra_op_threads()));
  const TableConfig* dense = FindTable(options.config, options.config.model().dense_table());
  if (dense == nullptr || dense->kind() != TableConfig::DENSE) {
    return absl::InvalidArgumentError(
        "trainer: model.dense_table must name the DENSE table of the MLP weights");
  }
  ASSIGN_OR_RETURN(auto model,
                   CreateModel(options.config, options.model_options.device));
  const uint32_t chunk = options.config.cluster().dense_chunk_size();
  const uint32_t dense_id = dense->id();
  return std::unique_ptr<Trainer>(new Trainer(
      std::make_unique<Impl>(std::move(options), std::move(model), dense_id, chunk)));
}

Trainer::Trainer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Trainer::~Trainer() = default;
absl::Status Trainer::InitDenseWeights() { return impl_->InitDenseWeights(); }
absl::StatusOr<TrainSummary> Trainer::Train() { return impl_->Train(); }
absl::StatusOr<EvalResult> Trainer::Evaluate(const std::vector<std::string>& files) {
  return impl_->Evaluate(files, nullptr);
}
absl::StatusOr<EvalResult> Trainer::Evaluate(const std::vector<std::string>& files,
                                             const EvalBatchCallback& on_batch) {
  return impl_->Evaluate(files, on_batch);
}
uint64_t Trainer::NumDenseParams() const { return impl_->model_->NumDenseParams(); }
absl::StatusOr<uint64_t> Trainer::WeightsChecksum() { return impl_->WeightsChecksum(); }

}  // namespace shardps

#include "worker/trainer.h"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/eval_metrics.h"
#include "worker/embedding_cache.h"
#include "worker/model/model_factory.h"
#include "worker/trainer_data.h"
#include "worker/trainer_params.h"
#include "worker/trainer_progress.h"
#include "worker/trainer_steps.h"

namespace shardps {

using trainer_internal::DataPipeline;
using trainer_internal::Prepared;
using trainer_internal::Preparer;

class Trainer::Impl {
 public:
  Impl(TrainerOptions options, std::unique_ptr<Model> model, uint32_t dense_table, uint32_t chunk)
      : o_(std::move(options)),
        model_(std::move(model)),
        params_(o_.params, model_.get(), dense_table, chunk,
                o_.config.training().has_dense_compression()
                    ? o_.config.training().dense_compression().ratio()
                    : 0.0f) {}

  absl::Status InitDenseWeights();
  absl::StatusOr<TrainSummary> Train();
  absl::StatusOr<EvalResult> Evaluate(const std::vector<std::string>& files,
                                      const EvalBatchCallback& on_batch);
  absl::StatusOr<uint64_t> WeightsChecksum();
  absl::Status Predict(data::Batch* batch, std::vector<float>* probs);
  uint64_t NumDenseParams() const { return model_->NumDenseParams(); }

 private:
  // This worker's share of the training data, at start_position if set.
  absl::StatusOr<std::unique_ptr<data::CriteoReader>> OpenTrainData();
  // The embedding cache of one Train(), or null: off (logged why, if the
  // config asks for it).
  std::unique_ptr<EmbeddingCache> MakeCache() const;

  const TrainerOptions o_;
  const std::unique_ptr<Model> model_;
  trainer_internal::StepParams params_;
  std::vector<absl::flat_hash_set<uint64_t>> seen_;  // Keys trained on (track_keys).
  uint64_t final_step_ = 0;  // Clock after Train(): reads wait for it (BSP).
  // Predict's scratch, kept so that a warm Predict does not allocate.
  std::unique_ptr<Preparer> predict_preparer_;
  Prepared predict_;
  StepResult predict_result_;
};

absl::Status Trainer::Impl::InitDenseWeights() {
  std::vector<float> init(params_.num_chunks() * params_.chunk(), 0.0f);
  const TableConfig* t = nullptr;
  for (const TableConfig& tc : o_.config.tables()) {
    if (tc.id() == params_.dense_table()) t = &tc;
  }
  model_->InitDenseParams(t ? t->seed() : 0, init.data());
  return params_.InitDense(init.data());
}

absl::StatusOr<std::unique_ptr<data::CriteoReader>> Trainer::Impl::OpenTrainData() {
  ASSIGN_OR_RETURN(
      data::ReaderOptions ro,
      data::ReaderOptionsFromConfig(o_.config, o_.train_files, o_.rank, o_.num_workers, true));
  ASSIGN_OR_RETURN(auto reader, data::CriteoReader::Create(std::move(ro)));
  if (!o_.start_position.empty()) {
    ASSIGN_OR_RETURN(data::ReaderPosition position, data::DecodePosition(o_.start_position));
    RETURN_IF_ERROR(reader->Seek(position));
    LOG(INFO) << "worker " << o_.rank << " resumes at step " << o_.start_step
              << " from data position " << o_.start_position;
  }
  return reader;
}

std::unique_ptr<EmbeddingCache> Trainer::Impl::MakeCache() const {
  const TrainingConfig& tr = o_.config.training();
  if (!tr.has_cache()) return nullptr;
  const uint32_t staleness = EffectiveStaleness(o_.config.cluster());
  absl::Status why;
  if (staleness == 0) {
    why = absl::FailedPreconditionError("BSP: every step pulls every row");
  } else if (o_.clock == nullptr) {
    why = absl::FailedPreconditionError("local mode");
  } else if (!o_.params->PullsWithState()) {
    why = absl::FailedPreconditionError(
        "values on the wire other than fp32 (cached rows need their optimizer state)");
  }
  std::unique_ptr<EmbeddingCache> cache;
  if (why.ok()) {
    EmbeddingCache::Options co;
    co.max_rows = tr.cache().max_rows();
    co.max_bytes = tr.cache().max_bytes();
    co.staleness = tr.cache().staleness() > 0 ? tr.cache().staleness()
                   : staleness == UINT32_MAX  ? 2
                                              : staleness;
    co.metrics_rank = absl::StrCat(o_.rank);
    std::vector<std::pair<uint32_t, uint32_t>> tables;
    for (const TableSpec& t : model_->spec().tables) {
      tables.emplace_back(t.id, static_cast<uint32_t>(t.dim));
    }
    auto created = EmbeddingCache::Create(co, o_.config, tables);
    if (created.ok()) {
      cache = *std::move(created);
    } else {
      why = created.status();
    }
  }
  if (cache == nullptr) {
    LOG(WARNING) << "worker " << o_.rank << ": training.cache is set but off: " << why.message();
    return nullptr;
  }
  LOG(INFO) << "worker " << o_.rank << " caches embedding rows read within " << cache->staleness()
            << " clocks of the job's minimum"
            << (tr.cache().max_rows() ? absl::StrCat(", at most ", tr.cache().max_rows(), " rows")
                                      : "")
            << (tr.cache().max_bytes() || !tr.cache().max_rows()
                    ? absl::StrCat(", at most ",
                                   tr.cache().max_bytes() ? tr.cache().max_bytes()
                                                          : EmbeddingCache::kDefaultMaxBytes,
                                   " bytes")
                    : "");
  return cache;
}

absl::StatusOr<TrainSummary> Trainer::Impl::Train() {
  ASSIGN_OR_RETURN(auto reader, OpenTrainData());
  const uint64_t samples_before = reader->position().samples;
  DataPipeline data(std::move(reader), model_->spec(), o_.config.training().batch_size(), 4);
  trainer_internal::TrainProgress progress(o_.rank, o_.clock, o_.loss_log, o_.report_every,
                                           samples_before);
  trainer_internal::StepEnv env;
  env.data = &data;
  env.params = &params_;
  env.model = model_.get();
  env.progress = &progress;
  env.clock = o_.clock;
  env.rank = o_.rank;
  env.lr_schedule = o_.config.training().lr_schedule();
  env.start_step = o_.start_step;
  env.max_steps = o_.max_steps ? o_.max_steps : o_.config.training().max_steps();
  env.step_delay = o_.step_delay;
  env.seen = o_.track_keys ? &seen_ : nullptr;
  env.config = &o_.config;
  // A new cache per Train(): a rollback or a new generation never sees a
  // row read before it.
  const std::unique_ptr<EmbeddingCache> cache = MakeCache();
  env.cache = cache.get();
  const auto pipeline = trainer_internal::ChooseStepPipeline(o_.config, o_.clock != nullptr);
  ASSIGN_OR_RETURN(final_step_, trainer_internal::RunSteps(pipeline, env));
  TrainSummary summary = progress.Summary(final_step_ - o_.start_step);
  if (cache != nullptr) {
    const EmbeddingCache::Stats s = cache->stats();
    CacheSummary& c = summary.cache;
    c.on = s.lookups > 0;
    c.lookups = s.lookups;
    c.hits = s.hits;
    c.bytes_saved = s.bytes_saved;
    c.state_bytes = s.state_bytes;
    c.staleness_mean = s.hits ? static_cast<double>(s.staleness_sum) / s.hits : 0.0;
    c.staleness_max = s.staleness_max;
    c.rows = s.rows;
    c.evictions = s.evictions;
    c.clears = s.clears;
  }
  return summary;
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
    RETURN_IF_ERROR(params_.StartPull(&p, EVAL, final_step_)->Wait());
    RETURN_IF_ERROR(model_->ForwardBackward(params_.Inputs(&p), false, &result));
    acc.AddBatch(p.batch.labels, result.probs);
    if (on_batch) RETURN_IF_ERROR(on_batch(p.batch, result.probs));
  }
  EvalResult r;
  r.examples = acc.count();
  r.auc = acc.Auc();
  r.logloss = acc.LogLoss();
  return r;
}

absl::Status Trainer::Impl::Predict(data::Batch* batch, std::vector<float>* probs) {
  if (predict_preparer_ == nullptr) predict_preparer_ = std::make_unique<Preparer>(model_->spec());
  Prepared& p = predict_;
  std::swap(p.batch, *batch);
  predict_preparer_->Prepare(&p);
  absl::Status st = params_.StartPull(&p, EVAL, final_step_)->Wait();
  if (st.ok()) st = model_->ForwardBackward(params_.Inputs(&p), false, &predict_result_);
  std::swap(p.batch, *batch);
  RETURN_IF_ERROR(st);
  probs->assign(predict_result_.probs.begin(), predict_result_.probs.end());
  return absl::OkStatus();
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
    RETURN_IF_ERROR(o_.params
                        ->Pull({{tables[t].id, static_cast<uint32_t>(tables[t].dim), keys.data(),
                                 keys.size(), rows.data()}},
                               EVAL, final_step_)
                        ->Wait());
    mix_rows(keys, rows);
  }
  const std::vector<uint64_t>& chunk_keys = params_.chunk_keys();
  std::vector<float> dense(params_.num_chunks() * params_.chunk());
  RETURN_IF_ERROR(o_.params
                      ->Pull({{params_.dense_table(), params_.chunk(), chunk_keys.data(),
                               chunk_keys.size(), dense.data()}},
                             EVAL, final_step_)
                      ->Wait());
  mix_rows(chunk_keys, dense);
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
  options.model_options.precision = PrecisionFromConfig(options.config);
  ASSIGN_OR_RETURN(auto model, CreateModel(options.config, options.model_options));
  LOG(INFO) << "model: " << model->DebugString();
  const uint32_t chunk = options.config.cluster().dense_chunk_size();
  const uint32_t dense_id = dense->id();
  return std::unique_ptr<Trainer>(
      new Trainer(std::make_unique<Impl>(std::move(options), std::move(model), dense_id, chunk)));
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
uint64_t Trainer::NumDenseParams() const { return impl_->NumDenseParams(); }
absl::Status Trainer::Predict(data::Batch* batch, std::vector<float>* probs) {
  return impl_->Predict(batch, probs);
}
absl::StatusOr<uint64_t> Trainer::WeightsChecksum() { return impl_->WeightsChecksum(); }

}  // namespace shardps

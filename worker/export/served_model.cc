#include "worker/export/served_model.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "common/table_hash.h"
#include "server/table_store.h"
#include "worker/data/criteo_reader.h"
#include "worker/export/checkpoint_loader.h"

namespace shardps {
namespace exporter {

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const JobConfig& config,
                                                               const std::string& root,
                                                               uint64_t clock) {
  std::unique_ptr<ServedModel> m(new ServedModel());
  m->config_ = config;
  ASSIGN_OR_RETURN(m->params_, MakeLocalParamStore(config));
  TrainerOptions options;
  options.config = config;
  options.params = m->params_.get();
  options.model_options.device = c10::Device(c10::DeviceType::CPU);
  {
    MutexLock lock(&m->predict_mu_);
    ASSIGN_OR_RETURN(m->trainer_, Trainer::Create(std::move(options)));
    const uint64_t chunk = config.cluster().dense_chunk_size();
    const uint64_t chunks = (m->trainer_->NumDenseParams() + chunk - 1) / chunk;
    ASSIGN_OR_RETURN(LoadedCheckpoint loaded,
                     RestoreCheckpoint(config, root, clock, chunks, m->params_->local_tables()));
    m->clock_ = loaded.clock;
    m->dir_ = std::move(loaded.dir);
    ASSIGN_OR_RETURN(data::ReaderOptions ro,
                     data::ReaderOptionsFromConfig(config, {}, 0, 1, false));
    m->parser_ =
        std::make_unique<data::LineParser>(ro.format, ro.num_dense, ro.num_columns, ro.fields);
  }
  RETURN_IF_ERROR(m->Index());
  return m;
}

ServedModel::~ServedModel() {
  MutexLock lock(&predict_mu_);
  trainer_.reset();  // Before the store it reads.
}

absl::Status ServedModel::Index() {
  TableHash hash;
  for (const Table* table : params_->local_tables()->tables()) {
    const uint32_t id = table->id();
    const size_t dim = table->dim();
    absl::flat_hash_set<uint64_t>& keys = keys_[id];
    table->ForEachRow([&](uint64_t key, const float* payload) {
      hash.Add(id, key, payload, dim);
      keys.insert(key);
    });
    table->ForEachSharedRow(std::nullopt, [&](uint32_t, uint64_t key, const float* payload) {
      hash.Add(id, key, payload, dim);
    });
  }
  table_hash_ = hash.value();
  rows_ = hash.rows();
  return absl::OkStatus();
}

absl::Status ServedModel::Predict(absl::Span<const absl::string_view> lines,
                                  std::vector<float>* probs) {
  probs->clear();
  if (lines.empty()) return absl::OkStatus();
  MutexLock lock(&predict_mu_);
  batch_.Reset(parser_->num_dense(), parser_->num_fields());
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::Status st = parser_->Parse(lines[i], &batch_);
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", i, ": ", st.message()));
    }
  }
  return trainer_->Predict(&batch_, probs);
}

absl::Status ServedModel::Lookup(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t* dim,
                                 std::vector<bool>* found, std::vector<float>* values) const {
  Table* table = params_->local_tables()->FindTable(table_id);
  auto present = keys_.find(table_id);
  if (table == nullptr || present == keys_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("no table with id ", table_id));
  }
  *dim = table->dim();
  found->assign(keys.size(), false);
  values->assign(keys.size() * table->dim(), 0.0f);
  if (keys.empty()) return absl::OkStatus();
  // An evaluation pull never inserts; keys without a row are zeroed after.
  table->Pull(keys.data(), keys.size(), /*train=*/false, values->data());
  for (size_t i = 0; i < keys.size(); ++i) {
    (*found)[i] = present->second.contains(keys[i]);
    if (!(*found)[i]) {
      std::fill_n(values->begin() + i * table->dim(), table->dim(), 0.0f);
    }
  }
  return absl::OkStatus();
}

}  // namespace exporter
}  // namespace shardps

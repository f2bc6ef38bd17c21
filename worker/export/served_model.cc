#include "worker/export/served_model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "common/table_hash.h"
#include "server/snapshot.h"
#include "server/table_store.h"
#include "worker/data/criteo_reader.h"
#include "worker/export/checkpoint_loader.h"

namespace shardps {
namespace exporter {

namespace {

// Writes every row of `from` (weights, optimizer state and stamps, bit for
// bit) and its shared rows into the empty `to` of the same config.
void CopyRows(const TableStore& from, TableStore* to) {
  for (const Table* source : from.tables()) {
    Table* target = to->FindTable(source->id());
    source->ForEachRow(
        [target](uint64_t key, const float* payload) { target->RestoreRow(key, payload); });
    source->ForEachSharedRow(std::nullopt, [target](uint32_t, uint64_t key, const float* payload) {
      target->RestoreRow(key, payload);
    });
  }
}

// One verified link on top of what `store` holds: per file, its deletions,
// then its rows, as ApplyChain applies each link after the first
// (server/snapshot.cc), but without clearing the store first.
void ApplyLink(const LoadedFiles& files, TableStore* store) {
  std::vector<float> payload;
  for (const auto& file : files.files) {
    for (const bool deletions : {true, false}) {
      for (const checkpoint::RecordBlock& block : file->blocks()) {
        if (block.deleted() != deletions) continue;
        Table* table = store->FindTable(block.table_id());  // The reader checked the schemas.
        payload.resize(table->row_stride());
        for (size_t i = 0; i < block.size(); ++i) {
          if (deletions) {
            table->DeleteRow(block.key(i));
            continue;
          }
          const absl::string_view bytes = block.payload(i);
          std::memcpy(payload.data(), bytes.data(), bytes.size());
          table->RestoreRow(block.key(i), payload.data());
        }
      }
    }
  }
}

}  // namespace

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Empty(const JobConfig& config) {
  std::unique_ptr<ServedModel> m(new ServedModel());
  m->config_ = config;
  ASSIGN_OR_RETURN(m->params_, MakeLocalParamStore(config));
  TrainerOptions options;
  options.config = config;
  options.params = m->params_.get();
  options.model_options.device = c10::Device(c10::DeviceType::CPU);
  MutexLock lock(&m->predict_mu_);
  ASSIGN_OR_RETURN(m->trainer_, Trainer::Create(std::move(options)));
  ASSIGN_OR_RETURN(data::ReaderOptions ro, data::ReaderOptionsFromConfig(config, {}, 0, 1, false));
  m->parser_ =
      std::make_unique<data::LineParser>(ro.format, ro.num_dense, ro.num_columns, ro.fields);
  return m;
}

uint64_t ServedModel::NumDenseChunks() const {
  MutexLock lock(&predict_mu_);
  const uint64_t chunk = config_.cluster().dense_chunk_size();
  return (trainer_->NumDenseParams() + chunk - 1) / chunk;
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const JobConfig& config,
                                                               const std::string& root,
                                                               uint64_t clock) {
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Empty(config));
  ASSIGN_OR_RETURN(
      LoadedCheckpoint loaded,
      RestoreCheckpoint(config, root, clock, m->NumDenseChunks(), m->params_->local_tables()));
  m->clock_ = loaded.clock;
  m->dir_ = std::move(loaded.dir);
  RETURN_IF_ERROR(m->Index());
  return m;
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::WithDeltas(
    const checkpoint::ResolvedCheckpoint& next, size_t first, uint64_t* bytes_read) const {
  const size_t n = next.chain.size();
  if (first == 0 || first >= n || next.chain_dirs.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(next.dir, ": links ", first, ".. of a chain of ",
                                                   n, " do not continue version ", clock_));
  }
  if (next.manifest.job_name() != config_.name()) {
    return absl::FailedPreconditionError(absl::StrCat(next.dir, ": checkpoint of job \"",
                                                      next.manifest.job_name(),
                                                      "\", this job is \"", config_.name(), "\""));
  }
  for (size_t i = first; i < n; ++i) {
    const uint64_t base = i == first ? clock_ : next.chain[i - 1].clock();
    if (next.chain[i].kind() != checkpoint::CheckpointManifest::DELTA ||
        next.chain[i].base_id() != checkpoint::CheckpointId(base)) {
      return absl::InvalidArgumentError(absl::StrCat(next.chain_dirs[i], ": not a delta on ",
                                                     checkpoint::CheckpointId(base),
                                                     " (version served: ", clock_, ")"));
    }
  }
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Empty(config_));
  TableStore* store = m->params_->local_tables();
  // Every file of every link verified before a row is written.
  checkpoint::ResolvedCheckpoint links;
  links.dir = next.dir;
  links.manifest = next.manifest;
  links.chain.assign(next.chain.begin() + first, next.chain.end());
  links.chain_dirs.assign(next.chain_dirs.begin() + first, next.chain_dirs.end());
  const std::vector<bool> owned(config_.cluster().num_partitions(), true);
  ASSIGN_OR_RETURN(const std::vector<LoadedFiles> files,
                   LoadOwnedChain(links, owned, TableSchemas(*store)));
  CopyRows(*params_->local_tables(), store);
  for (const LoadedFiles& link : files) ApplyLink(link, store);
  store->SetClock(next.manifest.clock());
  if (bytes_read != nullptr) {
    *bytes_read = 0;
    for (const LoadedFiles& link : files) *bytes_read += link.bytes;
  }
  m->clock_ = next.manifest.clock();
  m->dir_ = next.dir;
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
    table->ForEachRow([&](uint64_t key, const float* payload) { hash.Add(id, key, payload, dim); });
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
  if (table == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("no table with id ", table_id));
  }
  *dim = table->dim();
  found->assign(keys.size(), false);
  values->assign(keys.size() * table->dim(), 0.0f);
  if (keys.empty()) return absl::OkStatus();
  // An evaluation pull never inserts; keys without a row are zeroed after.
  table->Pull(keys.data(), keys.size(), /*train=*/false, values->data());
  for (size_t i = 0; i < keys.size(); ++i) {
    (*found)[i] = table->Contains(keys[i]);
    if (!(*found)[i]) {
      std::fill_n(values->begin() + i * table->dim(), table->dim(), 0.0f);
    }
  }
  return absl::OkStatus();
}

}  // namespace exporter
}  // namespace shardps

#include "worker/export/local_model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "server/snapshot.h"
#include "server/table_store.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/line_parser.h"
#include "worker/export/checkpoint_loader.h"
#include "worker/param_store.h"
#include "worker/trainer.h"

namespace shardps {
namespace exporter {

struct LocalModel::DeltaFiles {
  LoadedFiles files;
};

struct LocalModel::Scratch {
  std::vector<uint8_t> held;
  std::vector<float> old;
  std::vector<float> weights;
  std::vector<uint64_t> keys;
  std::vector<float> payloads;
};

namespace {

// Where ApplyRecords writes.
struct Target {
  Table* table;
  uint32_t num_partitions;
  RowObserver* observer;  // Not null.
};

// Whether `key` is the reserved key of a shared unadmitted row of `table`
// (Table::RestoreRow writes its partition's shared row, not a row).
bool IsSharedKey(const Table& table, uint64_t key, uint32_t num_partitions) {
  return table.has_shared_rows() &&
         table.SharedRowKey(PartitionOf(table.id(), key, num_partitions)) == key;
}

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

// Records `keys[0, n)` (unique) onto the table: deletions when `payloads`
// is null, else rows of row_stride() floats each from `payloads`
// (unaligned bytes; the weights lead). The observer is told each record
// with the weights the table held for its key. A shared row always exists
// (a write replaces it); a deletion drops a row only (a shared key has none
// after a restore). The rows are written in one Table::RestoreRows.
void ApplyRecords(const uint64_t* keys, size_t n, const char* payloads, const Target& t,
                  std::vector<uint8_t>* held, std::vector<float>* old,
                  std::vector<float>* weights) {
  Table* table = t.table;
  const uint32_t dim = table->dim();
  const size_t bytes = table->row_stride() * sizeof(float);
  const bool deletions = payloads == nullptr;
  held->resize(n);
  old->resize(n * dim);
  weights->resize(dim);
  for (size_t i = 0; i < n; ++i) {
    (*held)[i] =
        table->Contains(keys[i]) || (!deletions && IsSharedKey(*table, keys[i], t.num_partitions));
  }
  // The old weights, in one batch: an evaluation pull changes nothing, and a
  // key without a row reads its shared row (a shared key's old value) or its
  // initial value (not held: ignored).
  table->Pull(keys, n, /*train=*/false, old->data());
  RowChange change;
  change.table_id = table->id();
  change.dim = dim;
  for (size_t i = 0; i < n; ++i) {
    change.key = keys[i];
    change.shared = !deletions && IsSharedKey(*table, keys[i], t.num_partitions);
    change.before = (*held)[i] ? old->data() + i * dim : nullptr;
    if (deletions) {
      table->DeleteRow(keys[i]);
      change.after = nullptr;
    } else {
      std::memcpy(weights->data(), payloads + i * bytes, dim * sizeof(float));
      change.after = weights->data();
    }
    t.observer->Changed(change);
  }
  if (!deletions) table->RestoreRows(keys, payloads, n);
}

// ApplyRecords of keys that may repeat: one record at a time when they do,
// so the second sees the first.
void ApplyInOrder(const uint64_t* keys, size_t n, const char* payloads, const Target& t,
                  std::vector<uint8_t>* held, std::vector<float>* old,
                  std::vector<float>* weights) {
  if (n == 0) return;
  uint64_t dup;
  if (!t.table->FindDuplicateKey(keys, n, &dup)) {
    ApplyRecords(keys, n, payloads, t, held, old, weights);
    return;
  }
  const size_t bytes = t.table->row_stride() * sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    ApplyRecords(keys + i, 1, payloads == nullptr ? nullptr : payloads + i * bytes, t, held, old,
                 weights);
  }
}

}  // namespace

LocalModel::LocalModel() : scratch_(std::make_unique<Scratch>()) {}

LocalModel::~LocalModel() {
  MutexLock lock(&predict_mu_);
  trainer_.reset();  // Before the store it reads.
}

absl::StatusOr<std::unique_ptr<LocalModel>> LocalModel::Create(const JobConfig& config) {
  std::unique_ptr<LocalModel> m(new LocalModel());
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
  m->batch_ = std::make_unique<data::Batch>();
  return m;
}

uint64_t LocalModel::NumDenseChunks() const {
  MutexLock lock(&predict_mu_);
  const uint64_t chunk = config_.cluster().dense_chunk_size();
  return (trainer_->NumDenseParams() + chunk - 1) / chunk;
}

absl::StatusOr<std::string> LocalModel::Restore(const std::string& root, uint64_t clock) {
  ASSIGN_OR_RETURN(
      LoadedCheckpoint loaded,
      RestoreCheckpoint(config_, root, clock, NumDenseChunks(), params_->local_tables()));
  return std::move(loaded.dir);
}

absl::StatusOr<std::vector<LocalModel::Link>> LocalModel::ReadLinks(
    const checkpoint::ResolvedCheckpoint& next, size_t first, uint64_t* bytes_read) const {
  if (first > next.chain.size() || next.chain_dirs.size() != next.chain.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(next.dir, ": no links ", first, ".. in a chain of ", next.chain.size()));
  }
  // Every file of every link verified before a row is written.
  checkpoint::ResolvedCheckpoint links;
  links.dir = next.dir;
  links.manifest = next.manifest;
  links.chain.assign(next.chain.begin() + first, next.chain.end());
  links.chain_dirs.assign(next.chain_dirs.begin() + first, next.chain_dirs.end());
  const std::vector<bool> owned(config_.cluster().num_partitions(), true);
  ASSIGN_OR_RETURN(std::vector<LoadedFiles> files,
                   LoadOwnedChain(links, owned, TableSchemas(*params_->local_tables())));
  std::vector<Link> out;
  if (bytes_read != nullptr) *bytes_read = 0;
  for (LoadedFiles& link : files) {
    if (bytes_read != nullptr) *bytes_read += link.bytes;
    out.push_back(std::make_shared<const DeltaFiles>(DeltaFiles{std::move(link)}));
  }
  return out;
}

void LocalModel::Apply(const DeltaFiles& link, RowObserver* observer) {
  TableStore* store = params_->local_tables();
  const uint32_t num_partitions = config_.cluster().num_partitions();
  Scratch& s = *scratch_;
  for (const auto& file : link.files.files) {
    for (const checkpoint::BlockKind kind :
         {checkpoint::BlockKind::kDeletions, checkpoint::BlockKind::kRows}) {
      const bool deletions = kind == checkpoint::BlockKind::kDeletions;
      for (const checkpoint::RecordBlock& block : file->blocks()) {
        if (block.kind() != kind) continue;
        Table* table = store->FindTable(block.table_id());  // The reader checked the schemas.
        s.keys.resize(block.size());
        for (size_t i = 0; i < block.size(); ++i) s.keys[i] = block.key(i);
        const char* payloads = deletions ? nullptr : block.payloads().data();
        if (observer == nullptr) {
          if (deletions) {
            for (uint64_t key : s.keys) table->DeleteRow(key);
          } else {
            // A key twice in a block: RestoreRows writes them in order too.
            table->RestoreRows(s.keys.data(), payloads, s.keys.size());
          }
          continue;
        }
        ApplyInOrder(s.keys.data(), s.keys.size(), payloads, {table, num_partitions, observer},
                     &s.held, &s.old, &s.weights);
      }
    }
  }
}

void LocalModel::Apply(const VersionRows& rows, RowObserver* observer) {
  Table* table = params_->local_tables()->FindTable(rows.table_id());
  const uint32_t num_partitions = config_.cluster().num_partitions();
  Scratch& s = *scratch_;
  const uint64_t* deleted = rows.deleted().data();
  const size_t num_deleted = rows.deleted_size();
  const Target target{table, num_partitions, observer};
  if (observer == nullptr) {
    for (size_t i = 0; i < num_deleted; ++i) table->DeleteRow(deleted[i]);
  } else {
    ApplyInOrder(deleted, num_deleted, nullptr, target, &s.held, &s.old, &s.weights);
  }
  // The weights, then zero optimizer state, row by row.
  const size_t n = rows.keys_size();
  const size_t dim = table->dim();
  const size_t stride = table->row_stride();
  s.payloads.assign(n * stride, 0.0f);
  for (size_t i = 0; i < n; ++i) {
    std::memcpy(s.payloads.data() + i * stride, rows.weights().data() + i * dim * sizeof(float),
                dim * sizeof(float));
  }
  const char* bytes = reinterpret_cast<const char*>(s.payloads.data());
  if (observer == nullptr) {
    table->RestoreRows(rows.keys().data(), bytes, n);
  } else {
    ApplyInOrder(rows.keys().data(), n, bytes, target, &s.held, &s.old, &s.weights);
  }
}

void LocalModel::SetClock(uint64_t clock) { params_->local_tables()->SetClock(clock); }

absl::StatusOr<std::unique_ptr<LocalModel>> LocalModel::Copy() const {
  ASSIGN_OR_RETURN(std::unique_ptr<LocalModel> m, Create(config_));
  CopyRows(*params_->local_tables(), m->params_->local_tables());
  return m;
}

void LocalModel::ForEachRow(
    absl::FunctionRef<void(uint32_t table_id, uint64_t key, const float* weights, uint32_t dim)>
        visit) const {
  for (const Table* table : params_->local_tables()->tables()) {
    const uint32_t id = table->id();
    const uint32_t dim = table->dim();
    table->ForEachRow([&](uint64_t key, const float* payload) { visit(id, key, payload, dim); });
    table->ForEachSharedRow(std::nullopt, [&](uint32_t, uint64_t key, const float* payload) {
      visit(id, key, payload, dim);
    });
  }
}

uint32_t LocalModel::TableDim(uint32_t table_id) const {
  const Table* table = params_->local_tables()->FindTable(table_id);
  return table == nullptr ? 0 : table->dim();
}

absl::Status LocalModel::Predict(absl::Span<const absl::string_view> lines,
                                 std::vector<float>* probs) {
  probs->clear();
  if (lines.empty()) return absl::OkStatus();
  MutexLock lock(&predict_mu_);
  batch_->Reset(parser_->num_dense(), parser_->num_fields());
  for (size_t i = 0; i < lines.size(); ++i) {
    absl::Status st = parser_->Parse(lines[i], batch_.get());
    if (!st.ok()) {
      return absl::InvalidArgumentError(absl::StrCat("line ", i, ": ", st.message()));
    }
  }
  return trainer_->Predict(batch_.get(), probs);
}

absl::Status LocalModel::Lookup(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t* dim,
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

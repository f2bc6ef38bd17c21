#include "worker/export/served_model.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "common/partition.h"
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

// The table hash and row count of a model, kept up to date record by
// record: a sum, so a row leaves it by subtracting its RowHash and enters it
// by adding one (common/table_hash.h).
struct HashState {
  uint64_t hash = 0;
  uint64_t rows = 0;
};

// Whether `key` is the reserved key of a shared unadmitted row of `table`
// (Table::RestoreRow writes its partition's shared row, not a row).
bool IsSharedKey(const Table& table, uint64_t key, uint32_t num_partitions) {
  return table.has_shared_rows() &&
         table.SharedRowKey(PartitionOf(table.id(), key, num_partitions)) == key;
}

// Scratch of ApplyRecords, reused across blocks.
struct Scratch {
  std::vector<uint8_t> held;
  std::vector<float> old;
  std::vector<float> payload;
};

// Records `keys[0, n)` (unique) onto `table`: deletions when `payloads` is
// null, else rows of row_stride() floats each from `payloads` (unaligned
// bytes; the weights lead). What the table held for each key leaves
// `state`, what is written enters it. A shared row always exists (a write
// replaces it; the row count keeps it); a deletion drops a row only (a
// shared key has none after a restore). The rows are written in one
// Table::RestoreRows.
void ApplyRecords(const uint64_t* keys, size_t n, const char* payloads, uint32_t num_partitions,
                  Table* table, Scratch* s, HashState* state) {
  const uint32_t id = table->id();
  const size_t dim = table->dim();
  const size_t bytes = table->row_stride() * sizeof(float);
  const bool deletions = payloads == nullptr;
  s->held.resize(n);
  s->old.resize(n * dim);
  s->payload.resize(dim);
  for (size_t i = 0; i < n; ++i) {
    s->held[i] =
        table->Contains(keys[i]) || (!deletions && IsSharedKey(*table, keys[i], num_partitions));
  }
  // The old weights, in one batch: an evaluation pull changes nothing, and a
  // key without a row reads its shared row (a shared key's old value) or its
  // initial value (not held: ignored).
  table->Pull(keys, n, /*train=*/false, s->old.data());
  for (size_t i = 0; i < n; ++i) {
    const uint64_t key = keys[i];
    const bool shared = !deletions && IsSharedKey(*table, key, num_partitions);
    if (s->held[i]) {
      state->hash -= RowHash(id, key, s->old.data() + i * dim, dim);
      if (!shared) --state->rows;
    }
    if (deletions) {
      table->DeleteRow(key);
      continue;
    }
    std::memcpy(s->payload.data(), payloads + i * bytes, dim * sizeof(float));
    state->hash += RowHash(id, key, s->payload.data(), dim);
    if (!shared) ++state->rows;
  }
  if (!deletions) table->RestoreRows(keys, payloads, n);
}

// ApplyRecords of keys that may repeat: one record at a time when they do,
// so the second sees the first.
void ApplyRecordsInOrder(const uint64_t* keys, size_t n, const char* payloads,
                         uint32_t num_partitions, Table* table, Scratch* s, HashState* state) {
  uint64_t dup;
  if (!table->FindDuplicateKey(keys, n, &dup)) {
    ApplyRecords(keys, n, payloads, num_partitions, table, s, state);
    return;
  }
  const size_t bytes = table->row_stride() * sizeof(float);
  for (size_t i = 0; i < n; ++i) {
    ApplyRecords(keys + i, 1, payloads == nullptr ? nullptr : payloads + i * bytes, num_partitions,
                 table, s, state);
  }
}

// One verified link on top of what `store` holds: per file, its deletions,
// then its rows, as ApplyChain applies each link after the first
// (server/snapshot.cc), but without clearing the store first; `state`
// follows each record (null: nothing read, only written).
void ApplyLink(const LoadedFiles& files, uint32_t num_partitions, TableStore* store,
               HashState* state) {
  Scratch scratch;
  std::vector<uint64_t> keys;
  for (const auto& file : files.files) {
    // Admission counts are the trainer's: a model serves its rows only.
    for (const checkpoint::BlockKind kind :
         {checkpoint::BlockKind::kDeletions, checkpoint::BlockKind::kRows}) {
      const bool deletions = kind == checkpoint::BlockKind::kDeletions;
      for (const checkpoint::RecordBlock& block : file->blocks()) {
        if (block.kind() != kind) continue;
        Table* table = store->FindTable(block.table_id());  // The reader checked the schemas.
        keys.resize(block.size());
        for (size_t i = 0; i < block.size(); ++i) keys[i] = block.key(i);
        if (state == nullptr) {
          if (deletions) {
            for (uint64_t key : keys) table->DeleteRow(key);
          } else {
            // A key twice in a block: RestoreRows writes them in order too.
            table->RestoreRows(keys.data(), block.payloads().data(), keys.size());
          }
          continue;
        }
        ApplyRecordsInOrder(keys.data(), keys.size(), deletions ? nullptr : block.payloads().data(),
                            num_partitions, table, &scratch, state);
      }
    }
  }
}

// One stream version on top of what `store` holds: per part and table, its
// deletions, then its rows (the weights, the optimizer state zero: a model
// serves weights only); `state` follows each record (null: nothing read).
// The parts hold disjoint partitions, so their order does not matter.
void ApplyStreamVersion(const ServedModel::StreamVersion& version, uint32_t num_partitions,
                        TableStore* store, HashState* state) {
  Scratch scratch;
  std::vector<float> payloads;
  for (const auto& part : version.parts) {
    for (const VersionRows& rows : part->tables()) {
      Table* table = store->FindTable(rows.table_id());  // CheckStreamPart checked it.
      const uint64_t* deleted = rows.deleted().data();
      const size_t num_deleted = rows.deleted_size();
      if (state == nullptr) {
        for (size_t i = 0; i < num_deleted; ++i) table->DeleteRow(deleted[i]);
      } else {
        ApplyRecordsInOrder(deleted, num_deleted, nullptr, num_partitions, table, &scratch, state);
      }
      const size_t n = rows.keys_size();
      const size_t dim = table->dim();
      const size_t stride = table->row_stride();
      payloads.assign(n * stride, 0.0f);
      for (size_t i = 0; i < n; ++i) {
        std::memcpy(payloads.data() + i * stride, rows.weights().data() + i * dim * sizeof(float),
                    dim * sizeof(float));
      }
      const char* bytes = reinterpret_cast<const char*>(payloads.data());
      if (state == nullptr) {
        table->RestoreRows(rows.keys().data(), bytes, n);
      } else {
        ApplyRecordsInOrder(rows.keys().data(), n, bytes, num_partitions, table, &scratch, state);
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
  m->Index();
  return m;
}

absl::StatusOr<std::vector<ServedModel::Link>> ServedModel::ReadDeltas(
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
    out.push_back(std::make_shared<const LoadedFiles>(std::move(link)));
  }
  return out;
}

absl::Status ServedModel::Advance(const checkpoint::ResolvedCheckpoint& next,
                                  absl::Span<const Link> links) {
  const size_t n = next.chain.size();
  if (links.empty() || links.size() >= n || next.chain[n - links.size() - 1].clock() != clock_) {
    return absl::InvalidArgumentError(
        absl::StrCat(next.dir, ": ", links.size(), " links do not continue version ", clock_));
  }
  TableStore* store = params_->local_tables();
  HashState state{table_hash_, rows_};
  for (const Link& link : links) {
    ApplyLink(*link, config_.cluster().num_partitions(), store, &state);
  }
  store->SetClock(next.manifest.clock());
  clock_ = next.manifest.clock();
  dir_ = next.dir;
  table_hash_ = state.hash;
  rows_ = state.rows;
  return CheckRunningHash(next.dir);
}

absl::Status ServedModel::CatchUp(absl::Span<const Link> catch_up, const ServedModel& to,
                                  const checkpoint::ResolvedCheckpoint& next,
                                  absl::Span<const Link> links) {
  const size_t n = next.chain.size();
  const size_t behind = catch_up.size() + links.size();
  if (links.empty() || behind >= n || next.chain[n - links.size() - 1].clock() != to.clock_ ||
      next.chain[n - behind - 1].clock() != clock_) {
    return absl::InvalidArgumentError(absl::StrCat(next.dir, ": ", catch_up.size(), " + ",
                                                   links.size(), " links do not lead from version ",
                                                   clock_, " through version ", to.clock_));
  }
  TableStore* store = params_->local_tables();
  for (const Link& link : catch_up) {
    ApplyLink(*link, config_.cluster().num_partitions(), store, nullptr);
  }
  // The tables now equal `to`'s (the same chain): so do hash and rows.
  TakeVersionOf(to);
  return Advance(next, links);
}

void ServedModel::TakeVersionOf(const ServedModel& to) {
  clock_ = to.clock_;
  dir_ = to.dir_;
  table_hash_ = to.table_hash_;
  rows_ = to.rows_;
}

absl::Status ServedModel::CheckRunningHash(absl::string_view what) {
#ifndef NDEBUG
  // Debug builds (tests) check the running sum against a walk of every row.
  const uint64_t hash = table_hash_, rows = rows_;
  Index();
  if (hash != table_hash_ || rows != rows_) {
    return absl::InternalError(absl::StrCat(what, ": incremental table hash ", hash, " (", rows,
                                            " rows) differs from the walk's ", table_hash_, " (",
                                            rows_, " rows)"));
  }
#endif
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Copy() const {
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Empty(config_));
  TableStore* store = m->params_->local_tables();
  CopyRows(*params_->local_tables(), store);
  store->SetClock(clock_);
  m->clock_ = clock_;
  m->dir_ = dir_;
  m->table_hash_ = table_hash_;
  m->rows_ = rows_;
  return m;
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::WithDeltas(
    const checkpoint::ResolvedCheckpoint& next, size_t first, uint64_t* bytes_read) const {
  ASSIGN_OR_RETURN(const std::vector<Link> links, ReadDeltas(next, first, bytes_read));
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Copy());
  RETURN_IF_ERROR(m->Advance(next, links));
  return m;
}

absl::Status ServedModel::CheckStreamPart(const VersionPart& part) const {
  const uint32_t parts = config_.cluster().num_partitions();
  const auto where = [&] {
    return absl::StrCat("version part of clock ", part.clock(), " from server ",
                        part.server_index());
  };
  if (part.num_partitions() != parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": ", part.num_partitions(), " partitions, this job has ", parts));
  }
  std::vector<bool> holds(parts, false);
  for (uint32_t p : part.partitions()) {
    if (p >= parts || holds[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": partition ", p, " out of range or named twice"));
    }
    holds[p] = true;
  }
  if (part.push_ages_micros_size() > kMaxPushAges ||
      (part.chunk() != 0 && part.push_ages_micros_size() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": ", part.push_ages_micros_size(),
                                                   " push ages in chunk ", part.chunk(),
                                                   " (at most ", kMaxPushAges, ", in chunk 0)"));
  }
  for (const VersionRows& rows : part.tables()) {
    const Table* table = params_->local_tables()->FindTable(rows.table_id());
    if (table == nullptr || rows.dim() != table->dim()) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": table ", rows.table_id(),
                                                     " of dim ", rows.dim(),
                                                     " is not a table of this job"));
    }
    if (rows.weights().size() != static_cast<size_t>(rows.keys_size()) * rows.dim() * 4) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": table ", rows.table_id(), " has ",
                                                     rows.keys_size(), " keys and ",
                                                     rows.weights().size(), " bytes of weights"));
    }
    for (const auto* keys : {&rows.keys(), &rows.deleted()}) {
      for (uint64_t key : *keys) {
        if (!holds[PartitionOf(rows.table_id(), key, parts)]) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": table ", rows.table_id(), " key ", key,
                           " is in a partition the part does not hold"));
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::FromStream(const JobConfig& config,
                                                                     const StreamVersion& full) {
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Empty(config));
  TableStore* store = m->params_->local_tables();
  ApplyStreamVersion(full, config.cluster().num_partitions(), store, nullptr);
  store->SetClock(full.clock);
  m->clock_ = full.clock;
  m->Index();
  return m;
}

absl::Status ServedModel::AdvanceStream(absl::Span<const StreamLink> links) {
  if (links.empty()) return absl::InvalidArgumentError("no stream version to apply");
  TableStore* store = params_->local_tables();
  HashState state{table_hash_, rows_};
  for (const StreamLink& link : links) {
    ApplyStreamVersion(*link, config_.cluster().num_partitions(), store, &state);
  }
  clock_ = links.back()->clock;
  store->SetClock(clock_);
  dir_.clear();
  table_hash_ = state.hash;
  rows_ = state.rows;
  return CheckRunningHash(absl::StrCat("stream version ", clock_));
}

absl::Status ServedModel::CatchUpStream(absl::Span<const StreamLink> catch_up,
                                        const ServedModel& to, absl::Span<const StreamLink> links) {
  if (catch_up.empty() || catch_up.back()->clock != to.clock_) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream versions from ", clock_, " do not lead to version ", to.clock_));
  }
  TableStore* store = params_->local_tables();
  for (const StreamLink& link : catch_up) {
    ApplyStreamVersion(*link, config_.cluster().num_partitions(), store, nullptr);
  }
  // The tables now equal `to`'s: so do hash and rows.
  TakeVersionOf(to);
  return AdvanceStream(links);
}

ServedModel::~ServedModel() {
  MutexLock lock(&predict_mu_);
  trainer_.reset();  // Before the store it reads.
}

void ServedModel::Index() {
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

#include "server/table_store.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/status_macros.h"
#include "server/request_limits.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<TableStore>> TableStore::Create(const JobConfig& config) {
  std::map<uint32_t, std::unique_ptr<Table>> tables;
  for (const TableConfig& given : config.tables()) {
    ASSIGN_OR_RETURN(const TableConfig t, ResolveLimits(config, given));
    ASSIGN_OR_RETURN(std::unique_ptr<Table> table,
                     Table::Create(t, config.cluster().dense_chunk_size(), &HelperPool::Shared(),
                                   config.cluster().num_partitions()));
    if (!tables.emplace(t.id(), std::move(table)).second) {
      return absl::InvalidArgumentError(absl::StrCat("table id ", t.id(), " appears twice"));
    }
  }
  return std::unique_ptr<TableStore>(new TableStore(std::move(tables)));
}

TableStore::TableStore(std::map<uint32_t, std::unique_ptr<Table>> tables)
    : tables_(std::move(tables)) {}

Table* TableStore::FindTable(uint32_t table_id) const {
  auto it = tables_.find(table_id);
  return it == tables_.end() ? nullptr : it->second.get();
}

std::vector<Table*> TableStore::tables() const {
  std::vector<Table*> out;
  for (const auto& [id, table] : tables_) out.push_back(table.get());
  return out;
}

absl::StatusOr<Table*> TableStore::GetTable(uint32_t table_id) const {
  Table* table = FindTable(table_id);
  if (table == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown table id ", table_id));
  }
  return table;
}

absl::Status TableStore::CheckDenseKeys(const Table& table, const uint64_t* keys, size_t n) {
  if (!table.dense() || table.num_chunks() == 0) return absl::OkStatus();
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] >= table.num_chunks()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table ", table.config().name(), ": chunk index ", keys[i],
                       " out of range (the dense table has ", table.num_chunks(), " chunks)"));
    }
  }
  return absl::OkStatus();
}

absl::Status TableStore::Pull(uint32_t table_id, const uint64_t* keys, size_t n, bool train,
                              float* out) {
  return PullEncoded(table_id, keys, n, train, Encoding::kFp32, reinterpret_cast<char*>(out));
}

absl::Status TableStore::PullEncoded(uint32_t table_id, const uint64_t* keys, size_t n, bool train,
                                     Encoding encoding, char* out) {
  ASSIGN_OR_RETURN(Table * table, GetTable(table_id));
  RETURN_IF_ERROR(CheckDenseKeys(*table, keys, n));
  table->PullEncoded(keys, n, train, encoding, out);
  return absl::OkStatus();
}

absl::Status TableStore::CheckStatePull(const Table& table, bool train, Encoding encoding) {
  if (!train || encoding != Encoding::kFp32) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", table.config().name(), ": a pull with_state must be a TRAIN pull in FP32"));
  }
  if (table.has_admission()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", table.config().name(),
        " has admission: its rows cannot be pulled with_state (a pending key has none)"));
  }
  return absl::OkStatus();
}

absl::Status CheckLrScale(float lr_scale) {
  if (std::isfinite(lr_scale) && lr_scale >= 0 && lr_scale <= kMaxLrScale) {
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat("lr_scale ", lr_scale, " is outside [0, ", kMaxLrScale, "]"));
}

absl::Status TableStore::CheckKeyCount(const Table& table, size_t n, const char* what) {
  const uint64_t limit = table.config().max_keys_per_request();
  if (table.dense() || limit == 0 || n <= limit) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("table ", table.config().name(), ": ", what, " carries ", n,
                   " keys, more than max_keys_per_request ", limit,
                   " (training.batch_size x the fields feeding the table, unless set)"));
}

absl::Status TableStore::ValidatePushKeys(const Table& table, const uint64_t* keys,
                                          size_t n) const {
  RETURN_IF_ERROR(CheckKeyCount(table, n, "a push"));
  RETURN_IF_ERROR(CheckDenseKeys(table, keys, n));
  uint64_t dup;
  if (table.FindDuplicateKey(keys, n, &dup)) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", table.config().name(), ": duplicate key ", dup,
                     " in one push (push one summed gradient per unique key)"));
  }
  return absl::OkStatus();
}

absl::Status TableStore::ValidateGradients(const Table& table, const uint64_t* keys, size_t n,
                                           const float* grads) const {
  if (table.config().non_finite() != REJECT) return absl::OkStatus();
  const size_t dim = table.dim();
  const size_t i = FirstBeyond(grads, n * dim, table.max_gradient_bits());
  if (i < n * dim) {
    return absl::InvalidArgumentError(absl::StrCat(
        "table ", table.config().name(), ": gradient ", grads[i], " for key ", keys[i / dim],
        " (element ", i % dim, ") is non-finite or beyond max_gradient_abs ",
        table.config().max_gradient_abs(), "; the table's policy is REJECT"));
  }
  return absl::OkStatus();
}

absl::Status TableStore::ValidatePush(const Table& table, const uint64_t* keys, size_t n,
                                      const float* grads) const {
  RETURN_IF_ERROR(ValidatePushKeys(table, keys, n));
  return ValidateGradients(table, keys, n, grads);
}

absl::StatusOr<PushCounts> TableStore::Push(uint32_t table_id, const uint64_t* keys, size_t n,
                                            const float* grads, float lr_scale) {
  ASSIGN_OR_RETURN(Table * table, GetTable(table_id));
  RETURN_IF_ERROR(CheckLrScale(lr_scale));
  RETURN_IF_ERROR(ValidatePush(*table, keys, n, grads));
  return table->Push(keys, n, grads, lr_scale);
}

absl::StatusOr<uint64_t> TableStore::InitRows(uint32_t table_id, const uint64_t* keys, size_t n,
                                              const float* values) {
  ASSIGN_OR_RETURN(Table * table, GetTable(table_id));
  RETURN_IF_ERROR(CheckKeyCount(*table, n, "an InitRows"));
  RETURN_IF_ERROR(CheckDenseKeys(*table, keys, n));
  const size_t bad = FirstNonFinite(values, n * table->dim());
  if (bad < n * table->dim()) {
    return absl::InvalidArgumentError(absl::StrCat("table ", table->config().name(),
                                                   ": InitRows value for key ",
                                                   keys[bad / table->dim()], " is not finite"));
  }
  return table->InitRows(keys, n, values);
}

void TableStore::SetClock(uint64_t clock) {
  for (auto& [id, table] : tables_) table->SetClock(clock);
}

void TableStore::ResetClock(uint64_t clock) {
  for (auto& [id, table] : tables_) table->ResetClock(clock);
}

uint64_t TableStore::Evict(uint64_t now_clock, int64_t now_seconds,
                           const std::vector<bool>& owned) {
  uint64_t dropped = 0;
  for (auto& [id, table] : tables_) dropped += table->Evict(now_clock, now_seconds, owned);
  return dropped;
}

uint32_t TableStore::AdvanceGeneration() {
  uint32_t ended = 0;
  for (auto& [id, table] : tables_) ended = table->AdvanceGeneration();
  return ended;
}

void TableStore::TrimDeletions(uint32_t upto) {
  for (auto& [id, table] : tables_) table->TrimDeletions(upto);
}

}  // namespace shardps

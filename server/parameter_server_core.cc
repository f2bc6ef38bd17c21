#include "server/parameter_server_core.h"

#include <algorithm>
#include <cstring>
#include <optional>
#include <thread>
#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/codec.h"
#include "common/generation.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/snapshot.h"

namespace shardps {

namespace {

absl::StatusOr<Encoding> ToEncoding(ValueEncoding e) {
  switch (e) {
    case FP32:
      return Encoding::kFp32;
    case FP16:
      return Encoding::kFp16;
    case BF16:
      return Encoding::kBf16;
    default:
      return absl::InvalidArgumentError(
          absl::StrCat("unknown value encoding ", static_cast<int>(e)));
  }
}

// Checks that `bytes` holds n rows of `dim` values in `encoding`.
absl::Status CheckValueBytes(const Table& table, size_t n, size_t bytes, Encoding encoding,
                             const char* what) {
  const size_t bpv = BytesPerValue(encoding);
  const size_t dim = table.dim();
  const std::string& name = table.config().name();
  if (bytes % bpv != 0) {
    return absl::InvalidArgumentError(absl::StrCat("table ", name, ": ", what, " has ", bytes,
                                                   " bytes, not a multiple of ", bpv,
                                                   " bytes per value"));
  }
  const size_t values = bytes / bpv;
  if (values % dim != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", name, ": wrong dim: ", what, " holds ", values,
                     " values, not a multiple of the table's dim ", dim));
  }
  if (values / dim != n) {
    return absl::InvalidArgumentError(absl::StrCat("table ", name, ": key count mismatch: ", n,
                                                   " keys but ", what, " for ", values / dim,
                                                   " rows of dim ", dim));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServerCore>> ParameterServerCore::Create(
    const CoreOptions& options) {
  const ClusterConfig& cluster = options.config.cluster();
  PartitionMap map = options.map;
  if (map.num_partitions() == 0) {
    ASSIGN_OR_RETURN(map,
                     PartitionMap::Contiguous(1, cluster.num_partitions(), cluster.num_servers()));
  }
  if (map.num_partitions() != cluster.num_partitions()) {
    return absl::InvalidArgumentError(absl::StrCat("partition map has ", map.num_partitions(),
                                                   " partitions, the config ",
                                                   cluster.num_partitions()));
  }
  // A server in [num_servers, max_servers) is a spare (resharding): it
  // starts owning nothing.
  const uint32_t slots = std::max(map.num_servers(), cluster.max_servers());
  if (options.server_index >= slots) {
    return absl::InvalidArgumentError(
        absl::StrCat("server index ", options.server_index, " is not below the number of servers ",
                     map.num_servers(), " (max_servers ", cluster.max_servers(), ")"));
  }
  ASSIGN_OR_RETURN(std::unique_ptr<TableStore> store, TableStore::Create(options.config));
  return std::unique_ptr<ParameterServerCore>(
      new ParameterServerCore(options, std::move(store), std::move(map)));
}

ParameterServerCore::ParameterServerCore(const CoreOptions& options,
                                         std::unique_ptr<TableStore> store, PartitionMap map)
    : config_(options.config),
      server_index_(options.server_index),
      bsp_(options.config.cluster().mode() == BSP),
      checkpoint_write_delay_(options.checkpoint_write_delay),
      testing_stalls_(options.testing_stalls),
      store_(std::move(store)),
      map_(std::make_shared<const PartitionMap>(std::move(map))),
      bsp_clocks_(options.server_index, options.config.cluster().num_workers(), store_.get(),
                  [this](uint64_t applied) {
                    max_clock_.store(applied, std::memory_order_relaxed);
                    store_->SetClock(applied);
                    StampApply();
                  }) {
  MutexLock lock(&checkpoint_mu_);
  checkpoint_root_ = config_.checkpoint().dir();
}

ParameterServerCore::~ParameterServerCore() {
  Shutdown();
  MutexLock lock(&checkpoint_mu_);
  DropCheckpointWrite();
}

std::shared_ptr<const PartitionMap> ParameterServerCore::CurrentMap() const {
  MutexLock lock(&map_mu_);
  return map_;
}

uint64_t ParameterServerCore::map_version() const { return CurrentMap()->version(); }

uint64_t ParameterServerCore::applied_clock() const { return bsp_clocks_.applied_clock(); }

bool ParameterServerCore::PullMayWait(const PullRequest& request) const {
  return bsp_ && request.clock() > 0 && applied_clock() < request.clock();
}

absl::Status ParameterServerCore::CheckMapVersion(uint64_t version, const PartitionMap& map) const {
  if (version == map.version()) return absl::OkStatus();
  return absl::AbortedError(absl::StrCat("stale partition map: the request has map version ",
                                         version, ", server ", server_index_, " has map version ",
                                         map.version()));
}

absl::Status ParameterServerCore::CheckOwnership(uint64_t version, uint32_t table_id,
                                                 const uint64_t* keys, size_t n,
                                                 const PartitionMap& map) const {
  RETURN_IF_ERROR(CheckMapVersion(version, map));
  const uint32_t parts = map.num_partitions();
  for (size_t i = 0; i < n; ++i) {
    const uint32_t p = PartitionOf(table_id, keys[i], parts);
    if (map.OwnerOfPartition(p) != server_index_) {
      return absl::AbortedError(absl::StrCat("key ", keys[i], " of table ", table_id,
                                             " is in partition ", p, ", owned by server ",
                                             map.OwnerOfPartition(p), ", not server ",
                                             server_index_, " (map version ", map.version(), ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::CheckJobGeneration(uint64_t generation) const {
  const uint64_t current = generation_.load(std::memory_order_acquire);
  if (generation == current) return absl::OkStatus();
  return CheckGeneration(absl::StrCat("server ", server_index_), generation, current);
}

namespace {

// Values a pulled row of `tk` has: the weights, and the state if asked.
uint32_t PulledWidth(const TableKeys& tk, const Table& table) {
  return table.dim() + (tk.with_state() ? static_cast<uint32_t>(table.state_size()) : 0);
}

}  // namespace

absl::Status ParameterServerCore::Pull(const PullRequest& request, absl::Time deadline,
                                       PullSink* sink) {
  ASSIGN_OR_RETURN(const Encoding encoding, ToEncoding(request.encoding()));
  uint64_t bytes = 0;
  for (const TableKeys& tk : request.tables()) {
    const Table* table = store_->FindTable(tk.table_id());
    if (table == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown table id ", tk.table_id()));
    }
    RETURN_IF_ERROR(TableStore::CheckDenseKeys(*table, tk.keys().data(), tk.keys_size()));
    if (request.purpose() == TRAIN) {  // It creates rows.
      RETURN_IF_ERROR(TableStore::CheckKeyCount(*table, tk.keys_size(), "a training pull"));
    }
    if (tk.with_state()) {
      RETURN_IF_ERROR(TableStore::CheckStatePull(*table, request.purpose() == TRAIN, encoding));
    }
    bytes += uint64_t(tk.keys_size()) * PulledWidth(tk, *table) * BytesPerValue(encoding);
  }
  if (bytes > config_.cluster().max_message_bytes()) {
    return absl::ResourceExhaustedError(absl::StrCat("pull response would hold ", bytes,
                                                     " value bytes, more than "
                                                     "max_message_bytes ",
                                                     config_.cluster().max_message_bytes(),
                                                     ": split the pull"));
  }
  if (!PullPurpose_IsValid(request.purpose())) {
    return absl::InvalidArgumentError(
        absl::StrCat("unknown pull purpose ", static_cast<int>(request.purpose())));
  }
  if (bsp_ && request.clock() > 0) {
    // A stale client learns it now rather than after the wait.
    RETURN_IF_ERROR(CheckMapVersion(request.map_version(), *CurrentMap()));
    RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
    RETURN_IF_ERROR(bsp_clocks_.WaitForClock(
        request.clock(), request.generation(),
        std::min(deadline,
                 absl::Now() + absl::Milliseconds(config_.cluster().server_deadline_ms()))));
  }
  if (bsp_ && request.refuse_applied_clock() && request.purpose() == TRAIN) {
    const uint64_t applied = applied_clock();
    if (applied > request.clock()) {
      return absl::AlreadyExistsError(
          absl::StrCat("server ", server_index_, " has applied clock ", request.clock(),
                       " (clocks < ", applied, "), with rank ", request.worker_rank(),
                       "'s push of it: its values are of a later clock"));
    }
  }
  ReaderMutexLock state(&state_mu_);
  RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
  const std::shared_ptr<const PartitionMap> map = CurrentMap();
  for (const TableKeys& tk : request.tables()) {
    RETURN_IF_ERROR(CheckOwnership(request.map_version(), tk.table_id(), tk.keys().data(),
                                   tk.keys_size(), *map));
  }
  const bool train = request.purpose() == TRAIN;
  for (const TableKeys& tk : request.tables()) {
    Table* table = store_->FindTable(tk.table_id());
    const size_t n = tk.keys_size();
    const uint32_t width = PulledWidth(tk, *table);
    char* room = sink->AddTable(tk.table_id(), width, n * width * BytesPerValue(encoding));
    if (tk.with_state()) {
      table->PullWithState(tk.keys().data(), n, reinterpret_cast<float*>(room));
    } else {
      RETURN_IF_ERROR(
          store_->PullEncoded(tk.table_id(), tk.keys().data(), n, train, encoding, room));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Pull(const PullRequest& request, absl::Time deadline,
                                       PullResponse* response) {
  // Room in the response's bytes fields.
  class ResponseSink final : public PullSink {
   public:
    explicit ResponseSink(PullResponse* response) : response_(response) {}
    char* AddTable(uint32_t table_id, uint32_t dim, size_t bytes) override {
      TableValues* out = response_->add_tables();
      out->set_table_id(table_id);
      out->set_dim(dim);
      out->mutable_values()->resize(bytes);
      return bytes == 0 ? nullptr : &(*out->mutable_values())[0];
    }

   private:
    PullResponse* const response_;
  };
  ResponseSink sink(response);
  return Pull(request, deadline, &sink);
}

absl::Status ParameterServerCore::CheckPushShape(const PushRequest& request,
                                                 std::vector<DecodedTable>* tables) const {
  ASSIGN_OR_RETURN(const Encoding encoding, ToEncoding(request.encoding()));
  tables->resize(request.tables_size());
  for (int t = 0; t < request.tables_size(); ++t) {
    const TableGradients& tg = request.tables(t);
    DecodedTable& d = (*tables)[t];
    d.grads = nullptr;  // Until decoded (the vector may be reused).
    d.table = store_->FindTable(tg.table_id());
    if (d.table == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("unknown table id ", tg.table_id()));
    }
    for (int u = 0; u < t; ++u) {
      if (request.tables(u).table_id() == tg.table_id()) {
        return absl::InvalidArgumentError(
            absl::StrCat("table id ", tg.table_id(), " appears twice in one push"));
      }
    }
    d.keys = tg.keys().data();
    d.n = tg.keys_size();
    RETURN_IF_ERROR(TableStore::CheckKeyCount(*d.table, d.n, "a push"));
    if (!tg.has_sparse()) {
      RETURN_IF_ERROR(CheckValueBytes(*d.table, d.n, tg.gradients().size(), encoding, "gradients"));
      continue;
    }
    if (!tg.gradients().empty()) {
      return absl::InvalidArgumentError(absl::StrCat("table ", d.table->config().name(),
                                                     ": a push has both gradients and sparse"));
    }
    // Never more than the full form could have carried in one message.
    const uint64_t cap = config_.cluster().max_message_bytes() > 0
                             ? config_.cluster().max_message_bytes()
                             : uint64_t{64} << 20;
    const uint64_t expanded = uint64_t{d.n} * d.table->dim() * sizeof(float);
    if (expanded > cap) {
      return absl::InvalidArgumentError(absl::StrCat(
          "table ", d.table->config().name(), ": a sparse push of ", d.n, " rows would expand to ",
          expanded, " bytes, over cluster.max_message_bytes ", cap));
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::DecodeGradients(const PushRequest& request,
                                                  std::vector<DecodedTable>* tables) const {
  ASSIGN_OR_RETURN(const Encoding encoding, ToEncoding(request.encoding()));
  for (int t = 0; t < request.tables_size(); ++t) {
    const TableGradients& tg = request.tables(t);
    DecodedTable& d = (*tables)[t];
    if (tg.has_sparse()) {  // A compressed gradient: expanded, then as any.
      d.storage.resize(d.n * d.table->dim());
      const absl::Status st =
          ExpandNonZeros(tg.sparse().index_gaps().data(), tg.sparse().index_gaps_size(),
                         tg.sparse().values(), encoding, d.storage.size(), d.storage.data());
      if (!st.ok()) {
        return absl::InvalidArgumentError(
            absl::StrCat("table ", d.table->config().name(), ": ", st.message()));
      }
      if (d.n > 0) d.grads = d.storage.data();
      continue;
    }
    const char* bytes = tg.gradients().data();
    if (d.n == 0) continue;  // An empty push (legal, closes a BSP clock).
    if (encoding == Encoding::kFp32 && reinterpret_cast<uintptr_t>(bytes) % alignof(float) == 0) {
      d.grads = reinterpret_cast<const float*>(bytes);  // No copy.
    } else {
      d.storage.resize(d.n * d.table->dim());
      RETURN_IF_ERROR(DecodeValues(tg.gradients(), encoding, d.storage.size(), d.storage.data()));
      d.grads = d.storage.data();
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Push(const PushRequest& request, PushResponse* response) {
  const float lr_scale = request.has_lr_scale() ? request.lr_scale() : 1.0f;
  RETURN_IF_ERROR(CheckLrScale(lr_scale));
  if (request.worker_rank() >= config_.cluster().num_workers()) {
    return absl::InvalidArgumentError(absl::StrCat("push from worker rank ", request.worker_rank(),
                                                   ": the job has ",
                                                   config_.cluster().num_workers(), " workers"));
  }
  // Per thread, so that a bf16 push decodes into warm, already sized
  // storage (a fresh vector was an allocation and a zero fill per push).
  thread_local std::vector<DecodedTable> tables;
  // Every check that needs no gradient value runs before any is decoded or
  // expanded: a refused push costs no allocation.
  RETURN_IF_ERROR(CheckPushShape(request, &tables));
  ReaderMutexLock state(&state_mu_);
  RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
  const std::shared_ptr<const PartitionMap> map = CurrentMap();
  RETURN_IF_ERROR(CheckMapVersion(request.map_version(), *map));
  for (const DecodedTable& d : tables) {
    RETURN_IF_ERROR(CheckOwnership(request.map_version(), d.table->id(), d.keys, d.n, *map));
    RETURN_IF_ERROR(store_->ValidatePushKeys(*d.table, d.keys, d.n));
  }
  RETURN_IF_ERROR(DecodeGradients(request, &tables));
  for (const DecodedTable& d : tables) {
    RETURN_IF_ERROR(store_->ValidateGradients(*d.table, d.keys, d.n, d.grads));
  }
  if (bsp_) return BufferBspPush(request, lr_scale, tables, response);
  // The clock rows are stamped with follows the pushes' clocks, at most
  // kMaxClockStep a push. Eviction compares it with the scheduler's
  // granted clock as well (Evict), so claims cannot age rows early.
  uint64_t seen = max_clock_.load(std::memory_order_relaxed);
  uint64_t next = seen;
  do {
    next = seen + std::min<uint64_t>(kMaxClockStep, UINT64_MAX - seen);
    next = std::min(next, request.clock());
  } while (next > seen && !max_clock_.compare_exchange_weak(seen, next));
  store_->SetClock(std::min(request.clock(), std::max(seen, next)));
  for (const DecodedTable& d : tables) {
    const PushCounts c = d.table->Push(d.keys, d.n, d.grads, lr_scale);
    response->set_rows_applied(response->rows_applied() + c.applied);
    response->set_rows_skipped_nonfinite(response->rows_skipped_nonfinite() + c.skipped_nonfinite);
  }
  StampApply();
  return absl::OkStatus();
}

absl::Status ParameterServerCore::InitRows(const InitRowsRequest& request,
                                           InitRowsResponse* response) {
  Table* table = store_->FindTable(request.table_id());
  if (table == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("unknown table id ", request.table_id()));
  }
  const size_t n = request.keys_size();
  RETURN_IF_ERROR(TableStore::CheckKeyCount(*table, n, "an InitRows"));
  RETURN_IF_ERROR(TableStore::CheckDenseKeys(*table, request.keys().data(), n));
  RETURN_IF_ERROR(CheckValueBytes(*table, n, request.values().size(), Encoding::kFp32, "values"));
  RETURN_IF_ERROR(CheckOwnership(request.map_version(), request.table_id(), request.keys().data(),
                                 n, *CurrentMap()));
  if (n == 0) return absl::OkStatus();
  std::vector<float> values(n * table->dim());
  RETURN_IF_ERROR(DecodeValues(request.values(), Encoding::kFp32, values.size(), values.data()));
  ReaderMutexLock state(&state_mu_);
  ASSIGN_OR_RETURN(const uint64_t written,
                   store_->InitRows(request.table_id(), request.keys().data(), n, values.data()));
  response->set_rows_written(written);
  return absl::OkStatus();
}

absl::Status ParameterServerCore::TableInfo(const TableInfoRequest& request,
                                            TableInfoResponse* response) {
  response->set_server_index(server_index_);
  response->set_map_version(map_version());
  response->set_applied_clock(applied_clock());
  response->set_generation(generation());
  for (Table* table : store_->tables()) {
    const TableCounters c = table->Counters();
    TableStats* s = response->add_tables();
    s->set_table_id(table->id());
    s->set_name(table->config().name());
    s->set_dim(table->dim());
    s->set_live_rows(c.live_rows);
    s->set_pending_rows(c.pending_rows);
    s->set_admitted_rows(c.admitted_rows);
    s->set_evicted_rows(c.evicted_rows);
    s->set_bytes(c.bytes);
    s->set_bytes_per_row(c.bytes_per_row);
    s->set_rows_skipped_nonfinite(c.rows_skipped_nonfinite);
    s->set_pulls(c.pulls);
    s->set_pushes(c.pushes);
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Control(const ControlRequest& request,
                                          ControlResponse* response) {
  std::shared_ptr<const PartitionMap> map;
  if (request.partition_owner_size() > 0) {
    const uint32_t parts = config_.cluster().num_partitions();
    if (static_cast<uint32_t>(request.partition_owner_size()) != parts) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Control: map has ", request.partition_owner_size(), " partitions, the job ", parts));
    }
    std::vector<uint32_t> owners(request.partition_owner().begin(),
                                 request.partition_owner().end());
    const uint32_t servers = std::max(config_.cluster().num_servers(),
                                      *std::max_element(owners.begin(), owners.end()) + 1);
    ASSIGN_OR_RETURN(PartitionMap next,
                     PartitionMap::FromOwners(request.map_version(), std::move(owners), servers));
    map = std::make_shared<const PartitionMap>(std::move(next));
  }
  if (map != nullptr) {
    const std::vector<bool> owned = OwnedPartitions(*CurrentMap());
    const std::vector<bool> next = OwnedPartitions(*map);
    for (size_t p = 0; p < next.size(); ++p) {
      if (next[p] && !owned[p]) {
        MaybeStall("switching_map");
        break;
      }
    }
  }
  // Drops are checked against the map this request leaves, before anything
  // changes.
  std::vector<bool> drop;
  if (request.drop_partitions_size() > 0) {
    ASSIGN_OR_RETURN(drop,
                     UnownedPartitionMask(request.drop_partitions(), "Control drop_partitions",
                                          map != nullptr ? *map : *CurrentMap()));
  }
  if (map != nullptr) {
    MutexLock lock(&map_mu_);
    if (map->version() < map_->version()) {
      return absl::FailedPreconditionError(absl::StrCat(
          "Control: map version ", map->version(), " is older than map version ", map_->version()));
    }
    map_ = std::move(map);
  }
  if (request.active_workers_size() > 0) {
    bsp_clocks_.SetActive(
        std::set<uint32_t>(request.active_workers().begin(), request.active_workers().end()));
  }
  if (!drop.empty()) DropPartitions(drop, response);
  return absl::OkStatus();
}

absl::StatusOr<std::vector<bool>> ParameterServerCore::UnownedPartitionMask(
    const google::protobuf::RepeatedField<uint32_t>& partitions, const char* what,
    const PartitionMap& map) const {
  const uint32_t parts = config_.cluster().num_partitions();
  std::vector<bool> mask(parts, false);
  for (uint32_t p : partitions) {
    if (p >= parts) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": partition ", p, " is out of range (the job has ", parts, ")"));
    }
    if (mask[p]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": partition ", p, " is named twice"));
    }
    mask[p] = true;
  }
  for (uint32_t p : partitions) {
    if (map.OwnerOfPartition(p) == server_index_) {
      return absl::FailedPreconditionError(
          absl::StrCat(what, ": server ", server_index_, " owns partition ", p,
                       " under map version ", map.version(),
                       " (a server gets a partition before the map switch that gives it, "
                       "and drops it after the one that takes it)"));
    }
  }
  return mask;
}

void ParameterServerCore::ForgetPrecopies() {
  MutexLock lock(&precopy_mu_);
  precopied_.clear();
}

void ParameterServerCore::MaybeStall(const char* point) const {
  MaybeStallAt(testing_stalls_, point, absl::StrCat("server ", server_index_),
               absl::StrCat(server_index_));
}

void ParameterServerCore::DropPartitions(const std::vector<bool>& drop, ControlResponse* response) {
  uint64_t rows = 0;
  for (Table* table : store_->tables()) rows += table->DropPartitions(drop);
  {
    MutexLock lock(&precopy_mu_);
    for (uint32_t p = 0; p < drop.size(); ++p) {
      if (drop[p]) precopied_.erase(p);
    }
  }
  LOG(INFO) << "server " << server_index_ << " dropped "
            << std::count(drop.begin(), drop.end(), true) << " partitions it no longer owns ("
            << rows << " rows)";
  response->set_rows_dropped(rows);
}

void ParameterServerCore::GrantClock(uint64_t clock) {
  granted_clock_.store(clock, std::memory_order_relaxed);
}

uint64_t ParameterServerCore::eviction_clock() const {
  return std::min(max_clock_.load(std::memory_order_relaxed),
                  granted_clock_.load(std::memory_order_relaxed));
}

uint64_t ParameterServerCore::Evict() {
  ReaderMutexLock state(&state_mu_);
  // Rows of partitions this server does not own (a move's pre-copy) are
  // the source's until the map switch: not evicted here.
  return store_->Evict(eviction_clock(), absl::ToUnixSeconds(absl::Now()),
                       OwnedPartitions(*CurrentMap()));
}

void ParameterServerCore::Shutdown() {
  bsp_clocks_.Shutdown();
  versions_.Stop();
}

absl::Status ParameterServerCore::BufferBspPush(const PushRequest& request, float lr_scale,
                                                const std::vector<DecodedTable>& tables,
                                                PushResponse* response) {
  BspAggregator::BufferedPush push;
  push.lr_scale = lr_scale;
  uint64_t buffered = 0, skipped = 0;
  for (const DecodedTable& d : tables) {
    BspAggregator::BufferedTable bt;
    bt.table_id = d.table->id();
    const size_t dim = d.table->dim();
    bt.keys.reserve(d.n);
    bt.grads.reserve(d.n * dim);
    uint64_t table_skipped = 0;
    for (size_t i = 0; i < d.n; ++i) {
      const float* g = d.grads + i * dim;
      if (!AllFinite(g, dim)) {  // Only under SKIP_AND_COUNT (validated).
        ++table_skipped;
        continue;
      }
      bt.keys.push_back(d.keys[i]);
      bt.grads.insert(bt.grads.end(), g, g + dim);
    }
    d.table->CountSkippedNonFinite(table_skipped);
    skipped += table_skipped;
    buffered += bt.keys.size();
    push.tables.push_back(std::move(bt));
  }
  RETURN_IF_ERROR(bsp_clocks_.Buffer(request.worker_rank(), request.clock(), std::move(push)));
  response->set_rows_applied(buffered);
  response->set_rows_skipped_nonfinite(skipped);
  return absl::OkStatus();
}

}  // namespace shardps

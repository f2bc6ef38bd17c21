#include "worker/param_store.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "server/table.h"
#include "server/table_store.h"

namespace shardps {
namespace {

// An op that finished when it was made.
class DoneOp final : public PsClient::Op {
 public:
  explicit DoneOp(absl::Status status) : status_(std::move(status)) {}
  absl::Status Wait() override { return status_; }

 private:
  absl::Status status_;
};

class RemoteParamStore final : public ParamStore {
 public:
  RemoteParamStore(std::unique_ptr<PsClient> client, bool bsp)
      : client_(std::move(client)), bsp_(bsp) {}

  std::unique_ptr<PsClient::Op> Pull(std::vector<TablePull> tables, PullPurpose purpose,
                                     uint64_t clock) override {
    return client_->PullAsync(std::move(tables), purpose, clock);
  }
  std::unique_ptr<PsClient::Op> Push(std::vector<TablePush> tables, uint64_t clock,
                                     float lr_scale) override {
    return client_->PushAsync(std::move(tables), clock, lr_scale, bsp_);
  }
  absl::Status InitRows(uint32_t table_id, uint32_t dim, const uint64_t* keys, size_t n,
                        const float* values) override {
    return client_->InitRows(table_id, dim, keys, n, values);
  }
  bool PullsWithState() const override { return client_->encoding() == Encoding::kFp32; }

 private:
  const std::unique_ptr<PsClient> client_;
  const bool bsp_;
};

class LocalParamStore final : public ParamStore {
 public:
  explicit LocalParamStore(std::unique_ptr<TableStore> store) : store_(std::move(store)) {}

  std::unique_ptr<PsClient::Op> Pull(std::vector<TablePull> tables, PullPurpose purpose,
                                     uint64_t clock) override {
    for (const TablePull& t : tables) {
      if (t.state > 0) {
        absl::Status st = PullWithState(t, purpose);
        if (!st.ok()) return std::make_unique<DoneOp>(std::move(st));
        continue;
      }
      absl::Status st = store_->Pull(t.table_id, t.keys, t.n, purpose == TRAIN, t.out);
      if (!st.ok()) return std::make_unique<DoneOp>(std::move(st));
    }
    return std::make_unique<DoneOp>(absl::OkStatus());
  }
  std::unique_ptr<PsClient::Op> Push(std::vector<TablePush> tables, uint64_t clock,
                                     float lr_scale) override {
    store_->SetClock(clock);
    for (const TablePush& t : tables) {
      auto counts = store_->Push(t.table_id, t.keys, t.n, t.grads, lr_scale);
      if (!counts.ok()) return std::make_unique<DoneOp>(counts.status());
    }
    return std::make_unique<DoneOp>(absl::OkStatus());
  }
  absl::Status InitRows(uint32_t table_id, uint32_t dim, const uint64_t* keys, size_t n,
                        const float* values) override {
    return store_->InitRows(table_id, keys, n, values).status();
  }
  TableStore* local_tables() override { return store_.get(); }

 private:
  // As a server serves TableKeys.with_state (and refuses what it refuses).
  absl::Status PullWithState(const TablePull& t, PullPurpose purpose) {
    Table* table = store_->FindTable(t.table_id);
    if (table == nullptr)
      return absl::InvalidArgumentError(absl::StrCat("unknown table id ", t.table_id));
    RETURN_IF_ERROR(TableStore::CheckDenseKeys(*table, t.keys, t.n));
    RETURN_IF_ERROR(TableStore::CheckStatePull(*table, purpose == TRAIN, Encoding::kFp32));
    if (t.state != table->state_size()) {  // What a remote client sees as DATA_LOSS.
      return absl::InvalidArgumentError(
          absl::StrCat("table ", table->config().name(), ": a pull with ", t.state,
                       " floats of state, but its optimizer has ", table->state_size()));
    }
    table->PullWithState(t.keys, t.n, t.out);
    return absl::OkStatus();
  }

  const std::unique_ptr<TableStore> store_;
};

}  // namespace

std::unique_ptr<ParamStore> MakeRemoteParamStore(std::unique_ptr<PsClient> client, bool bsp) {
  return std::make_unique<RemoteParamStore>(std::move(client), bsp);
}

absl::StatusOr<std::unique_ptr<ParamStore>> MakeLocalParamStore(const JobConfig& config) {
  auto store = TableStore::Create(config);
  if (!store.ok()) return store.status();
  return std::unique_ptr<ParamStore>(new LocalParamStore(*std::move(store)));
}

}  // namespace shardps

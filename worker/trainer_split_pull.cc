#include "worker/trainer_split_pull.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec.h"

namespace shardps {
namespace trainer_internal {
namespace {

// A part's pull; Wait() scatters the gathered rows to their places in
// p->rows, once (unless the part is replayed: Replay() does it).
class PartOp final : public PsClient::Op {
 public:
  PartOp(std::unique_ptr<PsClient::Op> op, Prepared* p, Prepared::PullPart* part,
         const ModelSpec& spec, bool scatter)
      : op_(std::move(op)), p_(p), part_(part), spec_(spec), scatter_(scatter) {}

  absl::Status Wait() override {
    if (waited_) return status_;
    waited_ = true;
    if (op_ != nullptr) status_ = op_->Wait();
    if (!status_.ok() || !scatter_) return status_;
    for (size_t t = 0; t < part_->pos.size(); ++t) {
      const size_t dim = static_cast<size_t>(spec_.tables[t].dim);
      const std::vector<uint32_t>& pos = part_->pos[t];
      const float* src = part_->rows[t].data();
      float* dst = p_->rows[t].data();
      for (size_t i = 0; i < pos.size(); ++i) {
        std::memcpy(dst + pos[i] * dim, src + i * dim, dim * sizeof(float));
      }
    }
    return status_;
  }

 private:
  const std::unique_ptr<PsClient::Op> op_;  // Null: nothing to pull.
  Prepared* const p_;
  Prepared::PullPart* const part_;
  const ModelSpec& spec_;
  const bool scatter_;
  bool waited_ = false;
  absl::Status status_;
};

const TableConfig* FindTable(const JobConfig& config, uint32_t id) {
  for (const TableConfig& tc : config.tables()) {
    if (tc.id() == id) return &tc;
  }
  return nullptr;
}

}  // namespace

absl::Status SplitPuller::EnableReplay(const JobConfig& config) {
  if (!params_->store()->PullsWithState()) {
    return absl::FailedPreconditionError(
        "the parameter store does not serve rows with their optimizer state (local tables, "
        "or values on the wire other than fp32)");
  }
  std::vector<std::pair<uint32_t, uint32_t>> tables;  // (id, dim)
  for (const TableSpec& t : spec_.tables) tables.emplace_back(t.id, static_cast<uint32_t>(t.dim));
  tables.emplace_back(params_->dense_table(), params_->chunk());
  std::vector<ReplayTable> replay;
  for (const auto& [id, dim] : tables) {
    const TableConfig* tc = FindTable(config, id);
    if (tc == nullptr) return absl::FailedPreconditionError(absl::StrCat("no table id ", id));
    if (tc->kind() != TableConfig::DENSE && tc->admission().min_count() > 1) {
      return absl::FailedPreconditionError(absl::StrCat(
          "table ", tc->name(), " has admission: a pending key has no optimizer state"));
    }
    auto optimizer = Optimizer::Create(tc->optimizer(), dim);
    if (!optimizer.ok()) return optimizer.status();
    ReplayTable r;
    r.optimizer = *std::move(optimizer);
    r.dim = dim;
    r.state = static_cast<uint32_t>(r.optimizer->StateSize());
    r.skip_nonfinite = tc->non_finite() == SKIP_AND_COUNT;
    replay.push_back(std::move(r));
  }
  replay_ = std::move(replay);
  return absl::OkStatus();
}

void SplitPuller::ReplayTable::Apply(float* row, const float* grad, float lr_scale) const {
  if (skip_nonfinite && !AllFinite(grad, dim)) return;  // The server skips it too.
  optimizer->Update(row, row + dim, grad, lr_scale);
}

void SplitPuller::Split(Prepared* p, const Prepared& prev) {
  const size_t num_tables = p->unique_keys.size();
  for (Prepared::PullPart& part : p->parts) {
    part.keys.resize(num_tables);
    part.pos.resize(num_tables);
    part.rows.resize(num_tables);
    part.prev_pos.resize(num_tables);
  }
  for (size_t t = 0; t < num_tables; ++t) {
    prev_index_.clear();
    if (t < prev.unique_keys.size()) {
      const std::vector<uint64_t>& keys = prev.unique_keys[t];
      for (size_t i = 0; i < keys.size(); ++i) prev_index_.emplace(keys[i], i);
    }
    for (Prepared::PullPart& part : p->parts) {
      part.keys[t].clear();
      part.pos[t].clear();
      part.prev_pos[t].clear();
    }
    const std::vector<uint64_t>& keys = p->unique_keys[t];
    Prepared::PullPart& own = p->parts[kOwnWrites];
    Prepared::PullPart& untouched = p->parts[kUntouched];
    for (size_t i = 0; i < keys.size(); ++i) {
      const auto it = prev_index_.find(keys[i]);
      Prepared::PullPart& part = it != prev_index_.end() ? own : untouched;
      part.keys[t].push_back(keys[i]);
      part.pos[t].push_back(static_cast<uint32_t>(i));
      if (it != prev_index_.end()) own.prev_pos[t].push_back(it->second);
    }
    const size_t dim = static_cast<size_t>(spec_.tables[t].dim);
    untouched.rows[t].resize(untouched.keys[t].size() * dim);
    own.rows[t].resize(own.keys[t].size() * (dim + (replay() ? replay_[t].state : 0)));
  }
}

std::unique_ptr<PsClient::Op> SplitPuller::StartPart(Prepared* p, PullPartKind kind,
                                                     PullPurpose purpose, uint64_t step) {
  Prepared::PullPart* part = &p->parts[kind];
  const bool with_state = kind == kOwnWrites && replay();
  std::vector<TablePull> pulls;
  for (size_t t = 0; t < part->keys.size(); ++t) {
    if (part->keys[t].empty()) continue;
    pulls.push_back({spec_.tables[t].id, static_cast<uint32_t>(spec_.tables[t].dim),
                     part->keys[t].data(), part->keys[t].size(), part->rows[t].data(),
                     with_state ? replay_[t].state : 0});
  }
  if (kind == kOwnWrites) {
    const size_t chunks = params_->num_chunks(), chunk = params_->chunk();
    p->dense_params.resize(chunks * chunk);
    TablePull dense{params_->dense_table(), params_->chunk(), params_->chunk_keys().data(),
                    chunks, p->dense_params.data()};
    if (with_state) {
      dense.state = replay_.back().state;
      p->dense_state.resize(chunks * (chunk + dense.state));
      dense.out = p->dense_state.data();
    }
    pulls.push_back(dense);
  }
  std::unique_ptr<PsClient::Op> op;
  if (!pulls.empty()) op = params_->store()->Pull(std::move(pulls), purpose, step);
  return std::make_unique<PartOp>(std::move(op), p, part, spec_, !with_state);
}

void SplitPuller::Replay(Prepared* p, const StepResult& prev,
                         const std::vector<float>& prev_dense, float lr_scale) {
  Prepared::PullPart& own = p->parts[kOwnWrites];
  for (size_t t = 0; t < own.keys.size(); ++t) {
    const ReplayTable& r = replay_[t];
    const size_t width = r.dim + r.state;
    const float* grads = prev.table_grads[t].data();
    float* rows = own.rows[t].data();
    float* dst = p->rows[t].data();
    for (size_t i = 0; i < own.keys[t].size(); ++i) {
      float* row = rows + i * width;
      r.Apply(row, grads + size_t{own.prev_pos[t][i]} * r.dim, lr_scale);
      std::memcpy(dst + size_t{own.pos[t][i]} * r.dim, row, r.dim * sizeof(float));
    }
  }
  const ReplayTable& d = replay_.back();
  const size_t width = d.dim + d.state;
  for (size_t c = 0; c < params_->num_chunks(); ++c) {
    float* row = p->dense_state.data() + c * width;
    d.Apply(row, prev_dense.data() + c * d.dim, lr_scale);
    std::memcpy(p->dense_params.data() + c * d.dim, row, d.dim * sizeof(float));
  }
}

}  // namespace trainer_internal
}  // namespace shardps

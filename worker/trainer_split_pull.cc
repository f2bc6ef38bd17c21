#include "worker/trainer_split_pull.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "common/status_macros.h"

namespace shardps {
namespace trainer_internal {
namespace {

// A part's pull; Wait() scatters the gathered rows' weights to their places
// in p->rows, once (unless the part is replayed: Replay() does it). The
// first part->warm[t] rows of table t come with `state[t]` floats of state.
class PartOp final : public PsClient::Op {
 public:
  PartOp(std::unique_ptr<PsClient::Op> op, Prepared* p, Prepared::PullPart* part,
         const ModelSpec& spec, bool scatter, std::vector<size_t> state)
      : op_(std::move(op)),
        p_(p),
        part_(part),
        spec_(spec),
        scatter_(scatter),
        state_(std::move(state)) {}

  absl::Status Wait() override {
    if (waited_) return status_;
    waited_ = true;
    if (op_ != nullptr) status_ = op_->Wait();
    if (!status_.ok() || !scatter_) return status_;
    for (size_t t = 0; t < part_->pos.size(); ++t) {
      const size_t dim = static_cast<size_t>(spec_.tables[t].dim);
      const std::vector<uint32_t>& pos = part_->pos[t];
      const size_t warm = part_->warm[t];
      const float* src = part_->rows[t].data();
      float* dst = p_->rows[t].data();
      for (size_t i = 0; i < pos.size(); ++i) {
        const float* row = i < warm ? src + i * (dim + state_[t])
                                    : src + warm * (dim + state_[t]) + (i - warm) * dim;
        std::memcpy(dst + pos[i] * dim, row, dim * sizeof(float));
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
  const std::vector<size_t> state_;
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

void SplitPuller::EnableCache(EmbeddingCache* cache, JobClock* clock, uint32_t staleness) {
  cache_ = cache;
  clock_ = clock;
  staleness_ = staleness;
}

uint64_t SplitPuller::ReadClock(uint64_t step) const {
  // Sent once step `step` may start: the minimum clock is at least
  // step - staleness (SSP), and at least what the scheduler last said.
  uint64_t m = 0;
  if (staleness_ != UINT32_MAX && step > staleness_) m = step - staleness_;
  if (clock_ != nullptr) {
    if (const std::optional<uint64_t> known = clock_->MinClock()) m = std::max(m, *known);
  }
  return m;
}

void SplitPuller::Split(Prepared* p, const Prepared* prev, uint64_t step) {
  const size_t num_tables = p->unique_keys.size();
  p->alone = prev == nullptr;
  p->own_replayed = !p->alone && replay();
  for (Prepared::PullPart& part : p->parts) {
    part.keys.resize(num_tables);
    part.pos.resize(num_tables);
    part.rows.resize(num_tables);
    part.prev_pos.resize(num_tables);
    part.warm.assign(num_tables, 0);
    part.with_state = false;
  }
  for (auto* positions : {&p->cache_hits, &p->cache_misses, &p->cache_cold}) {
    positions->resize(num_tables);
    for (auto& v : *positions) v.clear();
  }
  if (cache_ != nullptr) {
    cache_->PlanStep(step, clock_ != nullptr ? clock_->MinClock() : std::nullopt, p->unique_keys,
                     &p->cache_hits, &p->cache_misses, &p->cache_cold);
  }
  for (size_t t = 0; t < num_tables; ++t) {
    prev_index_.clear();
    if (prev != nullptr && t < prev->unique_keys.size()) {
      const std::vector<uint64_t>& keys = prev->unique_keys[t];
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
    auto place = [&](size_t i) {
      const auto it = prev_index_.find(keys[i]);
      Prepared::PullPart& part = it != prev_index_.end() ? own : untouched;
      part.keys[t].push_back(keys[i]);
      part.pos[t].push_back(static_cast<uint32_t>(i));
      if (it != prev_index_.end()) own.prev_pos[t].push_back(it->second);
    };
    const size_t dim = static_cast<size_t>(spec_.tables[t].dim);
    if (cache_ != nullptr) {
      // kUntouched: the misses to be cached (with state) first.
      for (uint32_t i : p->cache_misses[t]) place(i);
      untouched.warm[t] = untouched.keys[t].size();
      for (uint32_t i : p->cache_cold[t]) place(i);
      untouched.rows[t].resize(untouched.warm[t] * cache_->state(t) +
                               untouched.keys[t].size() * dim);
    } else {
      for (size_t i = 0; i < keys.size(); ++i) place(i);
      untouched.rows[t].resize(untouched.keys[t].size() * dim);
    }
    own.rows[t].resize(own.keys[t].size() * (dim + (replay() ? replay_[t].state : 0)));
  }
}

std::unique_ptr<PsClient::Op> SplitPuller::StartPart(Prepared* p, PullPartKind kind,
                                                     PullPurpose purpose, uint64_t step) {
  Prepared::PullPart* part = &p->parts[kind];
  // kOwnWrites: with state to be replayed; kUntouched: to be cached.
  part->with_state = kind == kOwnWrites ? p->own_replayed : cache_ != nullptr;
  part->read_clock = ReadClock(step);
  std::vector<TablePull> pulls;
  std::vector<size_t> states(part->keys.size(), 0);
  for (size_t t = 0; t < part->keys.size(); ++t) {
    const uint32_t dim = static_cast<uint32_t>(spec_.tables[t].dim);
    const size_t n = part->keys[t].size();
    if (kind == kOwnWrites) part->warm[t] = part->with_state ? n : 0;
    const uint32_t state = !part->with_state    ? 0
                           : kind == kOwnWrites ? replay_[t].state
                                                : cache_->state(t);
    states[t] = state;
    // Rows with state (all, or kUntouched's warm ones), then those without.
    const size_t warm = part->warm[t];
    if (warm > 0) {
      pulls.push_back(
          {spec_.tables[t].id, dim, part->keys[t].data(), warm, part->rows[t].data(), state});
    }
    if (n > warm) {
      pulls.push_back({spec_.tables[t].id, dim, part->keys[t].data() + warm, n - warm,
                       part->rows[t].data() + warm * (dim + state), 0});
    }
  }
  // The dense chunks: with kOwnWrites, or with kUntouched when the step is
  // pulled alone (one pull for all of it).
  if (kind == (p->alone ? kUntouched : kOwnWrites)) {
    const size_t chunks = params_->num_chunks(), chunk = params_->chunk();
    p->dense_params.resize(chunks * chunk);
    TablePull dense{params_->dense_table(), params_->chunk(), params_->chunk_keys().data(), chunks,
                    p->dense_params.data()};
    if (kind == kOwnWrites && part->with_state) {  // Replayed.
      dense.state = replay_.back().state;
      p->dense_state.resize(chunks * (chunk + dense.state));
      dense.out = p->dense_state.data();
    }
    pulls.push_back(dense);
  }
  std::unique_ptr<PsClient::Op> op;
  if (!pulls.empty()) op = params_->store()->Pull(std::move(pulls), purpose, step);
  const bool scatter = !(kind == kOwnWrites && part->with_state);
  return std::make_unique<PartOp>(std::move(op), p, part, spec_, scatter, std::move(states));
}

void SplitPuller::Replay(Prepared* p, const StepResult& prev, const std::vector<float>& prev_dense,
                         float lr_scale) {
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

absl::Status SplitPuller::FinishStep(Prepared* p, uint64_t step) {
  if (cache_ == nullptr) return absl::OkStatus();
  for (const PullPartKind kind : {kUntouched, kOwnWrites}) {
    const Prepared::PullPart& part = p->parts[kind];
    if (!part.with_state) continue;
    for (size_t t = 0; t < part.keys.size(); ++t) {
      const size_t n = part.warm[t];  // The rows pulled with their state.
      if (n == 0) continue;
      cache_->Insert(t, part.keys[t].data(), n, part.rows[t].data(), part.read_clock);
      // kOwnWrites rows come with their state for the replay anyway.
      if (kind == kUntouched) cache_->NoteStatePulled(uint64_t{4} * cache_->state(t) * n);
    }
  }
  RETURN_IF_ERROR(cache_->Fill(step, p->unique_keys, p->cache_hits, &p->rows));
  cache_->Release(step);
  return absl::OkStatus();
}

void SplitPuller::ApplyPush(const Prepared& p, const StepResult& r, float lr_scale) {
  if (cache_ == nullptr) return;
  for (size_t t = 0; t < p.unique_keys.size(); ++t) {
    if (p.unique_keys[t].empty()) continue;
    cache_->ApplyPush(t, p.unique_keys[t].data(), p.unique_keys[t].size(), r.table_grads[t].data(),
                      lr_scale);
  }
}

}  // namespace trainer_internal
}  // namespace shardps

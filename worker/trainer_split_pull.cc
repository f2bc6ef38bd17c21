#include "worker/trainer_split_pull.h"

#include <algorithm>
#include <cstring>
#include <utility>
#include <vector>

namespace shardps {
namespace trainer_internal {
namespace {

// A part's pull; Wait() scatters the gathered rows to their places in
// p->rows, once.
class PartOp final : public PsClient::Op {
 public:
  PartOp(std::unique_ptr<PsClient::Op> op, Prepared* p, Prepared::PullPart* part,
         const ModelSpec& spec)
      : op_(std::move(op)), p_(p), part_(part), spec_(spec) {}

  absl::Status Wait() override {
    if (waited_) return status_;
    waited_ = true;
    if (op_ != nullptr) status_ = op_->Wait();
    if (!status_.ok()) return status_;
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
  bool waited_ = false;
  absl::Status status_;
};

}  // namespace

void SplitPuller::Split(Prepared* p, const Prepared& prev) {
  const size_t num_tables = p->unique_keys.size();
  for (Prepared::PullPart& part : p->parts) {
    part.keys.resize(num_tables);
    part.pos.resize(num_tables);
    part.rows.resize(num_tables);
  }
  for (size_t t = 0; t < num_tables; ++t) {
    prev_keys_.clear();
    if (t < prev.unique_keys.size()) {
      prev_keys_.insert(prev.unique_keys[t].begin(), prev.unique_keys[t].end());
    }
    for (Prepared::PullPart& part : p->parts) {
      part.keys[t].clear();
      part.pos[t].clear();
    }
    const std::vector<uint64_t>& keys = p->unique_keys[t];
    for (size_t i = 0; i < keys.size(); ++i) {
      Prepared::PullPart& part = p->parts[prev_keys_.contains(keys[i]) ? kOwnWrites : kUntouched];
      part.keys[t].push_back(keys[i]);
      part.pos[t].push_back(static_cast<uint32_t>(i));
    }
    const size_t dim = static_cast<size_t>(spec_.tables[t].dim);
    for (Prepared::PullPart& part : p->parts) part.rows[t].resize(part.keys[t].size() * dim);
  }
}

std::unique_ptr<PsClient::Op> SplitPuller::StartPart(Prepared* p, PullPartKind kind,
                                                     PullPurpose purpose, uint64_t step) {
  Prepared::PullPart* part = &p->parts[kind];
  std::vector<TablePull> pulls;
  for (size_t t = 0; t < part->keys.size(); ++t) {
    if (part->keys[t].empty()) continue;
    pulls.push_back({spec_.tables[t].id, static_cast<uint32_t>(spec_.tables[t].dim),
                     part->keys[t].data(), part->keys[t].size(), part->rows[t].data()});
  }
  if (kind == kOwnWrites) {
    p->dense_params.resize(params_->num_chunks() * params_->chunk());
    pulls.push_back({params_->dense_table(), params_->chunk(), params_->chunk_keys().data(),
                     params_->num_chunks(), p->dense_params.data()});
  }
  std::unique_ptr<PsClient::Op> op;
  if (!pulls.empty()) op = params_->store()->Pull(std::move(pulls), purpose, step);
  return std::make_unique<PartOp>(std::move(op), p, part, spec_);
}

}  // namespace trainer_internal
}  // namespace shardps

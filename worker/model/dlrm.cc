#include "worker/model/dlrm.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "worker/model/interaction.h"

namespace shardps {
namespace {

absl::Status CheckSpec(const ModelSpec& spec) {
  if (spec.num_dense <= 0) {
    return absl::InvalidArgumentError("DLRM needs dense features (data.num_dense > 0)");
  }
  if (spec.bottom_mlp.empty()) {
    return absl::InvalidArgumentError(
        "model.bottom_mlp: DLRM needs a bottom MLP whose last size is the embedding dim");
  }
  for (int64_t h : spec.bottom_mlp) {
    if (h <= 0) return absl::InvalidArgumentError("model.bottom_mlp: sizes must be > 0");
  }
  for (int64_t h : spec.top_mlp) {
    if (h <= 0) return absl::InvalidArgumentError("model.top_mlp: sizes must be > 0");
  }
  for (size_t i = 0; i < spec.tables.size(); ++i) {
    const TableSpec& t = spec.tables[i];
    if (static_cast<int>(i) == spec.wide_table) {
      if (t.dim != 1) {
        return absl::InvalidArgumentError(absl::StrCat("model.wide_table \"", t.name, "\" has dim ",
                                                       t.dim, ": a first-order table has dim 1"));
      }
      continue;
    }
    if (t.dim != spec.bottom_mlp.back()) {
      return absl::InvalidArgumentError(
          absl::StrCat("table \"", t.name, "\" has dim ", t.dim, " but DLRM's bottom MLP ends at ",
                       spec.bottom_mlp.back(),
                       " (model.bottom_mlp's last size must equal every "
                       "embedding dim)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

Dlrm::Dlrm(const ModelSpec& spec, const ModelOptions& options) : TorchModel(spec, options) {
  const int64_t d = spec.bottom_mlp.back();
  num_vectors_ = 1;
  for (const FieldSpec& f : spec.fields) num_vectors_ += f.table != spec.wide_table;
  const int64_t pairs = num_vectors_ * (num_vectors_ - 1) / 2;
  bottom_ = mutable_layout()->AddMlp(spec.num_dense, spec.bottom_mlp);
  std::vector<int64_t> top_sizes = spec.top_mlp;
  top_sizes.push_back(1);
  top_ = mutable_layout()->AddMlp(d + pairs, top_sizes);
}

absl::StatusOr<std::unique_ptr<Dlrm>> Dlrm::Create(const ModelSpec& spec,
                                                   const ModelOptions& options) {
  if (absl::Status s = CheckSpec(spec); !s.ok()) return s;
  std::unique_ptr<Dlrm> model(new Dlrm(spec, options));
  return model;
}

torch::Tensor Dlrm::Logits(const ForwardInputs& x) {
  torch::Tensor bottom = layout().Mlp(x.params, bottom_, x.dense, /*relu_last=*/true);
  std::vector<torch::Tensor> parts = {bottom.unsqueeze(0)};
  const int wide = spec().wide_table;
  for (size_t i = 0; i < x.pooled.size(); ++i) {
    if (static_cast<int>(i) != wide && x.pooled[i].size(0) > 0) parts.push_back(x.pooled[i]);
  }
  torch::Tensor t = torch::cat(parts, 0).transpose(0, 1);           // [B, n, d]
  torch::Tensor top_in = torch::cat({bottom, PairwiseDots(t)}, 1);  // [B, d + P]
  torch::Tensor logits = layout().Mlp(x.params, top_, top_in, /*relu_last=*/false);
  // The first-order term: [F_w, B, 1] summed over the fields, [B, 1].
  if (wide >= 0) logits = logits + x.pooled[wide].sum(0).to(logits.scalar_type());
  return logits;
}

std::string Dlrm::DebugString() const {
  const ModelSpec& s = spec();
  return absl::StrCat("DLRM dense ", s.num_dense, " -> bottom [", absl::StrJoin(s.bottom_mlp, ","),
                      "], ", num_vectors_ - 1, " fields over ", s.tables.size(), " table(s)",
                      s.wide_table >= 0 ? " and a first-order term" : "", ", ",
                      num_vectors_ * (num_vectors_ - 1) / 2, " pairs -> top [",
                      absl::StrJoin(s.top_mlp, ","), ",1]; ", NumDenseParams(), " dense params");
}

}  // namespace shardps

#include "worker/export/dense_export.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "torch/torch.h"

namespace shardps {
namespace exporter {
namespace {

// Appends the weight and bias of Linear layers in -> sizes[0] -> ... .
void AddMlp(const std::string& prefix, int64_t in, const std::vector<int64_t>& sizes,
            int64_t* offset, std::vector<DenseTensor>* out) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    const int64_t o = sizes[i];
    out->push_back({absl::StrCat(prefix, "_", i, "_weight"), {o, in}, *offset});
    *offset += o * in;
    out->push_back({absl::StrCat(prefix, "_", i, "_bias"), {o}, *offset});
    *offset += o;
    in = o;
  }
}

}  // namespace

int64_t DenseTensor::size() const {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

absl::StatusOr<std::vector<DenseTensor>> DenseTensors(const ModelSpec& spec,
                                                      int64_t num_dense_params) {
  if (spec.kind != ModelConfig::DLRM) {
    return absl::UnimplementedError(
        absl::StrCat("dense export knows DLRM only, not model kind ", spec.kind));
  }
  if (spec.bottom_mlp.empty()) return absl::InvalidArgumentError("DLRM without a bottom MLP");
  const int64_t d = spec.bottom_mlp.back();
  const int64_t vectors = 1 + static_cast<int64_t>(spec.fields.size());
  std::vector<int64_t> top = spec.top_mlp;
  top.push_back(1);
  std::vector<DenseTensor> out;
  int64_t offset = 0;
  AddMlp("bottom_mlp", spec.num_dense, spec.bottom_mlp, &offset, &out);
  AddMlp("top_mlp", d + vectors * (vectors - 1) / 2, top, &offset, &out);
  if (offset != num_dense_params) {
    return absl::InternalError(
        absl::StrCat("the DLRM dense layout adds up to ", offset, " floats, the model has ",
                     num_dense_params, " (worker/export/dense_export.cc does not follow dlrm.cc)"));
  }
  return out;
}

absl::Status SaveDenseTensors(const std::string& path, const std::vector<DenseTensor>& tensors,
                              absl::Span<const float> flat) {
  for (const DenseTensor& t : tensors) {
    if (t.offset < 0 || t.offset + t.size() > static_cast<int64_t>(flat.size())) {
      return absl::InvalidArgumentError(absl::StrCat(
          path, ": tensor ", t.name, " lies outside the ", flat.size(), " dense parameters"));
    }
  }
  try {
    const torch::Tensor all = torch::from_blob(const_cast<float*>(flat.data()),
                                               {static_cast<int64_t>(flat.size())}, torch::kFloat32)
                                  .clone();
    torch::serialize::OutputArchive archive;
    for (const DenseTensor& t : tensors) {
      archive.write(t.name, all.narrow(0, t.offset, t.size()).view(t.shape).clone());
    }
    archive.write("flat", all);
    archive.save_to(path);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat(path, ": saving the dense weights failed: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat(path, ": saving the dense weights failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace exporter
}  // namespace shardps

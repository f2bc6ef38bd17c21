// The model's dense (MLP) weights as named tensors, and dense.pt.
//
// The trainer keeps the dense weights as one flat fp32 buffer (the model's
// dense table, cut into chunk rows of cluster.dense_chunk_size floats: chunk
// c holds flat[c * chunk, (c + 1) * chunk), the last one zero-padded). For
// DLRM the buffer is, in order (worker/model/dlrm.h, DenseLayout):
//
//   bottom MLP  Linear(num_dense -> bottom_mlp[0]) ... -> bottom_mlp[-1],
//               ReLU after every layer
//   top MLP     Linear(d + F(F+1)/2 -> top_mlp[0]) ... -> top_mlp[-1] -> 1,
//               ReLU after every layer but the last; d = bottom_mlp[-1],
//               F = number of categorical fields
//   each layer: weight [out, in] row-major, then bias [out]
//
// dense.pt (SaveDenseTensors) is a LibTorch archive (torch::serialize::
// OutputArchive, i.e. what torch::save writes for a module; a TorchScript
// module on disk) with one tensor per weight and bias, named
//
//   bottom_mlp_<i>_weight  [out, in]     bottom_mlp_<i>_bias  [out]
//   top_mlp_<i>_weight     [out, in]     top_mlp_<i>_bias     [out]
//
// (i = 0, 1, ... the Linear layers in order; top_mlp's last layer is the
// 1-wide output layer), plus `flat`: the whole buffer [NumDenseParams()].
// These map one to one onto torch.nn.Linear(in, out).weight / .bias:
//
//   C++:    torch::serialize::InputArchive a; a.load_from("dense.pt");
//           torch::Tensor w; a.read("top_mlp_0_weight", w);
//   Python: m = torch.jit.load("dense.pt"); dict(m.named_parameters())
//
// This header does not include LibTorch. Thread-compatible.
#ifndef SHARDPS_WORKER_EXPORT_DENSE_EXPORT_H_
#define SHARDPS_WORKER_EXPORT_DENSE_EXPORT_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "worker/model/model.h"

namespace shardps {
namespace exporter {

// One named tensor of the flat buffer: flat[offset, offset + prod(shape)).
struct DenseTensor {
  std::string name;
  std::vector<int64_t> shape;
  int64_t offset = 0;
  int64_t size() const;
};

// The named tensors of `spec`'s model (DLRM) in buffer order. INTERNAL if
// they do not add up to `num_dense_params` (the model's layout changed and
// this file did not follow); UNIMPLEMENTED for another model kind.
absl::StatusOr<std::vector<DenseTensor>> DenseTensors(const ModelSpec& spec,
                                                      int64_t num_dense_params);

// Writes dense.pt at `path` (see above): each of `tensors` cut out of
// `flat`, and `flat` itself. INVALID_ARGUMENT if a tensor lies outside
// `flat`; INTERNAL on a LibTorch error (naming the path).
absl::Status SaveDenseTensors(const std::string& path, const std::vector<DenseTensor>& tensors,
                              absl::Span<const float> flat);

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_DENSE_EXPORT_H_

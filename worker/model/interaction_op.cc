// shardps::pairwise_dots(Tensor x) -> Tensor: PairwiseDots (interaction.h)
// as an operator TorchScript modules can call (torch.ops.shardps.
// pairwise_dots): x [B, n, d] -> [B, n(n-1)/2], the dots of the pairs i < j
// in row-major order, differentiable. Registered when a binary links this
// library (alwayslink), before any module is loaded; models/common.py
// declares the same schema (with a bmm reference) for Python, so a zoo
// module scripted there calls this kernel in the workers. Inputs of 16-bit
// floats (autocast) are computed in float32.
#include "torch/library.h"
#include "worker/model/interaction.h"

namespace shardps {
namespace {

torch::Tensor PairwiseDotsOp(const torch::Tensor& x) {
  const bool half = x.scalar_type() == torch::kBFloat16 || x.scalar_type() == torch::kHalf;
  return PairwiseDots(half ? x.to(torch::kFloat) : x);
}

}  // namespace
}  // namespace shardps

TORCH_LIBRARY(shardps, m) { m.def("pairwise_dots(Tensor x) -> Tensor", &shardps::PairwiseDotsOp); }

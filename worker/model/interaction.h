// Pairwise dot-product feature interaction (DLRM's "dot" interaction, also
// the second-order term of an FM/DeepFM).
//
// For x [B, n, d], PairwiseDots(x) is [B, n(n-1)/2] with
//   out[b, k] = <x[b, i], x[b, j]>  for the k-th pair i < j in row-major
//   order: (0,1), (0,2), .., (0,n-1), (1,2), .., (n-2,n-1).
// It is differentiable w.r.t. x. On the CPU it is one fused kernel (forward
// and backward) instead of a batched GEMM of the full n x n Gram matrix, whose
// LibTorch CPU path is dominated by per-sample dispatch at DLRM's sizes; the
// summation order is fixed, so results are bit-identical run to run whatever
// the thread count. Other devices use bmm + index_select.
//
// x must be float or double with n >= 1; throws c10::Error otherwise (call it
// inside a model's forward pass, whose caller turns exceptions into a
// status). Thread-safe (pure function).
#ifndef SHARDPS_WORKER_MODEL_INTERACTION_H_
#define SHARDPS_WORKER_MODEL_INTERACTION_H_

#include "torch/torch.h"

namespace shardps {

torch::Tensor PairwiseDots(const torch::Tensor& x);

// The same through bmm + index_select (any device): the reference the fused
// kernel is tested against, and the non-CPU path.
torch::Tensor PairwiseDotsReference(const torch::Tensor& x);

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_INTERACTION_H_

// Server-side optimizers: one update of one row, on raw float arrays.
//
// An Optimizer is built once per table from its OptimizerConfig and the row
// width, and then applied to rows that live in the table's slabs: each row is
// `dim` weights followed by StateSize() floats of optimizer state. Update()
// neither allocates nor locks; the caller makes the row update atomic (the
// table holds the row's stripe lock).
//
// The maths (g is the pushed gradient of the row, lr = learning_rate *
// lr_scale, wd = weight_decay):
//   clip:     if clip_norm > 0 and |g|_2 > clip_norm, g *= clip_norm / |g|_2
//   decay:    g += wd * w   (except AdamW, which decays the weight itself)
//   SGD:      torch.optim.SGD (momentum buffer starts at 0, so the first step
//             equals torch's clone(g); nesterov as torch)
//   Adagrad:  torch.optim.Adagrad: s += g^2; w -= lr * g / (sqrt(s) + eps)
//   RowWiseAdagrad (TorchRec EXACT_ROWWISE_ADAGRAD): a += mean_i(g_i^2);
//             w -= lr * g / (sqrt(a) + eps)
//   Adam:     lazy: the row's own step count t advances only when the row is
//             pushed; m, v as torch.optim.Adam; bias correction with the
//             row's t: w -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps).
//             decoupled_weight_decay: w *= 1 - lr*wd first (torch AdamW).
//   FTRL:     FTRL-proximal (McMahan et al. 2013), per coordinate:
//             sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma*w;
//             n += g^2; w = |z| <= l1 ? 0
//                         : -(z - sign(z) l1) / ((beta + sqrt(n))/alpha + l2)
//
// Thread-safety: an Optimizer is immutable after Create; Update may run
// concurrently on different rows.
#ifndef SHARDPS_SERVER_OPTIMIZER_H_
#define SHARDPS_SERVER_OPTIMIZER_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace shardps {

class Optimizer {
 public:
  // INVALID_ARGUMENT if no optimizer kind is set, or dim == 0. The config is
  // expected to have been finalized (common/config.h fills eps, betas...).
  static absl::StatusOr<std::unique_ptr<Optimizer>> Create(const OptimizerConfig& config,
                                                           uint32_t dim);

  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  uint32_t dim() const { return dim_; }
  // Floats of state per row (may be 0).
  virtual size_t StateSize() const = 0;
  // Writes the state of a new row (accumulators at their initial value).
  virtual void InitState(float* state) const = 0;
  // One optimizer step of one row: weights[dim], state[StateSize()],
  // grad[dim]. grad is read only; lr_scale multiplies the learning rate.
  virtual void Update(float* weights, float* state, const float* grad, float lr_scale) const = 0;

 protected:
  Optimizer(const OptimizerConfig& config, uint32_t dim);

  // The factor the gradient is scaled by for clipping (1 if off or small).
  float ClipScale(const float* grad) const;

  const uint32_t dim_;
  const float clip_norm_;
  const float weight_decay_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_OPTIMIZER_H_

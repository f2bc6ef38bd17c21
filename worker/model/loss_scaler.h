// LossScaler: dynamic loss scaling for fp16 training (Micikevicius et al.
// 2018, "Mixed Precision Training"; the policy of torch.cuda.amp.GradScaler,
// with its defaults). The loss is multiplied by scale() before the backward
// pass so that small fp16 gradients do not flush to zero; the gradients are
// divided by it afterwards. A step whose gradients overflowed (any Inf or
// NaN) is skipped, its gradients zeroed, and the scale halved; after
// `growth_interval` good steps in a row the scale doubles.
//
// Not thread-safe: one per model.
#ifndef SHARDPS_WORKER_MODEL_LOSS_SCALER_H_
#define SHARDPS_WORKER_MODEL_LOSS_SCALER_H_

#include <cmath>
#include <cstdint>
#include <vector>

namespace shardps {

class LossScaler {
 public:
  explicit LossScaler(float initial_scale = 65536.0f, int growth_interval = 2000)
      : scale_(initial_scale), growth_interval_(growth_interval) {}

  float scale() const { return scale_; }
  uint64_t skipped_steps() const { return skipped_; }

  // Divides every gradient by scale(). If any is not finite, zeroes them
  // all, halves the scale and returns false (the step's push still goes
  // out, so the clock moves on: SGD and Adagrad do not move on a zero
  // gradient; optimizers with momentum, Adam, still apply their decayed
  // state, where GradScaler would skip optimizer.step()); else counts a good step (doubling the
  // scale after growth_interval of them) and returns true.
  bool Unscale(const std::vector<std::vector<float>*>& grads) {
    bool finite = true;
    const float inv = 1.0f / scale_;
    for (std::vector<float>* g : grads) {
      for (float& v : *g) {
        v *= inv;
        finite &= std::isfinite(v);
      }
    }
    if (!finite) {
      for (std::vector<float>* g : grads) g->assign(g->size(), 0.0f);
      scale_ = std::fmax(scale_ * 0.5f, 1.0f);
      good_ = 0;
      ++skipped_;
      return false;
    }
    if (++good_ >= growth_interval_) {
      scale_ *= 2.0f;
      good_ = 0;
    }
    return true;
  }

 private:
  float scale_;
  const int growth_interval_;
  int good_ = 0;
  uint64_t skipped_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_LOSS_SCALER_H_

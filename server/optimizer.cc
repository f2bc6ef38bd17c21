#include "server/optimizer.h"

#include <cmath>
#include <cstring>
#include <memory>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace {

class Sgd final : public Optimizer {
 public:
  Sgd(const OptimizerConfig& c, uint32_t dim)
      : Optimizer(c, dim),
        lr_(c.sgd().learning_rate()),
        momentum_(c.sgd().momentum()),
        nesterov_(c.sgd().nesterov()) {}

  size_t StateSize() const override { return momentum_ != 0 ? dim_ : 0; }
  void InitState(float* state) const override { std::fill(state, state + StateSize(), 0.0f); }
  void Update(float* weights, float* state, const float* grad, float lr_scale) const override {
    float* __restrict w = weights;
    float* __restrict buf = state;
    const float* __restrict g = grad;
    const float clip = ClipScale(grad);
    const float lr = lr_ * lr_scale, wd = weight_decay_, mu = momentum_;
    // g + 0 * w == g for finite w, so decay needs no branch. Loops are kept
    // branch-free so the compiler vectorizes them.
    if (mu == 0) {
      for (uint32_t i = 0; i < dim_; ++i) w[i] -= lr * (g[i] * clip + wd * w[i]);
    } else if (!nesterov_) {
      for (uint32_t i = 0; i < dim_; ++i) {
        buf[i] = mu * buf[i] + (g[i] * clip + wd * w[i]);  // dampening 0.
        w[i] -= lr * buf[i];
      }
    } else {
      for (uint32_t i = 0; i < dim_; ++i) {
        const float d = g[i] * clip + wd * w[i];
        buf[i] = mu * buf[i] + d;
        w[i] -= lr * (d + mu * buf[i]);
      }
    }
  }

 private:
  const float lr_, momentum_;
  const bool nesterov_;
};

class Adagrad final : public Optimizer {
 public:
  Adagrad(const OptimizerConfig& c, uint32_t dim)
      : Optimizer(c, dim),
        lr_(c.adagrad().learning_rate()),
        init_(c.adagrad().initial_accumulator()),
        eps_(c.adagrad().eps()) {}

  size_t StateSize() const override { return dim_; }
  void InitState(float* state) const override { std::fill(state, state + dim_, init_); }
  void Update(float* weights, float* state, const float* grad, float lr_scale) const override {
    float* __restrict w = weights;
    float* __restrict sum = state;
    const float* __restrict grad_r = grad;
    const float clip = ClipScale(grad);
    const float lr = lr_ * lr_scale, wd = weight_decay_, eps = eps_;
    for (uint32_t i = 0; i < dim_; ++i) {
      const float g = grad_r[i] * clip + wd * w[i];
      sum[i] += g * g;
      w[i] -= lr * (g / (std::sqrt(sum[i]) + eps));
    }
  }

 private:
  const float lr_, init_, eps_;
};

class RowWiseAdagrad final : public Optimizer {
 public:
  RowWiseAdagrad(const OptimizerConfig& c, uint32_t dim)
      : Optimizer(c, dim),
        lr_(c.rowwise_adagrad().learning_rate()),
        init_(c.rowwise_adagrad().initial_accumulator()),
        eps_(c.rowwise_adagrad().eps()) {}

  size_t StateSize() const override { return 1; }
  void InitState(float* state) const override { state[0] = init_; }
  void Update(float* weights, float* acc, const float* grad, float lr_scale) const override {
    float* __restrict w = weights;
    const float* __restrict g = grad;
    const float clip = ClipScale(grad);
    const float wd = weight_decay_;
    float sum_sq = 0;  // In element order: deterministic.
    for (uint32_t i = 0; i < dim_; ++i) {
      const float gi = g[i] * clip + wd * w[i];
      sum_sq += gi * gi;
    }
    acc[0] += sum_sq / static_cast<float>(dim_);
    const float step = lr_ * lr_scale / (std::sqrt(acc[0]) + eps_);
    for (uint32_t i = 0; i < dim_; ++i) w[i] -= step * (g[i] * clip + wd * w[i]);
  }

 private:
  const float lr_, init_, eps_;
};

// State: m[dim], v[dim], then the row's step count as uint32 bits.
class Adam final : public Optimizer {
 public:
  Adam(const OptimizerConfig& c, uint32_t dim)
      : Optimizer(c, dim),
        lr_(c.adam().learning_rate()),
        beta1_(c.adam().beta1()),
        beta2_(c.adam().beta2()),
        eps_(c.adam().eps()),
        decoupled_(c.adam().decoupled_weight_decay()) {}

  size_t StateSize() const override { return 2 * size_t{dim_} + 1; }
  void InitState(float* state) const override {
    std::fill(state, state + StateSize(), 0.0f);  // Step 0 is all-zero bits.
  }
  void Update(float* w, float* state, const float* grad, float lr_scale) const override {
    float* m = state;
    float* v = state + dim_;
    uint32_t step;
    std::memcpy(&step, v + dim_, sizeof step);
    ++step;
    std::memcpy(v + dim_, &step, sizeof step);
    const float clip = ClipScale(grad);
    const float lr = lr_ * lr_scale;
    // Bias corrections in double, rounded once, as torch computes them.
    const float bc1 = static_cast<float>(1.0 - std::pow(double{beta1_}, step));
    const float sqrt_bc2 = static_cast<float>(std::sqrt(1.0 - std::pow(double{beta2_}, step)));
    const float step_size = lr / bc1;
    // AdamW decays the weight (decay < 1, wd 0); Adam adds wd * w to the
    // gradient (decay 1, exact). Branch-free so the loop vectorizes.
    const float decay = decoupled_ ? 1.0f - lr * weight_decay_ : 1.0f;
    const float wd = decoupled_ ? 0.0f : weight_decay_;
    const float b1 = beta1_, b2 = beta2_, eps = eps_;
    float* __restrict wr = w;
    float* __restrict mr = m;
    float* __restrict vr = v;
    const float* __restrict gr = grad;
    for (uint32_t i = 0; i < dim_; ++i) {
      const float g = gr[i] * clip + wd * wr[i];
      wr[i] *= decay;
      mr[i] = b1 * mr[i] + (1.0f - b1) * g;
      vr[i] = b2 * vr[i] + (1.0f - b2) * g * g;
      const float denom = std::sqrt(vr[i]) / sqrt_bc2 + eps;
      wr[i] -= step_size * (mr[i] / denom);
    }
  }

 private:
  const float lr_, beta1_, beta2_, eps_;
  const bool decoupled_;
};

// State: z[dim], n[dim].
class Ftrl final : public Optimizer {
 public:
  Ftrl(const OptimizerConfig& c, uint32_t dim)
      : Optimizer(c, dim),
        alpha_(c.ftrl().alpha()),
        beta_(c.ftrl().beta()),
        l1_(c.ftrl().l1()),
        l2_(c.ftrl().l2()) {}

  size_t StateSize() const override { return 2 * size_t{dim_}; }
  void InitState(float* state) const override { std::fill(state, state + StateSize(), 0.0f); }
  void Update(float* w, float* state, const float* grad, float lr_scale) const override {
    float* z = state;
    float* n = state + dim_;
    const float clip = ClipScale(grad);
    const float alpha = alpha_ * lr_scale;
    for (uint32_t i = 0; i < dim_; ++i) {
      float g = grad[i] * clip;
      if (weight_decay_ != 0) g += weight_decay_ * w[i];
      const float n_new = n[i] + g * g;
      const float sigma = (std::sqrt(n_new) - std::sqrt(n[i])) / alpha;
      z[i] += g - sigma * w[i];
      n[i] = n_new;
      if (std::fabs(z[i]) <= l1_) {
        w[i] = 0.0f;
      } else {
        const float sign_l1 = z[i] < 0 ? -l1_ : l1_;
        w[i] = -(z[i] - sign_l1) / ((beta_ + std::sqrt(n_new)) / alpha + l2_);
      }
    }
  }

 private:
  const float alpha_, beta_, l1_, l2_;
};

}  // namespace

Optimizer::Optimizer(const OptimizerConfig& config, uint32_t dim)
    : dim_(dim), clip_norm_(config.clip_norm()), weight_decay_(config.weight_decay()) {}

float Optimizer::ClipScale(const float* grad) const {
  if (clip_norm_ <= 0) return 1.0f;
  double sq = 0;
  for (uint32_t i = 0; i < dim_; ++i) sq += double{grad[i]} * grad[i];
  const double norm = std::sqrt(sq);
  return norm > clip_norm_ ? static_cast<float>(clip_norm_ / norm) : 1.0f;
}

absl::StatusOr<std::unique_ptr<Optimizer>> Optimizer::Create(const OptimizerConfig& config,
                                                             uint32_t dim) {
  if (dim == 0) return absl::InvalidArgumentError("optimizer: dim must be > 0");
  switch (config.kind_case()) {
    case OptimizerConfig::kSgd:
      return std::make_unique<Sgd>(config, dim);
    case OptimizerConfig::kAdagrad:
      return std::make_unique<Adagrad>(config, dim);
    case OptimizerConfig::kRowwiseAdagrad:
      return std::make_unique<RowWiseAdagrad>(config, dim);
    case OptimizerConfig::kAdam:
      return std::make_unique<Adam>(config, dim);
    case OptimizerConfig::kFtrl:
      if (!(config.ftrl().alpha() > 0)) {
        return absl::InvalidArgumentError("optimizer: ftrl.alpha must be > 0");
      }
      return std::make_unique<Ftrl>(config, dim);
    case OptimizerConfig::KIND_NOT_SET:
      break;
  }
  return absl::InvalidArgumentError(
      "optimizer: no optimizer kind set (sgd, adagrad, rowwise_adagrad, adam, "
      "ftrl)");
}

}  // namespace shardps

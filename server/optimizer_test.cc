// Each optimizer against a reference: torch::optim where it has one (on a
// dense tensor holding the same rows, every row touched every step), the
// published formulas written out here otherwise.
#include "server/optimizer.h"

#include <torch/torch.h>

#include <cmath>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

constexpr int kRows = 5;
constexpr int kDim = 8;
constexpr int kSteps = 25;

// Deterministic, varied gradients of magnitude <= 1.
float Grad(int step, int row, int i) { return std::sin(0.7f * step + 1.3f * row + 0.37f * i); }
float InitWeight(int row, int i) { return 0.1f * std::cos(0.9f * row + 0.5f * i); }

void ExpectNear(float actual, double expected, const std::string& what) {
  EXPECT_LE(std::fabs(actual - expected), 1e-7 + 1e-6 * std::fabs(expected))
      << what << ": got " << actual << " want " << expected;
}

// Runs our optimizer over kRows rows for kSteps steps; returns the weights.
std::vector<float> RunOurs(const OptimizerConfig& config, float lr_scale = 1) {
  auto opt = Optimizer::Create(config, kDim);
  EXPECT_TRUE(opt.ok()) << opt.status();
  const size_t state = (*opt)->StateSize();
  std::vector<float> w(kRows * kDim), s(kRows * state), g(kDim);
  for (int r = 0; r < kRows; ++r) {
    for (int i = 0; i < kDim; ++i) w[r * kDim + i] = InitWeight(r, i);
    (*opt)->InitState(s.data() + r * state);
  }
  for (int t = 0; t < kSteps; ++t) {
    for (int r = 0; r < kRows; ++r) {
      for (int i = 0; i < kDim; ++i) g[i] = Grad(t, r, i);
      (*opt)->Update(w.data() + r * kDim, s.data() + r * state, g.data(), lr_scale);
    }
  }
  return w;
}

// Runs a torch optimizer built by `make` over the same rows and gradients.
template <typename MakeOptimizer>
std::vector<float> RunTorch(MakeOptimizer make) {
  torch::Tensor p = torch::empty({kRows, kDim});
  for (int r = 0; r < kRows; ++r) {
    for (int i = 0; i < kDim; ++i) p[r][i] = InitWeight(r, i);
  }
  p.set_requires_grad(true);
  auto opt = make(std::vector<torch::Tensor>{p});
  for (int t = 0; t < kSteps; ++t) {
    torch::Tensor g = torch::empty({kRows, kDim});
    for (int r = 0; r < kRows; ++r) {
      for (int i = 0; i < kDim; ++i) g[r][i] = Grad(t, r, i);
    }
    p.mutable_grad() = g;
    opt.step();
  }
  torch::Tensor c = p.detach().contiguous();
  return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + kRows * kDim);
}

void ExpectAllNear(const std::vector<float>& ours, const std::vector<float>& ref) {
  ASSERT_EQ(ours.size(), ref.size());
  for (size_t k = 0; k < ours.size(); ++k) {
    ExpectNear(ours[k], ref[k], "element " + std::to_string(k));
  }
}

TEST(OptimizerTest, SgdMatchesTorch) {
  OptimizerConfig c;
  c.mutable_sgd()->set_learning_rate(0.05f);
  ExpectAllNear(RunOurs(c), RunTorch([](std::vector<torch::Tensor> p) {
                  return torch::optim::SGD(p, torch::optim::SGDOptions(0.05));
                }));
}

TEST(OptimizerTest, SgdMomentumAndWeightDecayMatchTorch) {
  OptimizerConfig c;
  c.mutable_sgd()->set_learning_rate(0.05f);
  c.mutable_sgd()->set_momentum(0.9f);
  c.set_weight_decay(0.01f);
  ExpectAllNear(RunOurs(c), RunTorch([](std::vector<torch::Tensor> p) {
                  return torch::optim::SGD(
                      p, torch::optim::SGDOptions(0.05).momentum(0.9f).weight_decay(0.01f));
                }));
}

TEST(OptimizerTest, SgdNesterovMatchesTorch) {
  OptimizerConfig c;
  c.mutable_sgd()->set_learning_rate(0.05f);
  c.mutable_sgd()->set_momentum(0.8f);
  c.mutable_sgd()->set_nesterov(true);
  ExpectAllNear(RunOurs(c), RunTorch([](std::vector<torch::Tensor> p) {
                  return torch::optim::SGD(
                      p, torch::optim::SGDOptions(0.05).momentum(0.8f).nesterov(true));
                }));
}

TEST(OptimizerTest, LrScaleScalesTheLearningRate) {
  OptimizerConfig c;
  c.mutable_sgd()->set_learning_rate(0.1f);
  OptimizerConfig half = c;
  half.mutable_sgd()->set_learning_rate(0.05f);
  EXPECT_EQ(RunOurs(c, 0.5f), RunOurs(half));
}

TEST(OptimizerTest, AdagradMatchesTorch) {
  OptimizerConfig c;
  c.mutable_adagrad()->set_learning_rate(0.1f);
  c.mutable_adagrad()->set_initial_accumulator(0.1f);
  c.mutable_adagrad()->set_eps(1e-10f);
  c.set_weight_decay(0.001f);
  ExpectAllNear(RunOurs(c), RunTorch([](std::vector<torch::Tensor> p) {
                  return torch::optim::Adagrad(p, torch::optim::AdagradOptions(0.1)
                                                      .initial_accumulator_value(0.1)
                                                      .eps(1e-10)
                                                      .weight_decay(0.001));
                }));
}

TEST(OptimizerTest, AdamMatchesTorch) {
  OptimizerConfig c;
  c.mutable_adam()->set_learning_rate(0.01f);
  c.mutable_adam()->set_beta1(0.9f);
  c.mutable_adam()->set_beta2(0.999f);
  c.mutable_adam()->set_eps(1e-8f);
  c.set_weight_decay(0.01f);
  ExpectAllNear(
      RunOurs(c), RunTorch([](std::vector<torch::Tensor> p) {
        return torch::optim::Adam(
            p,
            torch::optim::AdamOptions(0.01).betas({0.9f, 0.999f}).eps(1e-8f).weight_decay(0.01f));
      }));
}

TEST(OptimizerTest, AdamWMatchesTorch) {
  OptimizerConfig c;
  c.mutable_adam()->set_learning_rate(0.01f);
  c.mutable_adam()->set_beta1(0.8f);
  c.mutable_adam()->set_beta2(0.99f);
  c.mutable_adam()->set_eps(1e-8f);
  c.mutable_adam()->set_decoupled_weight_decay(true);
  c.set_weight_decay(0.1f);
  ExpectAllNear(
      RunOurs(c), RunTorch([](std::vector<torch::Tensor> p) {
        return torch::optim::AdamW(
            p, torch::optim::AdamWOptions(0.01).betas({0.8f, 0.99f}).eps(1e-8f).weight_decay(0.1f));
      }));
}

// TorchRec EXACT_ROWWISE_ADAGRAD: a += mean(g^2); w -= lr g / (sqrt(a) + eps).
TEST(OptimizerTest, RowWiseAdagradMatchesFormula) {
  const double lr = 0.1, init = 0.05, eps = 1e-10;
  OptimizerConfig c;
  c.mutable_rowwise_adagrad()->set_learning_rate(lr);
  c.mutable_rowwise_adagrad()->set_initial_accumulator(init);
  c.mutable_rowwise_adagrad()->set_eps(eps);
  std::vector<double> w(kRows * kDim), acc(kRows, init);
  for (int r = 0; r < kRows; ++r) {
    for (int i = 0; i < kDim; ++i) w[r * kDim + i] = InitWeight(r, i);
  }
  for (int t = 0; t < kSteps; ++t) {
    for (int r = 0; r < kRows; ++r) {
      double mean_sq = 0;
      for (int i = 0; i < kDim; ++i) mean_sq += double{Grad(t, r, i)} * Grad(t, r, i);
      acc[r] += mean_sq / kDim;
      for (int i = 0; i < kDim; ++i) {
        w[r * kDim + i] -= lr * Grad(t, r, i) / (std::sqrt(acc[r]) + eps);
      }
    }
  }
  const std::vector<float> ours = RunOurs(c);
  for (size_t k = 0; k < w.size(); ++k) ExpectNear(ours[k], w[k], "rowwise");
}

// McMahan et al. 2013, Algorithm 1 (per coordinate), with our initial w.
TEST(OptimizerTest, FtrlMatchesFormula) {
  const double alpha = 0.5, beta = 1.0, l1 = 0.3, l2 = 0.2;
  OptimizerConfig c;
  c.mutable_ftrl()->set_alpha(alpha);
  c.mutable_ftrl()->set_beta(beta);
  c.mutable_ftrl()->set_l1(l1);
  c.mutable_ftrl()->set_l2(l2);
  std::vector<double> w(kRows * kDim), z(kRows * kDim, 0), n(kRows * kDim, 0);
  for (int r = 0; r < kRows; ++r) {
    for (int i = 0; i < kDim; ++i) w[r * kDim + i] = InitWeight(r, i);
  }
  for (int t = 0; t < kSteps; ++t) {
    for (int r = 0; r < kRows; ++r) {
      for (int i = 0; i < kDim; ++i) {
        const int k = r * kDim + i;
        const double g = Grad(t, r, i);
        const double sigma = (std::sqrt(n[k] + g * g) - std::sqrt(n[k])) / alpha;
        z[k] += g - sigma * w[k];
        n[k] += g * g;
        const double sgn = z[k] < 0 ? -1.0 : 1.0;
        w[k] = std::fabs(z[k]) <= l1 ? 0.0
                                     : -(z[k] - sgn * l1) / ((beta + std::sqrt(n[k])) / alpha + l2);
      }
    }
  }
  const std::vector<float> ours = RunOurs(c);
  for (size_t k = 0; k < w.size(); ++k) ExpectNear(ours[k], w[k], "ftrl");
}

TEST(OptimizerTest, ClipNormScalesLargeGradients) {
  OptimizerConfig c;
  c.mutable_sgd()->set_learning_rate(1.0f);
  c.set_clip_norm(1.0f);
  auto opt = Optimizer::Create(c, 2);
  ASSERT_TRUE(opt.ok());
  float w[2] = {0, 0};
  const float big[2] = {3, 4};  // Norm 5 -> clipped to (0.6, 0.8).
  (*opt)->Update(w, nullptr, big, 1.0f);
  EXPECT_FLOAT_EQ(w[0], -0.6f);
  EXPECT_FLOAT_EQ(w[1], -0.8f);
  const float small[2] = {0.3f, 0.4f};  // Norm 0.5: untouched.
  (*opt)->Update(w, nullptr, small, 1.0f);
  EXPECT_FLOAT_EQ(w[0], -0.9f);
  EXPECT_FLOAT_EQ(w[1], -1.2f);
}

TEST(OptimizerTest, AdamIsLazyPerRow) {
  // A row pushed once after others were pushed many times takes a first
  // step (bias-corrected with its own t = 1): |dw| = lr for each element.
  OptimizerConfig c;
  c.mutable_adam()->set_learning_rate(0.01f);
  c.mutable_adam()->set_beta1(0.9f);
  c.mutable_adam()->set_beta2(0.999f);
  c.mutable_adam()->set_eps(1e-8f);
  auto opt = Optimizer::Create(c, 4);
  ASSERT_TRUE(opt.ok());
  std::vector<float> state((*opt)->StateSize());
  (*opt)->InitState(state.data());
  float w[4] = {1, 1, 1, 1};
  const float g[4] = {0.5f, -2.0f, 3.0f, -0.1f};
  (*opt)->Update(w, state.data(), g, 1.0f);
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(w[i], 1.0f - 0.01f * (g[i] > 0 ? 1 : -1), 1e-6) << i;
  }
}

TEST(OptimizerTest, CreateRefusesMissingKind) {
  EXPECT_EQ(Optimizer::Create(OptimizerConfig(), 4).status().code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps

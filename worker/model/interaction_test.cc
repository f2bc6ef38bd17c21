#include "worker/model/interaction.h"

#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "torch/torch.h"

namespace shardps {
namespace {

TEST(PairwiseDotsTest, HandComputedCase) {
  // One sample, three vectors of dim 2: pairs (0,1), (0,2), (1,2).
  torch::Tensor x = torch::tensor({1.0f, 2.0f, 3.0f, 4.0f, 5.0f, 6.0f}).view({1, 3, 2});
  torch::Tensor out = PairwiseDots(x);
  ASSERT_EQ(out.sizes(), (std::vector<int64_t>{1, 3}));
  EXPECT_EQ(out[0][0].item<float>(), 1 * 3 + 2 * 4);
  EXPECT_EQ(out[0][1].item<float>(), 1 * 5 + 2 * 6);
  EXPECT_EQ(out[0][2].item<float>(), 3 * 5 + 4 * 6);
}

TEST(PairwiseDotsTest, OneVectorHasNoPairs) {
  torch::Tensor x = torch::randn({4, 1, 3});
  EXPECT_EQ(PairwiseDots(x).sizes(), (std::vector<int64_t>{4, 0}));
}

// Forward and backward against bmm + index_select, in double, on a strided
// (non-contiguous) input like DLRM's.
TEST(PairwiseDotsTest, MatchesBmmReferenceForwardAndBackward) {
  torch::manual_seed(3);
  for (auto [n, d] :
       std::vector<std::pair<int64_t, int64_t>>{{2, 16}, {5, 5}, {27, 16}, {9, 11}, {4, 32}}) {
    torch::Tensor base = torch::randn({n, 37, d}, torch::kDouble);
    torch::Tensor a = base.clone().requires_grad_(true);
    torch::Tensor b = base.clone().requires_grad_(true);
    torch::Tensor out = PairwiseDots(a.transpose(0, 1));
    torch::Tensor ref = PairwiseDotsReference(b.transpose(0, 1));
    ASSERT_EQ(out.sizes(), ref.sizes());
    EXPECT_TRUE(torch::allclose(out, ref, 1e-12, 1e-12)) << "n=" << n << " d=" << d;
    torch::Tensor w = torch::randn(out.sizes(), torch::kDouble);
    (out * w).sum().backward();
    (ref * w).sum().backward();
    EXPECT_TRUE(torch::allclose(a.grad(), b.grad(), 1e-12, 1e-12)) << "n=" << n << " d=" << d;
  }
}

TEST(PairwiseDotsTest, GradcheckInDouble) {
  torch::manual_seed(4);
  torch::Tensor x = torch::randn({3, 4, 5}, torch::kDouble).requires_grad_(true);
  torch::Tensor out = PairwiseDots(x);
  torch::Tensor w = torch::randn(out.sizes(), torch::kDouble);
  (out * w).sum().backward();
  torch::Tensor analytic = x.grad().clone();
  const double h = 1e-6;
  torch::NoGradGuard no_grad;
  for (int64_t i = 0; i < x.numel(); ++i) {
    torch::Tensor flat = x.view({-1});
    const double saved = flat[i].item<double>();
    flat[i] = saved + h;
    const double plus = (PairwiseDots(x) * w).sum().item<double>();
    flat[i] = saved - h;
    const double minus = (PairwiseDots(x) * w).sum().item<double>();
    flat[i] = saved;
    EXPECT_NEAR(analytic.view({-1})[i].item<double>(), (plus - minus) / (2 * h), 1e-6) << i;
  }
}

TEST(PairwiseDotsTest, BitIdenticalAcrossThreadCounts) {
  torch::manual_seed(5);
  torch::Tensor x = torch::randn({300, 27, 16});
  torch::Tensor w = torch::randn({300, 351});
  auto run = [&](int threads) {
    torch::set_num_threads(threads);
    torch::Tensor a = x.clone().requires_grad_(true);
    torch::Tensor out = PairwiseDots(a);
    (out * w).sum().backward();
    return std::make_pair(out.detach(), a.grad());
  };
  auto one = run(1);
  auto two = run(2);
  torch::set_num_threads(1);
  EXPECT_TRUE(torch::equal(one.first, two.first));
  EXPECT_TRUE(torch::equal(one.second, two.second));
}

// Float results agree with the reference to rounding, for a specialised dim
// (16) and a run-time one (13).
TEST(PairwiseDotsTest, FloatMatchesReference) {
  torch::manual_seed(6);
  for (int64_t d : {16, 13}) {
    torch::Tensor x = torch::randn({64, 27, d});
    EXPECT_TRUE(torch::allclose(PairwiseDots(x), PairwiseDotsReference(x), 1e-5, 1e-5)) << d;
  }
}

TEST(PairwiseDotsTest, BadShapeThrowsC10Error) {
  EXPECT_THROW(PairwiseDots(torch::zeros({2, 3})), c10::Error);
  EXPECT_THROW(PairwiseDots(torch::zeros({2, 3, 4}, torch::kLong)), c10::Error);
}

}  // namespace
}  // namespace shardps

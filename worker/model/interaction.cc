#include "worker/model/interaction.h"

#include <type_traits>
#include <vector>

#include "ATen/Dispatch.h"
#include "ATen/Parallel.h"

namespace shardps {
namespace {

constexpr int64_t kGrain = 16;  // Samples per parallel task.

// <a, b> over d elements in a fixed order: kLanes interleaved partial sums
// combined by a fixed tree. The compiler may turn the lanes into SIMD
// registers, but never reorders a sum (no -ffast-math), so the result does
// not depend on alignment or on how the loop was compiled.
template <typename T>
inline T Dot(const T* __restrict a, const T* __restrict b, int64_t d) {
  constexpr int kLanes = 8;
  T acc[kLanes] = {};
  int64_t c = 0;
  for (; c + kLanes <= d; c += kLanes) {
    for (int k = 0; k < kLanes; ++k) acc[k] += a[c + k] * b[c + k];
  }
  for (int k = 0; c + k < d; ++k) acc[k] += a[c + k] * b[c + k];
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

// The kernels take the embedding dim as a template argument D for the
// common dims (fully unrolled, accumulators in registers) and at run time
// (D = 0) otherwise. Both give the same bits: only the loop shape differs.
template <int D>
using Dim = std::integral_constant<int, D>;

template <typename F>
void WithDim(int64_t d, F&& f) {
  switch (d) {
    case 4:
      return f(Dim<4>());
    case 8:
      return f(Dim<8>());
    case 16:
      return f(Dim<16>());
    case 32:
      return f(Dim<32>());
    case 64:
      return f(Dim<64>());
    default:
      return f(Dim<0>());
  }
}

// out[k] for one sample, x [n, d] row-major.
template <typename T, int D>
void ForwardSample(const T* x, int64_t n, int64_t d_runtime, T* out) {
  const int64_t d = D > 0 ? D : d_runtime;
  for (int64_t i = 0; i + 1 < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j) *out++ = Dot(x + i * d, x + j * d, d);
  }
}

// gx[i] = sum over j != i (in order) of g(i,j) * x[j], g symmetric. The inner
// loop is elementwise over the d columns, so vectorizing it changes nothing.
template <typename T, int D>
void BackwardSample(const T* x, const T* g, int64_t n, int64_t d_runtime, T* gm, T* gx) {
  const int64_t d = D > 0 ? D : d_runtime;
  for (int64_t i = 0; i < n; ++i) gm[i * n + i] = 0;
  for (int64_t i = 0, k = 0; i + 1 < n; ++i) {
    for (int64_t j = i + 1; j < n; ++j, ++k) gm[i * n + j] = gm[j * n + i] = g[k];
  }
  for (int64_t i = 0; i < n; ++i) {
    T acc[D > 0 ? D : 1];
    T* __restrict out = D > 0 ? acc : gx + i * d;
    for (int64_t c = 0; c < d; ++c) out[c] = 0;
    for (int64_t j = 0; j < n; ++j) {
      if (j == i) continue;
      const T w = gm[i * n + j];
      const T* __restrict src = x + j * d;
      for (int64_t c = 0; c < d; ++c) out[c] += w * src[c];
    }
    if (D > 0) {
      for (int64_t c = 0; c < d; ++c) gx[i * d + c] = out[c];
    }
  }
}

torch::Tensor ForwardCpu(const torch::Tensor& x) {
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  torch::Tensor out = torch::empty({b, n * (n - 1) / 2}, x.options());
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "PairwiseDots", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    scalar_t* op = out.data_ptr<scalar_t>();
    const int64_t p = out.size(1);
    WithDim(d, [&](auto dim) {
      at::parallel_for(0, b, kGrain, [&](int64_t begin, int64_t end) {
        for (int64_t s = begin; s < end; ++s) {
          ForwardSample<scalar_t, decltype(dim)::value>(xp + s * n * d, n, d, op + s * p);
        }
      });
    });
  });
  return out;
}

torch::Tensor BackwardCpu(const torch::Tensor& x, const torch::Tensor& g) {
  const int64_t b = x.size(0), n = x.size(1), d = x.size(2);
  torch::Tensor gx = torch::empty_like(x);
  AT_DISPATCH_FLOATING_TYPES(x.scalar_type(), "PairwiseDotsBackward", [&] {
    const scalar_t* xp = x.data_ptr<scalar_t>();
    const scalar_t* gp = g.data_ptr<scalar_t>();
    scalar_t* gxp = gx.data_ptr<scalar_t>();
    const int64_t p = g.size(1);
    WithDim(d, [&](auto dim) {
      at::parallel_for(0, b, kGrain, [&](int64_t begin, int64_t end) {
        std::vector<scalar_t> gm(n * n);
        for (int64_t s = begin; s < end; ++s) {
          BackwardSample<scalar_t, decltype(dim)::value>(xp + s * n * d, gp + s * p, n, d,
                                                         gm.data(), gxp + s * n * d);
        }
      });
    });
  });
  return gx;
}

class PairwiseDotsFunction : public torch::autograd::Function<PairwiseDotsFunction> {
 public:
  static torch::Tensor forward(torch::autograd::AutogradContext* ctx, const torch::Tensor& x) {
    torch::Tensor xc = x.contiguous();
    ctx->save_for_backward({xc});
    return ForwardCpu(xc);
  }

  static torch::autograd::variable_list backward(torch::autograd::AutogradContext* ctx,
                                                 torch::autograd::variable_list grads) {
    const torch::Tensor x = ctx->get_saved_variables()[0];
    return {BackwardCpu(x, grads[0].contiguous())};
  }
};

}  // namespace

torch::Tensor PairwiseDotsReference(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(1) >= 1, "PairwiseDots wants [B, n, d] with n >= 1");
  const int64_t b = x.size(0), n = x.size(1);
  torch::Tensor pairs = torch::triu_indices(n, n, 1, torch::TensorOptions().device(x.device()));
  torch::Tensor flat = pairs[0] * n + pairs[1];
  torch::Tensor z = torch::bmm(x, x.transpose(1, 2));
  return z.reshape({b, n * n}).index_select(1, flat);
}

torch::Tensor PairwiseDots(const torch::Tensor& x) {
  TORCH_CHECK(x.dim() == 3 && x.size(1) >= 1, "PairwiseDots wants [B, n, d] with n >= 1");
  TORCH_CHECK(x.scalar_type() == torch::kFloat || x.scalar_type() == torch::kDouble,
              "PairwiseDots wants float or double");
  if (!x.is_cpu()) return PairwiseDotsReference(x);
  return PairwiseDotsFunction::apply(x);
}

}  // namespace shardps

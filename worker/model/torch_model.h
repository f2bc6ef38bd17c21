// The LibTorch half of every model: a base class that turns ModelInputs into
// tensors, pools the embedding bags, runs the loss and the backward pass and
// copies gradients out, so that a model (the built-in DLRM, a TorchScript
// module) only declares its dense parameters and writes its forward pass:
//
//   class WideDeep final : public TorchModel {
//    public:
//     WideDeep(ModelSpec spec, ModelOptions options) : TorchModel(spec, options) {
//       deep_ = mutable_layout()->AddMlp(in, {256, 128, 1});
//     }
//     std::string DebugString() const override { return "Wide&Deep ..."; }
//    protected:
//     torch::Tensor Logits(const ForwardInputs& x) override {
//       return layout().Mlp(x.params, deep_, Concat(x), /*relu_last=*/false) + ...;
//     }
//   };
//
// plus one case in CreateModel (model_factory.cc) and a ModelConfig kind.
//
// Dense parameters are views (narrow + view) into ONE flat leaf tensor, so the
// flat tensor's gradient is the dense table's gradient, in the layout that
// DenseLayout fixes (layers in registration order; weight [out, in]
// row-major, then bias [out]). A model whose parameters are separate
// tensors (TorchScriptModel) overrides BindDense: each tensor a view of the
// flat buffer and a leaf of its own, whose gradient is copied to its offset.
//
// This header includes torch/torch.h: only model implementations include it.
// Thread-safety: as Model.
#ifndef SHARDPS_WORKER_MODEL_TORCH_MODEL_H_
#define SHARDPS_WORKER_MODEL_TORCH_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "torch/torch.h"
#include "worker/model/loss_scaler.h"
#include "worker/model/model.h"

namespace shardps {

// The layout of a flat dense parameter buffer: a list of Linear layers.
// Build it once (in the model's constructor), then it is immutable.
class DenseLayout {
 public:
  struct Layer {
    int64_t in = 0;
    int64_t out = 0;
    int64_t offset = 0;  // Of the weight [out, in]; the bias [out] follows.
  };

  // Appends Linear(in -> out); returns its layer index.
  int AddLinear(int64_t in, int64_t out);
  // Appends Linear layers in -> sizes[0] -> ... -> sizes.back(); returns the
  // layer indices.
  std::vector<int> AddMlp(int64_t in, const std::vector<int64_t>& sizes);

  int64_t size() const { return size_; }
  const std::vector<Layer>& layers() const { return layers_; }

  // Writes size() floats: every weight and bias element of a layer is
  // U(-1/sqrt(in), 1/sqrt(in)) (torch.nn.Linear's default bounds), drawn from
  // a counter-based generator keyed by (seed, element index).
  void Init(uint64_t seed, float* out) const;

  // x [N, in] -> x W^T + b [N, out], W and b being views into `flat`.
  torch::Tensor Linear(const torch::Tensor& flat, int layer, const torch::Tensor& x) const;
  // Applies `layers` in order with ReLU after each one, except after the last
  // if !relu_last.
  torch::Tensor Mlp(const torch::Tensor& flat, const std::vector<int>& layers,
                    const torch::Tensor& x, bool relu_last) const;

 private:
  std::vector<Layer> layers_;
  int64_t size_ = 0;
};

// What a model's forward pass reads. Tensors are on the model's device in
// its compute dtype.
struct ForwardInputs {
  int64_t batch_size = 0;
  torch::Tensor dense;   // [B, num_dense]
  torch::Tensor params;  // [NumDenseParams()], the flat dense leaf.
  // Per spec table t: [F_t, B, dim_t], the pooled bags of the F_t fields
  // that read table t, in field order (fields_of_table(t)).
  std::vector<torch::Tensor> pooled;
};

class TorchModel : public Model {
 public:
  ~TorchModel() override;

  const ModelSpec& spec() const final { return spec_; }
  const ModelOptions& options() const final { return options_; }
  // DenseLayout's, unless a subclass has parameters of its own.
  int64_t NumDenseParams() const override { return layout_.size(); }
  void InitDenseParams(uint64_t seed, float* out) const override;
  using Model::ForwardBackward;
  absl::Status ForwardBackward(const ModelInputs& in, bool backward, StepResult* result) final;

  // The fields that read spec().tables[t], in field order.
  const std::vector<int>& fields_of_table(int t) const { return fields_of_table_[t]; }

 protected:
  TorchModel(ModelSpec spec, ModelOptions options);

  DenseLayout* mutable_layout() { return &layout_; }
  const DenseLayout& layout() const { return layout_; }
  torch::TensorOptions tensor_options() const;

  // A leaf the dense gradient is read from: its gradient is elements
  // [offset, offset + numel) of the flat buffer's.
  struct DenseLeaf {
    torch::Tensor leaf;
    int64_t offset = 0;
  };
  // Called once a step before Logits with the flat buffer (a tensor that
  // does not require grad): readies what Logits reads and returns the leaves
  // to read the gradient from (when `backward`). The default makes `flat`
  // itself the leaf (it requires grad when `backward`; x.params is it).
  // May throw c10::Error.
  virtual std::vector<DenseLeaf> BindDense(torch::Tensor& flat, bool backward);

  // The model proper: logits [B] (or [B, 1]). May throw c10::Error.
  virtual torch::Tensor Logits(const ForwardInputs& x) = 0;

 private:
  // Host data -> tensor on the device in the compute dtype (float data) or
  // int64 (index data). `slot` names a reusable staging buffer (CUDA).
  torch::Tensor FloatInput(absl::Span<const float> data, at::IntArrayRef shape, size_t slot);
  torch::Tensor IndexInput(absl::Span<const int64_t> data, size_t slot);
  // Pools every field of table t into [F_t, B, dim].
  torch::Tensor PoolTable(const ModelInputs& in, int t, const torch::Tensor& rows);
  void Run(const ModelInputs& in, bool backward, StepResult* result);

  // Constant after construction.
  ModelSpec spec_;
  ModelOptions options_;
  DenseLayout layout_;  // Filled by the subclass constructor.
  std::vector<std::vector<int>> fields_of_table_;
  std::vector<bool> table_has_mean_;

  // Scratch, reused across steps. Per table, since on CPU the tensors of a
  // step alias these buffers until its backward pass is done.
  std::vector<std::vector<int64_t>> bag_indices_;
  std::vector<std::vector<int64_t>> bag_offsets_;
  std::vector<std::vector<float>> bag_scale_;
  LossScaler loss_scaler_;  // FP16 precision only.
  // Pinned host buffers by slot (CUDA only).
  std::vector<torch::Tensor> float_staging_;
  std::vector<torch::Tensor> index_staging_;
};

// Copies a tensor's elements (any device, any floating dtype) into `out` as
// float, resizing it.
void CopyToHost(const torch::Tensor& t, std::vector<float>* out);
// The same into out[0 .. t.numel()).
void CopyToHost(const torch::Tensor& t, float* out);

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_TORCH_MODEL_H_

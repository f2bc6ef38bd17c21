// The user's dense tower as the job's model (model.kind TORCHSCRIPT): a
// TorchScript module loaded from model.torchscript_file with
// torch::jit::load, called as
//
//   forward(dense: Tensor[B, num_dense], sparse: List[Tensor]) -> Tensor
//
// with sparse[f] field f's pooled embedding [B, dim of its table], in the
// config's field order (wide-table fields too: [B, 1]), and returning logits
// [B] or [B, 1]. TorchModel does the rest as for the built-in DLRM: the
// pooling, the loss, autocast, loss scaling, the backward pass.
//
// Parameters. The module's parameters, flattened in named_parameters()
// order (each tensor row-major), are the job's dense table; their values in
// the file are its initial values (InitDenseParams ignores the seed). Each
// step every parameter slot of the module is set to a view of the pulled
// flat buffer, a leaf of its own; its gradient is copied to its offset.
//
// What a module may hold, checked once at Create (each refusal
// INVALID_ARGUMENT naming the file and what was expected; NOT_FOUND when the
// file is not there):
//  - a `forward` of the signature above;
//  - float32 parameters that require grad, none sharing storage with
//    another, at least one;
//  - buffers, as constants: moved to the device, never trained, never
//    written back. A buffer that a training-mode forward changes (BatchNorm's
//    running statistics) is refused: every worker would update its own copy;
//  - an output of dtype float32 and shape [B] or [B, 1] on a batch of the
//    job's shape; [B, T] with T > 1 (several tasks) is refused, naming the
//    data it would need.
// Training steps run the module in training mode, evaluation in eval mode
// (dropout then off). TorchScript's graph optimizer is off for its calls:
// the interpreter runs the module's ops as written, so one-thread runs are
// bit-identical whatever a process's history. Non-finite logits are not
// refused here: their gradients go to the servers, whose table non_finite
// policy decides (as for the built-in model).
//
// Thread-safety: as Model (one instance per thread).
#ifndef SHARDPS_WORKER_MODEL_TORCHSCRIPT_MODEL_H_
#define SHARDPS_WORKER_MODEL_TORCHSCRIPT_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "torch/script.h"
#include "worker/model/torch_model.h"

namespace shardps {

class TorchScriptModel final : public TorchModel {
 public:
  // One parameter of the module, in flat order.
  struct Param {
    std::string name;  // As named_parameters() names it ("bottom.0.weight").
    std::vector<int64_t> shape;
    int64_t offset = 0;  // In the flat buffer.
    int64_t numel = 0;
  };

  // Loads spec.torchscript_file onto options.device and checks it as the
  // header says.
  static absl::StatusOr<std::unique_ptr<TorchScriptModel>> Create(const ModelSpec& spec,
                                                                  const ModelOptions& options);
  ~TorchScriptModel() override;

  int64_t NumDenseParams() const override { return num_params_; }
  // The file's parameter values; `seed` is not used.
  void InitDenseParams(uint64_t seed, float* out) const override;
  std::string DebugString() const override;
  const std::vector<Param>& params() const { return params_; }

 protected:
  std::vector<DenseLeaf> BindDense(torch::Tensor& flat, bool backward) override;
  torch::Tensor Logits(const ForwardInputs& x) override;

 private:
  // Where a parameter lives: a slot of a (sub)module's object.
  struct Slot {
    c10::intrusive_ptr<c10::ivalue::Object> owner;
    size_t index = 0;
  };

  TorchScriptModel(const ModelSpec& spec, const ModelOptions& options, torch::jit::Module module);
  // Collects the parameters, their slots and initial values; checks them.
  absl::Status ReadParams();
  // Runs a batch of the job's shape in training then eval mode: the
  // output's shape and dtype, and that no buffer changes.
  absl::Status TrialForward();
  // module_.forward on (dense, sparse), with the graph optimizer off.
  torch::Tensor Forward(const torch::Tensor& dense, std::vector<torch::Tensor> sparse);
  void SetTraining(bool on);
  // "model.torchscript_file \"...\": " + what.
  absl::Status Refuse(const std::string& what) const;

  // Constant after construction (the module's parameter slots and training
  // flag are set every step).
  torch::jit::Module module_;
  std::vector<Param> params_;
  std::vector<Slot> slots_;
  std::vector<float> initial_;
  int64_t num_params_ = 0;

  // The module's training flag as last set (as saved, at first).
  bool training_;
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_TORCHSCRIPT_MODEL_H_

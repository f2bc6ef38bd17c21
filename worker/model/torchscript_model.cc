#include "worker/model/torchscript_model.h"

#include <torch/csrc/jit/runtime/graph_executor.h>

#include <cstring>
#include <exception>
#include <fstream>
#include <map>
#include <sstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"

namespace shardps {
namespace {

constexpr int64_t kTrialBatch = 2;

std::string ShapeString(at::IntArrayRef shape) {
  return absl::StrCat("[", absl::StrJoin(shape, ", "), "]");
}

// The first line of a LibTorch error (the rest is its backtrace or source).
std::string FirstLine(const std::string& what) {
  return std::string(what.substr(0, what.find('\n')));
}

bool IsTensor(const c10::TypePtr& t) { return t->kind() == c10::TypeKind::TensorType; }

bool IsTensorList(const c10::TypePtr& t) {
  return t->kind() == c10::TypeKind::ListType &&
         IsTensor(t->expectRef<c10::ListType>().getElementType());
}

// The job's shape of a batch, for the trial forward: distinct values, so a
// buffer tracking statistics of its inputs changes.
torch::Tensor TrialInput(int64_t cols, const torch::TensorOptions& options, double base) {
  return torch::arange(kTrialBatch * cols, options)
      .reshape({kTrialBatch, cols})
      .mul(0.01)
      .add(base);
}

}  // namespace

TorchScriptModel::TorchScriptModel(const ModelSpec& spec, const ModelOptions& options,
                                   torch::jit::Module module)
    : TorchModel(spec, options), module_(std::move(module)), training_(module_.is_training()) {}

TorchScriptModel::~TorchScriptModel() = default;

absl::Status TorchScriptModel::Refuse(const std::string& what) const {
  return absl::InvalidArgumentError(
      absl::StrCat("model.torchscript_file \"", spec().torchscript_file, "\": ", what));
}

absl::StatusOr<std::unique_ptr<TorchScriptModel>> TorchScriptModel::Create(
    const ModelSpec& spec, const ModelOptions& options) {
  const std::string& path = spec.torchscript_file;
  const std::string what = absl::StrCat("model.torchscript_file \"", path, "\": ");
  if (path.empty()) return absl::InvalidArgumentError("model.torchscript_file is not set");
  if (!std::ifstream(path, std::ios::binary)) {
    return absl::NotFoundError(
        absl::StrCat(what,
                     "cannot be read (no such file on this worker? a relative path is "
                     "relative to the worker's working directory)"));
  }
  torch::jit::Module module;
  try {
    module = torch::jit::load(path, options.device);
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, "is not a TorchScript module (torch::jit::load: ", FirstLine(e.what()),
        "); write one with torch.jit.script(model).save(path), e.g. python3 models/script.py"));
  }
  std::unique_ptr<TorchScriptModel> model(new TorchScriptModel(spec, options, std::move(module)));
  try {
    if (options.double_precision) model->module_.to(torch::kDouble);
    if (absl::Status s = model->ReadParams(); !s.ok()) return s;
    if (absl::Status s = model->TrialForward(); !s.ok()) return s;
  } catch (const std::exception& e) {
    return model->Refuse(
        absl::StrCat("LibTorch failed checking the module: ", FirstLine(e.what())));
  }
  return model;
}

absl::Status TorchScriptModel::ReadParams() {
  const std::string want =
      "forward(self, dense: Tensor, sparse: List[Tensor]) -> Tensor (logits [B] or [B, 1])";
  const c10::optional<torch::jit::Method> forward = module_.find_method("forward");
  if (!forward) return Refuse(absl::StrCat("the module has no forward method; want ", want));
  const c10::FunctionSchema& schema = forward->function().getSchema();
  const auto& args = schema.arguments();
  if (args.size() != 3 || !IsTensor(args[1].type()) || !IsTensorList(args[2].type()) ||
      schema.returns().size() != 1 || !IsTensor(schema.returns()[0].type())) {
    std::ostringstream has;
    has << schema;
    return Refuse(absl::StrCat("want ", want, ", the module has ", has.str()));
  }
  std::map<const void*, std::string> storages;
  for (const auto& p : module_.named_parameters(/*recurse=*/true)) {
    const torch::ScalarType want_dtype =
        options().double_precision ? torch::kDouble : torch::kFloat;
    if (p.value.scalar_type() != want_dtype) {
      return Refuse(absl::StrCat("parameter \"", p.name, "\" is ",
                                 std::string(p.value.dtype().name()),
                                 ": every parameter must be float32 (model.float() before "
                                 "scripting)"));
    }
    if (!p.value.requires_grad()) {
      return Refuse(absl::StrCat("parameter \"", p.name,
                                 "\" does not require grad: every parameter is trained (keep a "
                                 "constant in a buffer instead)"));
    }
    const void* storage = p.value.storage().data();
    if (p.value.numel() > 0 && !storages.emplace(storage, p.name).second) {
      return Refuse(absl::StrCat("parameters \"", storages[storage], "\" and \"", p.name,
                                 "\" share storage (tied weights are not supported)"));
    }
    // The slot: walk the dotted name down the submodules.
    std::vector<std::string> parts = absl::StrSplit(p.name, '.');
    torch::jit::Module owner = module_;
    for (size_t i = 0; i + 1 < parts.size(); ++i) owner = owner.attr(parts[i]).toModule();
    slots_.push_back({owner._ivalue(), owner.type()->getAttributeSlot(parts.back())});
    params_.push_back({p.name, p.value.sizes().vec(), num_params_, p.value.numel()});
    num_params_ += p.value.numel();
    const size_t at = initial_.size();
    initial_.resize(at + static_cast<size_t>(p.value.numel()));
    CopyToHost(p.value, initial_.data() + at);
  }
  if (params_.empty()) {
    return Refuse("the module has no parameters: its dense table would be empty");
  }
  return absl::OkStatus();
}

void TorchScriptModel::SetTraining(bool on) {
  if (on == training_) return;
  module_.train(on);
  training_ = on;
}

torch::Tensor TorchScriptModel::Forward(const torch::Tensor& dense,
                                        std::vector<torch::Tensor> sparse) {
  // As written: no profiling, no fusion, no specialization by the calls
  // seen so far, so a restarted worker computes the same bits.
  torch::jit::GraphOptimizerEnabledGuard no_optimizer(false);
  c10::IValue out = module_.forward({dense, c10::List<torch::Tensor>(std::move(sparse))});
  TORCH_CHECK(out.isTensor(), "forward returned a ", out.tagKind(), ", not a Tensor");
  return out.toTensor();
}

absl::Status TorchScriptModel::TrialForward() {
  const torch::TensorOptions topts = tensor_options();
  std::vector<torch::Tensor> sparse;
  std::vector<std::string> dims;
  for (const FieldSpec& f : spec().fields) {
    const int64_t dim = spec().tables[f.table].dim;
    sparse.push_back(TrialInput(dim, topts, 0.1 * static_cast<double>(sparse.size() % 7)));
    dims.push_back(absl::StrCat(dim));
  }
  const torch::Tensor dense = TrialInput(spec().num_dense, topts, 0.5);
  const std::string batch =
      absl::StrCat("dense [", kTrialBatch, ", ", spec().num_dense, "] and sparse: ", sparse.size(),
                   " fields of [", kTrialBatch, ", dim], dims ", absl::StrJoin(dims, ","));
  std::vector<std::pair<std::string, torch::Tensor>> buffers;
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
    buffers.emplace_back(b.name, b.value.clone());
  }
  torch::NoGradGuard no_grad;
  for (const bool train : {true, false}) {
    SetTraining(train);
    torch::Tensor out;
    try {
      out = Forward(dense, sparse);
    } catch (const std::exception& e) {
      return Refuse(absl::StrCat("forward fails on a batch of this job's shape (", batch, "): ",
                                 FirstLine(e.what()), " (was it scripted for this job's config?)"));
    }
    const bool one_task = (out.dim() == 1 && out.size(0) == kTrialBatch) ||
                          (out.dim() == 2 && out.size(0) == kTrialBatch && out.size(1) == 1);
    if (out.dim() == 2 && out.size(0) == kTrialBatch && out.size(1) > 1) {
      return Refuse(absl::StrCat("forward returns [B, ", out.size(1), "]: ", out.size(1),
                                 " tasks; multi-task models need data.num_labels (several label "
                                 "columns), which the workers do not read yet: return [B] or "
                                 "[B, 1] logits"));
    }
    if (!one_task) {
      return Refuse(absl::StrCat("forward returns ", ShapeString(out.sizes()), " for a batch of ",
                                 kTrialBatch, ": want logits [B] or [B, 1]"));
    }
    if (out.scalar_type() != topts.dtype()) {
      return Refuse(absl::StrCat("forward returns ", std::string(out.dtype().name()),
                                 " logits, want ", std::string(topts.dtype().name())));
    }
  }
  size_t i = 0;
  for (const auto& b : module_.named_buffers(/*recurse=*/true)) {
    if (i < buffers.size() && torch::equal(buffers[i++].second, b.value)) continue;
    return Refuse(absl::StrCat(
        "buffer \"", b.name,
        "\" changed in a training-mode forward (BatchNorm's running statistics?): buffers are "
        "constants here, every worker would update its own copy; use LayerNorm, or "
        "BatchNorm with track_running_stats=False"));
  }
  return absl::OkStatus();
}

void TorchScriptModel::InitDenseParams(uint64_t /*seed*/, float* out) const {
  std::memcpy(out, initial_.data(), initial_.size() * sizeof(float));
}

std::vector<TorchModel::DenseLeaf> TorchScriptModel::BindDense(torch::Tensor& flat, bool backward) {
  SetTraining(backward);
  std::vector<DenseLeaf> leaves;
  leaves.reserve(params_.size());
  for (size_t i = 0; i < params_.size(); ++i) {
    const Param& p = params_[i];
    torch::Tensor view = flat.narrow(0, p.offset, p.numel).view(p.shape);
    view.requires_grad_(backward);
    slots_[i].owner->setSlot(slots_[i].index, view);
    leaves.push_back({view, p.offset});
  }
  return leaves;
}

torch::Tensor TorchScriptModel::Logits(const ForwardInputs& x) {
  std::vector<torch::Tensor> sparse(spec().fields.size());
  for (size_t t = 0; t < x.pooled.size(); ++t) {
    const std::vector<int>& fields = fields_of_table(static_cast<int>(t));
    if (fields.empty()) continue;
    std::vector<torch::Tensor> parts = x.pooled[t].unbind(0);
    for (size_t k = 0; k < fields.size(); ++k) sparse[fields[k]] = std::move(parts[k]);
  }
  torch::Tensor out = Forward(x.dense, std::move(sparse));
  TORCH_CHECK((out.dim() == 1 && out.size(0) == x.batch_size) ||
                  (out.dim() == 2 && out.size(0) == x.batch_size && out.size(1) == 1),
              "the module's forward returned ", out.sizes(), " for a batch of ", x.batch_size,
              ", want [B] or [B, 1]");
  return out;
}

std::string TorchScriptModel::DebugString() const {
  return absl::StrCat("TorchScript ", spec().torchscript_file, ": dense ", spec().num_dense, ", ",
                      spec().fields.size(), " fields; ", params_.size(), " parameter tensors, ",
                      num_params_, " dense params");
}

}  // namespace shardps

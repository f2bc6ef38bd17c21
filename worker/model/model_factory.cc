#include "worker/model/model_factory.h"

#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config.h"
#include "worker/model/dlrm.h"
#include "worker/model/torchscript_model.h"

namespace shardps {

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec,
                                                   const ModelOptions& options) {
  switch (spec.kind) {
    case ModelConfig::KIND_UNSPECIFIED:
    case ModelConfig::DLRM: {
      absl::StatusOr<std::unique_ptr<Dlrm>> dlrm = Dlrm::Create(spec, options);
      if (!dlrm.ok()) return dlrm.status();
      return std::unique_ptr<Model>(std::move(*dlrm));
    }
    case ModelConfig::TORCHSCRIPT: {
      absl::StatusOr<std::unique_ptr<TorchScriptModel>> scripted =
          TorchScriptModel::Create(spec, options);
      if (!scripted.ok()) return scripted.status();
      return std::unique_ptr<Model>(std::move(*scripted));
    }
    default:
      return absl::UnimplementedError(
          absl::StrCat("model kind ", ModelConfig::Kind_Name(spec.kind), " is not implemented"));
  }
}

namespace {

// The model's size against its dense table's: an explicit dense_size must
// equal it; without one the servers size a TORCHSCRIPT model's table at one
// message (they do not load the module), which it must fit.
absl::Status CheckDenseSize(const JobConfig& config, const Model& model) {
  const std::string& dense_table = config.model().dense_table();
  const TableConfig* t = dense_table.empty() ? nullptr : FindTable(config, dense_table);
  if (t == nullptr) return absl::OkStatus();
  const int64_t n = model.NumDenseParams();
  if (t->dense_size() != 0 && static_cast<int64_t>(t->dense_size()) != n) {
    return absl::InvalidArgumentError(
        absl::StrCat("table \"", dense_table, "\".dense_size is ", t->dense_size(),
                     " but the model has ", n, " dense parameters (0 = as many as the model has)"));
  }
  const uint64_t bound = UnsizedDenseTableSize(config);
  if (t->dense_size() == 0 && config.model().kind() == ModelConfig::TORCHSCRIPT &&
      static_cast<uint64_t>(n) > bound) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the model has ", n, " dense parameters, more than the ", bound,
        " the servers give a DENSE table without a dense_size (one cluster.max_message_bytes "
        "message of fp32 values): set table \"",
        dense_table, "\".dense_size: ", n));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const JobConfig& config, c10::Device device) {
  ModelOptions options;
  options.device = device;
  return CreateModel(config, options);
}

ModelOptions::Precision PrecisionFromConfig(const JobConfig& config) {
  switch (config.training().mixed_precision()) {
    case TrainingConfig::BF16:
      return ModelOptions::Precision::kBf16;
    case TrainingConfig::FP16:
      return ModelOptions::Precision::kFp16;
    default:
      return ModelOptions::Precision::kFp32;
  }
}

absl::StatusOr<std::unique_ptr<Model>> CreateModel(const JobConfig& config,
                                                   const ModelOptions& options) {
  if (options.precision == ModelOptions::Precision::kFp16 && !options.device.is_cuda()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "training.mixed_precision FP16 needs a CUDA device, and this worker computes on ",
        options.device.str(), " (LibTorch autocasts to bf16 only on the CPU): use BF16"));
  }
  absl::StatusOr<ModelSpec> spec = ModelSpecFromConfig(config);
  if (!spec.ok()) return spec.status();
  absl::StatusOr<std::unique_ptr<Model>> model = CreateModel(*spec, options);
  if (!model.ok()) return model.status();
  if (absl::Status s = CheckDenseSize(config, **model); !s.ok()) return s;
  return model;
}

c10::Device DefaultDevice() {
  try {
    if (torch::cuda::is_available()) return c10::Device(c10::DeviceType::CUDA, 0);
  } catch (const std::exception&) {
    // A broken CUDA setup: fall back to the CPU.
  }
  return c10::Device(c10::DeviceType::CPU);
}

}  // namespace shardps

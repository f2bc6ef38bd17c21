// Building a model from the job config.
//
//   ASSIGN_OR_RETURN(std::unique_ptr<Model> model,
//                    CreateModel(config, DefaultDevice()));
//
// This header does not include LibTorch.
#ifndef SHARDPS_WORKER_MODEL_MODEL_FACTORY_H_
#define SHARDPS_WORKER_MODEL_MODEL_FACTORY_H_

#include <memory>

#include "absl/status/statusor.h"
#include "c10/core/Device.h"
#include "proto/config.pb.h"
#include "worker/model/model.h"

namespace shardps {

// The model `spec.kind` names (DLRM, TORCHSCRIPT). INVALID_ARGUMENT if the
// spec does not fit the model (see e.g. Dlrm::Create) or the module is
// refused (TorchScriptModel::Create; NOT_FOUND if its file is missing);
// UNIMPLEMENTED for an unknown kind; INTERNAL on a LibTorch failure.
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const ModelSpec& spec,
                                                   const ModelOptions& options);

// ModelSpecFromConfig + CreateModel (float32 on `device`). Also checks the
// model's dense table (model.dense_table): INVALID_ARGUMENT if it has an
// explicit dense_size other than NumDenseParams(), or none and the model is
// a TORCHSCRIPT module larger than the servers' bound for an unsized table
// (UnsizedDenseTableSize, common/config.h).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const JobConfig& config, c10::Device device);

// The same with every option given: the trainer's, in the precision of
// training.mixed_precision (PrecisionFromConfig). INVALID_ARGUMENT for fp16
// on a device that is not CUDA (LibTorch's CPU autocast is bf16 only).
absl::StatusOr<std::unique_ptr<Model>> CreateModel(const JobConfig& config,
                                                   const ModelOptions& options);

// training.mixed_precision as a ModelOptions::Precision.
ModelOptions::Precision PrecisionFromConfig(const JobConfig& config);

// CUDA device 0 if LibTorch sees a GPU, else the CPU.
c10::Device DefaultDevice();

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_MODEL_FACTORY_H_

// The model boundary of the worker: what a model is given for a batch and what
// it gives back. LibTorch stays behind this header (model implementations
// include torch; the trainer that includes this file does not).
//
// Parameters. A model has two kinds of parameters, both owned by the
// parameter server (or by local mode's in-process tables), never by the model:
//  - embedding rows of sparse tables. For a batch, the caller deduplicates
//    each table's keys (KeyDeduper, dedup.h), pulls one row per unique key
//    and passes them as TableRows; each categorical field is a bag of indices
//    into its table's rows (FieldBag, CSR with batch_size + 1 offsets);
//  - the dense (MLP) weights: ONE flat fp32 buffer of NumDenseParams()
//    floats, the model's dense table, cut into chunk rows by the caller. Its
//    initial value is InitDenseParams(seed) (a function of the seed alone,
//    the same in every process).
// ForwardBackward returns the mean loss over the batch, the predictions, and
// (training) the gradient of the mean loss w.r.t. the flat dense buffer and
// w.r.t. every unique row: a key used by several fields or samples gets the
// sum of its contributions, ready to push as one gradient per unique key.
//
// Thread-safety: a Model is not thread-safe (ForwardBackward keeps scratch
// buffers); const methods may be called concurrently with each other. Use
// one Model per training thread. Intra-op parallelism is LibTorch's
// (torch::set_num_threads, set by the trainer). With one intra-op thread the
// same inputs give bit-identical outputs on every run.
#ifndef SHARDPS_WORKER_MODEL_MODEL_H_
#define SHARDPS_WORKER_MODEL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "c10/core/Device.h"  // Small: c10::Device is torch::Device.
#include "proto/config.pb.h"

namespace shardps {

// A sparse table as the model sees it.
struct TableSpec {
  std::string name;
  uint32_t id = 0;  // TableConfig.id.
  int64_t dim = 0;  // Row width.
};

// A categorical field: which table it reads and how a bag is pooled.
struct FieldSpec {
  std::string name;
  uint32_t column = 0;        // 0-based TSV column.
  int table = 0;              // Index into ModelSpec::tables.
  bool mean_pooling = false;  // false: sum. An empty bag pools to zeros.
};

// Everything the model's shapes depend on, resolved from a JobConfig.
struct ModelSpec {
  ModelConfig::Kind kind = ModelConfig::DLRM;
  int64_t num_dense = 0;            // Dense (integer) features per sample.
  std::vector<TableSpec> tables;    // Sparse tables used by a field, in config order.
  std::vector<FieldSpec> fields;    // Categorical fields, in config order.
  std::vector<int64_t> bottom_mlp;  // Hidden sizes (ModelConfig.bottom_mlp).
  std::vector<int64_t> top_mlp;     // Hidden sizes; a 1-wide layer follows.
  // Index into `tables` of the first-order table (ModelConfig.wide_table:
  // dim 1, its fields' rows summed into the logit), or -1.
  int wide_table = -1;
  std::string torchscript_file;  // TORCHSCRIPT: the module's file.
};

// Resolves the model's view of a finalized JobConfig (common/config.h). With
// no `fields`, the 26 Criteo categorical columns (C1..C26, columns
// num_dense+1 ..) map to the first SPARSE table, sum-pooled, as
// config.proto documents. INVALID_ARGUMENT naming the field if a field names
// no SPARSE table, or if there are no fields and no SPARSE table.
absl::StatusOr<ModelSpec> ModelSpecFromConfig(const JobConfig& config);

// The embedding rows pulled for one sparse table: num_unique rows of the
// table's dim, row-major, in the order of the deduplicated keys.
// num_unique = rows.size() / dim (may be 0 if no field has a key). Finite.
struct TableRows {
  absl::Span<const float> rows;
};

// One categorical field of the batch, CSR: sample b's bag is
// indices[offsets[b] .. offsets[b+1]), each an index into the rows of the
// field's table (spec().fields[f].table). offsets has batch_size + 1
// entries, offsets[0] == 0, non-decreasing, offsets[batch_size] ==
// indices.size(). Typically indices is a slice of KeyDeduper::inverse().
struct FieldBag {
  absl::Span<const int64_t> indices;
  absl::Span<const int64_t> offsets;
};

// One batch. All spans are host memory, borrowed for the duration of the
// call only.
struct ModelInputs {
  int64_t batch_size = 0;                // B > 0.
  absl::Span<const float> labels;        // [B], each in [0, 1].
  absl::Span<const float> dense;         // [B * num_dense], row-major, finite.
  absl::Span<const float> dense_params;  // [NumDenseParams()]: current weights, finite.
  absl::Span<const TableRows> tables;    // [spec().tables.size()], same order.
  absl::Span<const FieldBag> fields;     // [spec().fields.size()], same order.
};

// What one step gives back. Reuse one StepResult across steps: the vectors
// keep their capacity.
struct StepResult {
  double loss = 0;           // Mean BCE-with-logits over the batch.
  std::vector<float> probs;  // [B]: sigmoid(logit) per sample.
  // Only filled when backward: d(loss)/d(dense_params), [NumDenseParams()].
  std::vector<float> dense_grad;
  // Only filled when backward: per spec table, d(loss)/d(rows) with the
  // shape of TableRows::rows (one summed gradient per unique key).
  std::vector<std::vector<float>> table_grads;
};

// Where and how a model computes.
struct ModelOptions {
  // CPU, or CUDA (inputs are staged through pinned host buffers).
  c10::Device device = c10::Device(c10::DeviceType::CPU);
  // Compute in float64 (inputs and outputs stay float): for gradient checks.
  bool double_precision = false;
  // Mixed precision of the forward pass (training.mixed_precision): the
  // model's matrix products run under LibTorch's autocast in bf16 (CPU or
  // CUDA) or fp16 (CUDA only, with dynamic loss scaling: LossScaler); the
  // parameters, the loss and every gradient handed out stay fp32.
  enum class Precision { kFp32, kBf16, kFp16 };
  Precision precision = Precision::kFp32;
};

class Model {
 public:
  virtual ~Model() = default;
  Model(const Model&) = delete;
  Model& operator=(const Model&) = delete;

  virtual const ModelSpec& spec() const = 0;
  virtual const ModelOptions& options() const = 0;

  // Size of the flat dense parameter buffer (fp32 elements).
  virtual int64_t NumDenseParams() const = 0;

  // Writes the initial dense parameters (NumDenseParams() floats) to `out`:
  // a deterministic function of `seed` (its own RNG, not LibTorch's), so
  // every process and both modes agree.
  virtual void InitDenseParams(uint64_t seed, float* out) const = 0;

  // Runs the forward pass (and the backward pass if `backward`) on `in`,
  // writing into `*result` (its vectors are resized, their capacity reused).
  // Errors: INVALID_ARGUMENT (naming the field/table and position) if any
  // input is malformed (sizes, offsets, indices out of range, non-finite
  // dense features, rows or parameters, labels outside [0, 1]); nothing is
  // computed then.
  // INTERNAL if LibTorch fails (no exception escapes).
  virtual absl::Status ForwardBackward(const ModelInputs& in, bool backward,
                                       StepResult* result) = 0;

  // Convenience: a fresh StepResult (allocates).
  absl::StatusOr<StepResult> ForwardBackward(const ModelInputs& in, bool backward);

  // One line: kind and layer sizes.
  virtual std::string DebugString() const = 0;

 protected:
  Model() = default;
};

// Checks `in` against `spec` and `num_dense_params` (the checks
// ForwardBackward makes; exposed so callers can validate early).
absl::Status ValidateModelInputs(const ModelSpec& spec, int64_t num_dense_params,
                                 const ModelInputs& in);

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_MODEL_H_

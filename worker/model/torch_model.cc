#include "worker/model/torch_model.h"

#include <ATen/autocast_mode.h>

#include <cmath>
#include <cstring>
#include <exception>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "glog/logging.h"

namespace shardps {
namespace {

// Float staging slots; table t uses kRowsSlot + 2t (rows) and + 2t + 1 (scale).
constexpr size_t kLabelsSlot = 0;
constexpr size_t kDenseSlot = 1;
constexpr size_t kParamsSlot = 2;
constexpr size_t kRowsSlot = 3;

// Uniform in [0, 1) from the top 53 bits.
double UnitUniform(uint64_t bits) { return static_cast<double>(bits >> 11) * 0x1.0p-53; }

}  // namespace

int DenseLayout::AddLinear(int64_t in, int64_t out) {
  layers_.push_back({in, out, size_});
  size_ += in * out + out;
  return static_cast<int>(layers_.size()) - 1;
}

std::vector<int> DenseLayout::AddMlp(int64_t in, const std::vector<int64_t>& sizes) {
  std::vector<int> ids;
  for (int64_t out : sizes) {
    ids.push_back(AddLinear(in, out));
    in = out;
  }
  return ids;
}

void DenseLayout::Init(uint64_t seed, float* out) const {
  const uint64_t base = Mix64(seed ^ 0x6a09e667f3bcc908ULL);
  for (const Layer& l : layers_) {
    const double bound = 1.0 / std::sqrt(static_cast<double>(l.in));
    const int64_t n = l.in * l.out + l.out;
    for (int64_t i = l.offset; i < l.offset + n; ++i) {
      const double u = UnitUniform(Mix64(base + static_cast<uint64_t>(i)));
      out[i] = static_cast<float>(bound * (2.0 * u - 1.0));
    }
  }
}

torch::Tensor DenseLayout::Linear(const torch::Tensor& flat, int layer,
                                  const torch::Tensor& x) const {
  const Layer& l = layers_[layer];
  torch::Tensor w = flat.narrow(0, l.offset, l.in * l.out).view({l.out, l.in});
  torch::Tensor b = flat.narrow(0, l.offset + l.in * l.out, l.out);
  return torch::linear(x, w, b);
}

torch::Tensor DenseLayout::Mlp(const torch::Tensor& flat, const std::vector<int>& layers,
                               const torch::Tensor& x, bool relu_last) const {
  torch::Tensor h = x;
  for (size_t i = 0; i < layers.size(); ++i) {
    h = Linear(flat, layers[i], h);
    if (relu_last || i + 1 < layers.size()) h = torch::relu(h);
  }
  return h;
}

void CopyToHost(const torch::Tensor& t, std::vector<float>* out) {
  out->resize(static_cast<size_t>(t.numel()));
  CopyToHost(t, out->data());
}

void CopyToHost(const torch::Tensor& t, float* out) {
  torch::Tensor h = t.detach().to(torch::kCPU, torch::kFloat).contiguous();
  if (h.numel() > 0) std::memcpy(out, h.data_ptr<float>(), h.numel() * sizeof(float));
}

TorchModel::TorchModel(ModelSpec spec, ModelOptions options)
    : spec_(std::move(spec)), options_(options) {
  const size_t num_tables = spec_.tables.size();
  fields_of_table_.resize(num_tables);
  table_has_mean_.assign(num_tables, false);
  for (size_t f = 0; f < spec_.fields.size(); ++f) {
    fields_of_table_[spec_.fields[f].table].push_back(static_cast<int>(f));
    if (spec_.fields[f].mean_pooling) table_has_mean_[spec_.fields[f].table] = true;
  }
  bag_indices_.resize(num_tables);
  bag_offsets_.resize(num_tables);
  bag_scale_.resize(num_tables);
}

TorchModel::~TorchModel() = default;

void TorchModel::InitDenseParams(uint64_t seed, float* out) const { layout_.Init(seed, out); }

std::vector<TorchModel::DenseLeaf> TorchModel::BindDense(torch::Tensor& flat, bool backward) {
  flat.requires_grad_(backward);
  return {{flat, 0}};
}

torch::TensorOptions TorchModel::tensor_options() const {
  return torch::TensorOptions()
      .device(options_.device)
      .dtype(options_.double_precision ? torch::kDouble : torch::kFloat);
}

torch::Tensor TorchModel::FloatInput(absl::Span<const float> data, at::IntArrayRef shape,
                                     size_t slot) {
  const torch::ScalarType dtype = options_.double_precision ? torch::kDouble : torch::kFloat;
  const int64_t n = static_cast<int64_t>(data.size());
  if (n == 0) return torch::zeros(shape, tensor_options());
  if (!options_.device.is_cuda()) {
    // Borrow the caller's memory: nothing writes to it, and it outlives the step.
    torch::Tensor t = torch::from_blob(const_cast<float*>(data.data()), shape, torch::kFloat);
    return options_.double_precision ? t.to(torch::kDouble) : t;
  }
  if (float_staging_.size() <= slot) float_staging_.resize(slot + 1);
  torch::Tensor& pinned = float_staging_[slot];
  if (!pinned.defined() || pinned.numel() < n) {
    pinned = torch::empty({n}, torch::TensorOptions().dtype(torch::kFloat).pinned_memory(true));
  }
  std::memcpy(pinned.data_ptr<float>(), data.data(), n * sizeof(float));
  return pinned.narrow(0, 0, n).view(shape).to(options_.device, dtype, /*non_blocking=*/true);
}

torch::Tensor TorchModel::IndexInput(absl::Span<const int64_t> data, size_t slot) {
  const int64_t n = static_cast<int64_t>(data.size());
  if (!options_.device.is_cuda()) {
    if (n == 0) return torch::empty({0}, torch::kLong);
    return torch::from_blob(const_cast<int64_t*>(data.data()), {n}, torch::kLong);
  }
  if (index_staging_.size() <= slot) index_staging_.resize(slot + 1);
  torch::Tensor& pinned = index_staging_[slot];
  if (!pinned.defined() || pinned.numel() < n) {
    pinned = torch::empty({std::max<int64_t>(n, 1)},
                          torch::TensorOptions().dtype(torch::kLong).pinned_memory(true));
  }
  if (n > 0) std::memcpy(pinned.data_ptr<int64_t>(), data.data(), n * sizeof(int64_t));
  return pinned.narrow(0, 0, n).to(options_.device, torch::kLong, /*non_blocking=*/true);
}

torch::Tensor TorchModel::PoolTable(const ModelInputs& in, int t, const torch::Tensor& rows) {
  const std::vector<int>& fields = fields_of_table_[t];
  const int64_t b = in.batch_size;
  const int64_t num_fields = static_cast<int64_t>(fields.size());
  const int64_t dim = spec_.tables[t].dim;
  // All bags of the table's fields as one CSR: one embedding_bag call.
  std::vector<int64_t>& idx = bag_indices_[t];
  std::vector<int64_t>& off = bag_offsets_[t];
  idx.clear();
  off.resize(static_cast<size_t>(num_fields * b + 1));
  off[0] = 0;
  for (int64_t k = 0; k < num_fields; ++k) {
    const FieldBag& bag = in.fields[fields[k]];
    const int64_t base = static_cast<int64_t>(idx.size());
    idx.insert(idx.end(), bag.indices.begin(), bag.indices.end());
    for (int64_t s = 1; s <= b; ++s) off[k * b + s] = base + bag.offsets[s];
  }
  if (idx.empty()) return torch::zeros({num_fields, b, dim}, tensor_options());
  torch::Tensor pooled = std::get<0>(
      torch::embedding_bag(rows, IndexInput(idx, 2 * t), IndexInput(off, 2 * t + 1),
                           /*scale_grad_by_freq=*/false, /*mode=sum*/ 0, /*sparse=*/false,
                           /*per_sample_weights=*/c10::nullopt, /*include_last_offset=*/true));
  if (table_has_mean_[t]) {
    std::vector<float>& scale = bag_scale_[t];
    scale.assign(static_cast<size_t>(num_fields * b), 1.0f);
    for (int64_t k = 0; k < num_fields; ++k) {
      if (!spec_.fields[fields[k]].mean_pooling) continue;
      for (int64_t s = 0; s < b; ++s) {
        const int64_t n = off[k * b + s + 1] - off[k * b + s];
        if (n > 1) scale[k * b + s] = 1.0f / static_cast<float>(n);
      }
    }
    pooled = pooled * FloatInput(scale, {num_fields * b, 1}, kRowsSlot + 2 * t + 1);
  }
  return pooled.view({num_fields, b, dim});
}

namespace {

// LibTorch's autocast for the forward pass, in the options' precision, on
// the options' device; restores the thread's previous autocast state.
class AutocastScope {
 public:
  AutocastScope(const ModelOptions& options) {
    if (options.precision == ModelOptions::Precision::kFp32) return;
    active_ = true;
    cuda_ = options.device.is_cuda();
    const at::ScalarType dtype =
        options.precision == ModelOptions::Precision::kFp16 ? at::kHalf : at::kBFloat16;
    if (cuda_) {
      was_enabled_ = at::autocast::is_enabled();
      was_dtype_ = at::autocast::get_autocast_gpu_dtype();
      at::autocast::set_enabled(true);
      at::autocast::set_autocast_gpu_dtype(dtype);
    } else {
      was_enabled_ = at::autocast::is_cpu_enabled();
      was_dtype_ = at::autocast::get_autocast_cpu_dtype();
      at::autocast::set_cpu_enabled(true);
      at::autocast::set_autocast_cpu_dtype(dtype);
    }
    at::autocast::increment_nesting();
  }
  ~AutocastScope() {
    if (!active_) return;
    if (at::autocast::decrement_nesting() == 0) at::autocast::clear_cache();
    if (cuda_) {
      at::autocast::set_enabled(was_enabled_);
      at::autocast::set_autocast_gpu_dtype(was_dtype_);
    } else {
      at::autocast::set_cpu_enabled(was_enabled_);
      at::autocast::set_autocast_cpu_dtype(was_dtype_);
    }
  }
  AutocastScope(const AutocastScope&) = delete;
  AutocastScope& operator=(const AutocastScope&) = delete;

 private:
  bool active_ = false;
  bool cuda_ = false;
  bool was_enabled_ = false;
  at::ScalarType was_dtype_ = at::kFloat;
};

}  // namespace

void TorchModel::Run(const ModelInputs& in, bool backward, StepResult* result) {
  torch::AutoGradMode grad_mode(backward);
  const int64_t b = in.batch_size;
  ForwardInputs x;
  x.batch_size = b;
  x.params = FloatInput(in.dense_params, {NumDenseParams()}, kParamsSlot);
  const std::vector<DenseLeaf> dense_leaves = BindDense(x.params, backward);
  x.dense = FloatInput(in.dense, {b, spec_.num_dense}, kDenseSlot);
  std::vector<torch::Tensor> rows(spec_.tables.size());
  for (size_t t = 0; t < spec_.tables.size(); ++t) {
    const int64_t dim = spec_.tables[t].dim;
    const int64_t n = static_cast<int64_t>(in.tables[t].rows.size()) / dim;
    rows[t] = FloatInput(in.tables[t].rows, {n, dim}, kRowsSlot + 2 * t);
    rows[t].requires_grad_(backward);
    x.pooled.push_back(PoolTable(in, static_cast<int>(t), rows[t]));
  }
  torch::Tensor logits;
  {
    // The model proper in the mixed precision, if any; the pooling above
    // and the loss below stay in the compute dtype.
    AutocastScope autocast(options_);
    logits = Logits(x);
  }
  logits = logits.reshape({b}).to(tensor_options().dtype());
  torch::Tensor labels = FloatInput(in.labels, {b}, kLabelsSlot);
  torch::Tensor loss = torch::binary_cross_entropy_with_logits(logits, labels);
  const bool fp16 = options_.precision == ModelOptions::Precision::kFp16;
  if (backward) (fp16 ? loss * loss_scaler_.scale() : loss).backward();
  result->loss = loss.item<double>();
  CopyToHost(torch::sigmoid(logits.detach()), &result->probs);
  result->dense_grad.clear();
  result->table_grads.resize(spec_.tables.size());
  for (std::vector<float>& g : result->table_grads) g.clear();
  if (!backward) return;
  auto grad_of = [](const torch::Tensor& leaf, std::vector<float>* out) {
    if (leaf.grad().defined()) {
      CopyToHost(leaf.grad(), out);
    } else {
      out->assign(static_cast<size_t>(leaf.numel()), 0.0f);  // Unused leaf.
    }
  };
  if (dense_leaves.size() == 1 && dense_leaves[0].leaf.numel() == NumDenseParams()) {
    grad_of(dense_leaves[0].leaf, &result->dense_grad);
  } else {
    result->dense_grad.assign(static_cast<size_t>(NumDenseParams()), 0.0f);
    for (const DenseLeaf& d : dense_leaves) {
      if (d.leaf.grad().defined()) CopyToHost(d.leaf.grad(), result->dense_grad.data() + d.offset);
    }
  }
  for (size_t t = 0; t < rows.size(); ++t) grad_of(rows[t], &result->table_grads[t]);
  if (fp16) {
    std::vector<std::vector<float>*> grads = {&result->dense_grad};
    for (std::vector<float>& g : result->table_grads) grads.push_back(&g);
    if (!loss_scaler_.Unscale(grads)) {
      LOG_EVERY_N(WARNING, 100) << "fp16 gradients overflowed: step skipped (zero gradients), "
                                << "loss scale now " << loss_scaler_.scale();
    }
  }
}

absl::Status TorchModel::ForwardBackward(const ModelInputs& in, bool backward, StepResult* result) {
  if (absl::Status s = ValidateModelInputs(spec_, NumDenseParams(), in); !s.ok()) return s;
  try {
    Run(in, backward, result);
  } catch (const c10::Error& e) {
    return absl::InternalError(
        absl::StrCat("LibTorch failed in the model step: ", e.what_without_backtrace()));
  } catch (const std::exception& e) {
    return absl::InternalError(absl::StrCat("model step failed: ", e.what()));
  }
  return absl::OkStatus();
}

}  // namespace shardps

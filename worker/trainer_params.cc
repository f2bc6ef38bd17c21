#include "worker/trainer_params.h"

#include <algorithm>
#include <utility>

namespace shardps {
namespace trainer_internal {

StepParams::StepParams(ParamStore* store, const Model* model, uint32_t dense_table, uint32_t chunk,
                       float compression_ratio)
    : store_(store),
      model_(model),
      dense_table_(dense_table),
      chunk_(chunk),
      num_chunks_((model->NumDenseParams() + chunk - 1) / chunk) {
  for (uint64_t c = 0; c < num_chunks_; ++c) chunk_keys_.push_back(c);
  if (compression_ratio > 0.0f) {
    compressor_ = std::make_unique<DenseCompressor>(compression_ratio, model->NumDenseParams());
  }
}

std::unique_ptr<PsClient::Op> StepParams::StartPull(Prepared* p, PullPurpose purpose,
                                                    uint64_t step) {
  std::vector<TablePull> pulls;
  const auto& tables = model_->spec().tables;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (p->unique_keys[t].empty()) continue;
    pulls.push_back({tables[t].id, static_cast<uint32_t>(tables[t].dim), p->unique_keys[t].data(),
                     p->unique_keys[t].size(), p->rows[t].data()});
  }
  p->dense_params.resize(num_chunks_ * chunk_);
  pulls.push_back({dense_table_, chunk_, chunk_keys_.data(), num_chunks_, p->dense_params.data()});
  return store_->Pull(std::move(pulls), purpose, step);
}

ModelInputs StepParams::Inputs(Prepared* p) const {
  p->table_rows.clear();
  for (const auto& rows : p->rows) p->table_rows.push_back({rows});
  p->field_bags.clear();
  for (size_t f = 0; f < p->indices.size(); ++f) {
    p->field_bags.push_back({p->indices[f], p->batch.fields[f].offsets});
  }
  ModelInputs in;
  in.batch_size = p->batch.size;
  in.labels = p->batch.labels;
  in.dense = p->batch.dense;
  in.dense_params = absl::MakeConstSpan(p->dense_params.data(), model_->NumDenseParams());
  in.tables = p->table_rows;
  in.fields = p->field_bags;
  return in;
}

std::unique_ptr<PsClient::Op> StepParams::StartPush(Prepared* p, uint64_t step, float lr_scale,
                                                    const StepResult& r,
                                                    std::vector<float>* dense_buf) {
  PrepareDense(r, dense_buf);
  return SendPush(p, step, lr_scale, r, *dense_buf);
}

void StepParams::PrepareDense(const StepResult& r, std::vector<float>* dense_buf) {
  dense_buf->resize(num_chunks_ * chunk_);  // The tail past the model stays 0.
  if (compressor_) {
    compressor_->Compress(r.dense_grad, dense_buf->data());
  } else {
    std::copy(r.dense_grad.begin(), r.dense_grad.end(), dense_buf->begin());
  }
}

std::unique_ptr<PsClient::Op> StepParams::SendPush(Prepared* p, uint64_t step, float lr_scale,
                                                   const StepResult& r,
                                                   const std::vector<float>& dense_buf) {
  std::vector<TablePush> pushes;
  const auto& tables = model_->spec().tables;
  for (size_t t = 0; t < tables.size(); ++t) {
    if (p->unique_keys[t].empty()) continue;
    pushes.push_back({tables[t].id, static_cast<uint32_t>(tables[t].dim), p->unique_keys[t].data(),
                      p->unique_keys[t].size(), r.table_grads[t].data()});
  }
  TablePush dense{dense_table_, chunk_, chunk_keys_.data(), num_chunks_, dense_buf.data()};
  dense.sparse = compressor_ != nullptr;
  pushes.push_back(dense);
  return store_->Push(std::move(pushes), step, lr_scale);
}

absl::Status StepParams::InitDense(const float* init) {
  return store_->InitRows(dense_table_, chunk_, chunk_keys_.data(), num_chunks_, init);
}

}  // namespace trainer_internal
}  // namespace shardps

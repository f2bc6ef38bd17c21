// Tests of models: a batch that owns its buffers and lends them out as
// ModelInputs (model.h). Not thread-safe; Inputs() points into the batch.
#ifndef SHARDPS_WORKER_MODEL_TEST_BATCH_H_
#define SHARDPS_WORKER_MODEL_TEST_BATCH_H_

#include <cstdint>
#include <vector>

#include "worker/model/model.h"

namespace shardps::testing {

struct Batch {
  int64_t batch_size = 0;
  std::vector<float> labels, dense, params;
  std::vector<std::vector<float>> rows;       // Per table.
  std::vector<std::vector<int64_t>> indices;  // Per field.
  std::vector<std::vector<int64_t>> offsets;  // Per field.
  std::vector<TableRows> table_views;
  std::vector<FieldBag> field_views;

  ModelInputs Inputs() {
    table_views.clear();
    for (const auto& r : rows) table_views.push_back({r});
    field_views.clear();
    for (size_t f = 0; f < indices.size(); ++f) field_views.push_back({indices[f], offsets[f]});
    ModelInputs in;
    in.batch_size = batch_size;
    in.labels = labels;
    in.dense = dense;
    in.dense_params = params;
    in.tables = table_views;
    in.fields = field_views;
    return in;
  }
};

}  // namespace shardps::testing

#endif  // SHARDPS_WORKER_MODEL_TEST_BATCH_H_

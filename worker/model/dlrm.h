// DLRM (Naumov et al. 2019) over pulled embedding rows and a flat dense
// parameter buffer:
//
//   x     = BottomMLP(dense features)          ReLU after every layer; the
//                                              last size is the embedding dim
//   e_f   = pool(rows of field f's bag)        sum (or mean) per field
//   T     = [x, e_1 .. e_F]                    F + 1 vectors of dim d
//   z     = <T_i, T_j> for i < j               upper triangle, no diagonal
//                                              (PairwiseDots, interaction.h)
//   logit = TopMLP([x, z])                     ReLU on hidden layers, then a
//                                              1-wide linear layer
//         + sum_f w_f                          with a wide table (ModelSpec::
//                                              wide_table, dim 1): the sum of
//                                              its fields' rows, which are
//                                              not in T (the "wide" part of
//                                              Wide & Deep / DeepFM)
//   loss  = mean BCE-with-logits
//
// The embedding vectors enter T grouped by table (tables in spec order, the
// fields of each table in field order): the interaction is symmetric, the
// order only fixes where each pair lands in z.
//
// Dense parameter layout (DenseLayout): the bottom layers, then the top
// layers, then the final 1-wide layer; each weight [out, in] row-major
// followed by its bias.
//
// Thread-safety: as Model (one instance per thread).
#ifndef SHARDPS_WORKER_MODEL_DLRM_H_
#define SHARDPS_WORKER_MODEL_DLRM_H_

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "worker/model/torch_model.h"

namespace shardps {

class Dlrm final : public TorchModel {
 public:
  // INVALID_ARGUMENT if the spec does not describe a DLRM: no dense
  // features, an empty bottom MLP, a zero layer size, or a table whose dim
  // differs from the bottom MLP's last size.
  static absl::StatusOr<std::unique_ptr<Dlrm>> Create(const ModelSpec& spec,
                                                      const ModelOptions& options);

  std::string DebugString() const override;

 protected:
  torch::Tensor Logits(const ForwardInputs& x) override;

 private:
  Dlrm(const ModelSpec& spec, const ModelOptions& options);

  // Constant after construction.
  std::vector<int> bottom_;  // Layer indices in layout().
  std::vector<int> top_;     // Includes the final 1-wide layer.
  int64_t num_vectors_ = 0;  // 1 + number of fields.
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_MODEL_DLRM_H_

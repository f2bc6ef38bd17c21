// The families of synthetic data ps_datagen writes (--family=NAME): ground
// truths that differ where real CTR data sets differ, so that a default
// chosen on one is checked on the others. Every family has the form of
// worker/data/synthetic.h's model:
//
//   logit = bias + sum_j beta_j log(1 + max(I_j, 0))                (dense)
//         + sum_f effect_f(C_f, t)                          (first order)
//         + sum_{(a,b) in pairs} tau <u_a(C_a), u_b(C_b)> / sqrt(rank)
//         + sum_{(a,b) in cross_pairs} cross_(a,b)(C_a, C_b)     (crosses)
//   p = sigmoid(logit); label ~ Bernoulli(label_noise + (1 - 2 label_noise) p)
//
// with effect_f(id, t) = effect_std (cos(drift t) e0(id) + sin(drift t)
// e1(id)), e0, e1 ~ N(0, 1) hashed from the id, t = the line's position in
// the training files (0 .. 1; the eval split is at t = 1, where training
// ends), and cross_(a,b)(x, y) ~ N(0, cross_std^2) for a cross_density
// share of the id pairs, else 0. The families:
//
//   default  the generator the project was tuned on: vocabularies
//            10 .. 1e6 (log-spaced), first-order 0.25, low-rank pairs
//            tau 0.5, click rate about 0.20.
//   criteo   Criteo's cardinalities (the Kaggle set's 26 fields: 3 .. 10.1M
//            ids, four fields with millions, several with 3-27), strong
//            first-order effects (0.45), weak pairs (tau 0.15), click rate
//            about 0.26: data where per-id effects are most of the signal.
//   crosses  weak first order (0.15), no low-rank pairs, sparse strong
//            crosses: 6 field pairs of small vocabularies where 10% of the
//            id pairs carry an effect of N(0, 1.2^2).
//   noisy    Criteo's cardinalities, a click rate of about 0.05 and 1% of
//            labels flipped (label noise).
//   drift    first-order effects that turn by 1 radian over the file order
//            (start and end correlate by cos 1 = 0.54), so the newest lines
//            say most about the eval split.
//
// Thread-safety: the families are constants.
#ifndef SHARDPS_WORKER_DATA_SYNTHETIC_FAMILY_H_
#define SHARDPS_WORKER_DATA_SYNTHETIC_FAMILY_H_

#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "worker/data/fields.h"

namespace shardps {
namespace data {

struct SyntheticFamily {
  std::string name;
  uint32_t vocab[kCriteoNumCategorical] = {};  // Ids per field.
  double bias = 0;
  double beta_std = 0;    // Dense weights.
  double effect_std = 0;  // First-order per-id effects.
  double tau = 0;         // Low-rank pairwise interactions over `pairs`.
  std::vector<std::pair<int, int>> pairs;
  std::vector<std::pair<int, int>> cross_pairs;  // Sparse strong crosses.
  double cross_density = 0;
  double cross_std = 0;
  double label_noise = 0;  // Share of labels flipped.
  double drift = 0;        // Radians the first-order effects turn through.
};

// The family named `name`, or nullptr.
const SyntheticFamily* FindSyntheticFamily(absl::string_view name);
// Every family's name, "default" first.
std::vector<std::string> SyntheticFamilyNames();

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_SYNTHETIC_FAMILY_H_

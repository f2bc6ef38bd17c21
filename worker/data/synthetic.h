// Synthetic Criteo-format data from a known ground-truth model, so that the
// best achievable AUC and logloss of a data set are known.
//
// What follows is the "default" family; the others (--family, criteo,
// crosses, noisy, drift) change its parameters and add terms:
// worker/data/synthetic_family.h.
//
// The ground truth (all parameters fixed here; the random parts are drawn
// from `seed`, so one seed is one world, and they are NOT tuned to make any
// model look good):
//
//   logit = kBias + sum_j beta_j * log(1 + max(I_j, 0))           (dense part)
//                 + sum_f effect_f(C_f)                      (categorical part)
//                 + sum_{(a,b) in kPairs} tau * <u_a(C_a), u_b(C_b)> / sqrt(r)
//   label ~ Bernoulli(sigmoid(logit))
//
// Integer features I_1..I_13 (count-like): I_j = floor(exp(N(mu_j, s_j^2)))
//   - 1 clipped at 0, with mu_j = 0.5 + 0.3 (j mod 7), s_j = 1 + 0.1 (j mod 4)
//   (j 0-based); missing with probability 0.04 ((3j) mod 11) (0 .. 0.4); I_2
//   is -1, -2 or -3 with probability 0.1 (as in Criteo). beta_j ~ N(0, 0.2^2).
//   A missing integer contributes as 0, as the reader transforms it.
// Categorical fields C_1..C_26: vocabulary V_f = round(10^(1 + 5 f / 25))
//   (10 .. 1e6); ids are Zipf(s_f) ranks 1..V_f with s_f = 1.05 +
//   0.01 ((7 f) mod 21) (1.05 .. 1.25), mapped to 8-hex-digit ids by a
//   seeded bijection of 32-bit values; missing with probability
//   0.05 ((5 f) mod 9) (0 .. 0.4). effect_f(id) ~ N(0, 0.25^2), drawn by
//   hashing (seed, f, id), so no vocabulary table is stored; a missing value
//   has its own effect.
// Interactions: kPairs = (C1,C2), (C3,C6), (C4,C9), (C7,C13), rank r = 4
//   factors u(id) ~ N(0, 1)^r hashed from (seed, pair, side, id), tau = 0.5.
// kBias = -1.3. The click rate depends on the seed through beta (0.20 for
//   the default seed 2024; Criteo has 0.26); best.txt reports it.
//
// Outputs in out_dir: train.tsv (or train-NNNNN-of-MMMMM.tsv with shards),
// eval.tsv (".gz" appended with gzip), and best.txt / best.json with, on the
// eval split: best_auc and best_logloss (of the true probabilities),
// dense_only_auc (AUC of the dense part of the logit alone: the Bayes ranking
// of a model that sees only the integer features), the positive rate and
// the logloss of always predicting it. Files are written under temporary
// names and renamed; best.txt is written last, so its presence means the
// data set is complete.
//
// Deterministic: the same options give byte-identical files (train lines
// do not depend on the shard count).
//
// Thread-safety: pure functions of their arguments (they write files).
#ifndef SHARDPS_WORKER_DATA_SYNTHETIC_H_
#define SHARDPS_WORKER_DATA_SYNTHETIC_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/zipf.h"
#include "proto/config.pb.h"
#include "worker/data/fields.h"
#include "worker/data/synthetic_family.h"

namespace shardps {
namespace data {

struct SyntheticOptions {
  std::string out_dir;             // Created if missing.
  std::string family = "default";  // synthetic_family.h
  uint64_t train_lines = 400000;
  uint64_t eval_lines = 50000;
  uint64_t seed = 2024;
  bool gzip = false;
  uint32_t train_shards = 1;
};

struct SyntheticSummary {
  std::string family = "default";
  std::vector<std::string> train_files;
  std::vector<std::string> eval_files;
  uint64_t seed = 0;
  uint64_t train_lines = 0;
  uint64_t eval_lines = 0;
  double train_positive_rate = 0;
  double eval_positive_rate = 0;
  double best_auc = 0;          // Eval, true probabilities.
  double best_logloss = 0;      // Eval, true probabilities.
  double dense_only_auc = 0;    // Eval, dense part of the logit.
  double constant_logloss = 0;  // Eval, predicting the eval positive rate.
};

// One example drawn from the ground truth.
struct SyntheticExample {
  float label = 0;
  int64_t ints[kCriteoNumDense] = {};
  bool int_missing[kCriteoNumDense] = {};
  uint32_t cats[kCriteoNumCategorical] = {};
  bool cat_missing[kCriteoNumCategorical] = {};
  double logit = 0;        // The true logit.
  double prob = 0;         // The true click probability (label noise included).
  double dense_logit = 0;  // Its dense part (without the bias).
};

// The ground-truth model of one seed and family.
class SyntheticModel {
 public:
  explicit SyntheticModel(uint64_t seed);  // The default family.
  SyntheticModel(uint64_t seed, const SyntheticFamily& family);
  // Draws an example using the random stream `*state` (a splitmix64 state,
  // advanced), at `position` in the training files (0 .. 1; drift).
  void Sample(uint64_t* state, SyntheticExample* example, double position = 1) const;
  // The true logit of `example`'s features at `position`.
  double Logit(const SyntheticExample& example, double position) const;
  // The effect of the cross of ids `a` and `b` of cross pair `pair`: 0 but
  // for a cross_density share of the id pairs.
  double CrossEffect(int pair, uint64_t a, uint64_t b) const;
  // Appends the Criteo TSV line of `example` (with '\n') to `out`.
  static void AppendLine(const SyntheticExample& example, std::string* out);

 private:
  double CategoricalLogit(const SyntheticExample& e, double position) const;
  uint64_t seed_;
  SyntheticFamily family_;
  double beta_[kCriteoNumDense];
  ZipfSampler samplers_[kCriteoNumCategorical];
};

// Writes a data set (see above). INVALID_ARGUMENT on bad options (no
// out_dir, zero shards), FAILED_PRECONDITION / DATA_LOSS on I/O errors
// (naming the file).
absl::StatusOr<SyntheticSummary> GenerateSynthetic(const SyntheticOptions& options);

// Reads out_dir/best.txt of a complete data set (file lists included).
// NOT_FOUND if there is none, INVALID_ARGUMENT if it does not parse.
absl::StatusOr<SyntheticSummary> ReadSyntheticSummary(const std::string& dir);

// The data files of a job.
struct DataFiles {
  std::vector<std::string> train;
  std::vector<std::string> eval;
  SyntheticSummary synthetic;  // Filled when the data is synthetic.
};

// data.train_files / eval_files when train_files is set; otherwise the
// synthetic data set in data.synthetic_dir with synthetic_train_lines,
// synthetic_eval_lines and synthetic_seed (0 = the SyntheticOptions
// defaults: 400000, 50000, 2024), reused if best.txt there matches and generated otherwise
// (safe when several processes do it at once). INVALID_ARGUMENT if there is
// neither; generation errors as GenerateSynthetic.
absl::StatusOr<DataFiles> ResolveDataFiles(const DataConfig& data);

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_SYNTHETIC_H_

#include "worker/data/synthetic_family.h"

#include <cmath>

namespace shardps {
namespace data {
namespace {

// The Criteo Kaggle (display advertising challenge) set's cardinalities of
// C1..C26.
constexpr uint32_t kCriteoVocab[kCriteoNumCategorical] = {
    1460, 583,   10131227, 2202608, 305,  24,   12517, 633,     3,  93145, 5683,   8351593, 3194,
    27,   14992, 5461306,  10,      5652, 2173, 4,     7046547, 18, 15,    286181, 105,     142572};

const std::vector<std::pair<int, int>> kDefaultPairs = {{0, 1}, {2, 5}, {3, 8}, {6, 12}};

SyntheticFamily Default() {
  SyntheticFamily f;
  f.name = "default";
  for (int i = 0; i < kCriteoNumCategorical; ++i) {
    f.vocab[i] = static_cast<uint32_t>(std::lround(std::pow(10.0, 1 + 5.0 * i / 25)));
  }
  f.bias = -1.3;
  f.beta_std = 0.2;
  f.effect_std = 0.25;
  f.tau = 0.5;
  f.pairs = kDefaultPairs;
  return f;
}

SyntheticFamily WithCriteoVocab(SyntheticFamily f) {
  for (int i = 0; i < kCriteoNumCategorical; ++i) f.vocab[i] = kCriteoVocab[i];
  return f;
}

std::vector<SyntheticFamily> MakeFamilies() {
  std::vector<SyntheticFamily> out;
  out.push_back(Default());

  SyntheticFamily criteo = WithCriteoVocab(Default());
  criteo.name = "criteo";
  criteo.bias = -1.0;
  criteo.effect_std = 0.45;
  criteo.tau = 0.15;
  out.push_back(criteo);

  SyntheticFamily crosses = Default();
  crosses.name = "crosses";
  crosses.bias = -1.4;
  crosses.effect_std = 0.15;
  crosses.tau = 0;
  crosses.pairs.clear();
  crosses.cross_pairs = {{0, 3}, {1, 5}, {2, 7}, {4, 9}, {6, 10}, {8, 11}};
  crosses.cross_density = 0.1;
  crosses.cross_std = 1.2;
  out.push_back(crosses);

  SyntheticFamily noisy = WithCriteoVocab(Default());
  noisy.name = "noisy";
  noisy.bias = -3.4;
  noisy.effect_std = 0.35;
  noisy.tau = 0.3;
  noisy.label_noise = 0.01;
  out.push_back(noisy);

  SyntheticFamily drift = Default();
  drift.name = "drift";
  drift.effect_std = 0.35;
  drift.tau = 0.4;
  drift.drift = 1.0;
  out.push_back(drift);
  return out;
}

const std::vector<SyntheticFamily>& Families() {
  static const auto* const families = new std::vector<SyntheticFamily>(MakeFamilies());
  return *families;
}

}  // namespace

const SyntheticFamily* FindSyntheticFamily(absl::string_view name) {
  for (const SyntheticFamily& f : Families()) {
    if (f.name == name) return &f;
  }
  return nullptr;
}

std::vector<std::string> SyntheticFamilyNames() {
  std::vector<std::string> names;
  for (const SyntheticFamily& f : Families()) names.push_back(f.name);
  return names;
}

}  // namespace data
}  // namespace shardps

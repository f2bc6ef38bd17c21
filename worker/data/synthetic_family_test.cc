// The families of ps_datagen (synthetic_family.h): each is deterministic by
// seed, writes its best achievable AUC, and has the property it is named
// for.
#include "worker/data/synthetic_family.h"

#include <cmath>
#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "worker/data/synthetic.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::ReadAll;
using testing::TempPath;

SyntheticSummary Generate(const std::string& family, uint64_t seed, const std::string& dir,
                          uint64_t train_lines = 3000) {
  SyntheticOptions o;
  o.out_dir = TempPath(dir);
  o.family = family;
  o.seed = seed;
  o.train_lines = train_lines;
  o.eval_lines = 2000;
  auto summary = GenerateSynthetic(o);
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? *summary : SyntheticSummary();
}

// Examples of `family` drawn like the generator does, at `position`.
std::vector<SyntheticExample> Draw(const std::string& family, int n, double position = 1) {
  const SyntheticModel model(2024, *FindSyntheticFamily(family));
  uint64_t state = 99;
  std::vector<SyntheticExample> out(n);
  for (SyntheticExample& e : out) model.Sample(&state, &e, position);
  return out;
}

TEST(SyntheticFamilyTest, EveryFamilyIsDeterministicBySeedAndWritesItsBest) {
  ASSERT_EQ(SyntheticFamilyNames().front(), "default");
  ASSERT_EQ(SyntheticFamilyNames().size(), 5u);
  for (const std::string& family : SyntheticFamilyNames()) {
    SCOPED_TRACE(family);
    const SyntheticSummary a = Generate(family, 7, family + "_a");
    const SyntheticSummary b = Generate(family, 7, family + "_b");
    const SyntheticSummary c = Generate(family, 8, family + "_c");
    EXPECT_EQ(ReadAll(a.train_files[0]), ReadAll(b.train_files[0]));
    EXPECT_EQ(ReadAll(a.eval_files[0]), ReadAll(b.eval_files[0]));
    EXPECT_NE(ReadAll(a.train_files[0]), ReadAll(c.train_files[0]));
    EXPECT_EQ(a.best_auc, b.best_auc);
    EXPECT_GT(a.best_auc, 0.7);                      // Learnable...
    EXPECT_GT(a.best_auc, a.dense_only_auc + 0.05);  // ...mostly from the ids.
    EXPECT_LT(a.best_logloss, a.constant_logloss);
    auto read = ReadSyntheticSummary(TempPath(family + "_a"));
    ASSERT_TRUE(read.ok()) << read.status();
    EXPECT_EQ(read->family, family);
  }
  // The families differ from each other.
  EXPECT_NE(ReadAll(TempPath("default_a/train.tsv")), ReadAll(TempPath("criteo_a/train.tsv")));
  EXPECT_NE(ReadAll(TempPath("default_a/train.tsv")), ReadAll(TempPath("drift_a/train.tsv")));
}

TEST(SyntheticFamilyTest, AnUnknownFamilyIsRefusedByName) {
  SyntheticOptions o;
  o.out_dir = TempPath("unknown");
  o.family = "criteo2";
  auto summary = GenerateSynthetic(o);
  EXPECT_EQ(summary.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(summary.status().message().find("criteo2"), std::string::npos);
  EXPECT_NE(summary.status().message().find("default, criteo, crosses, noisy, drift"),
            std::string::npos);
}

TEST(SyntheticFamilyTest, CriteoHasFieldsOfThreeToTenIdsAndFieldsOfMillions) {
  const std::vector<SyntheticExample> ex = Draw("criteo", 20000);
  std::map<int, std::set<uint32_t>> ids;
  for (const SyntheticExample& e : ex) {
    for (int f = 0; f < kCriteoNumCategorical; ++f) {
      if (!e.cat_missing[f]) ids[f].insert(e.cats[f]);
    }
  }
  EXPECT_EQ(ids[8].size(), 3u);    // C9: 3 ids.
  EXPECT_EQ(ids[19].size(), 4u);   // C20: 4.
  EXPECT_EQ(ids[16].size(), 10u);  // C17: 10.
  // C3 (10.1M ids, Zipf 1.19): thousands of distinct ids in 20000 lines
  // (4592 here), against C9's 3.
  EXPECT_GT(ids[2].size(), 4000u);
  const SyntheticFamily& criteo = *FindSyntheticFamily("criteo");
  int millions = 0, small = 0;
  for (uint32_t v : criteo.vocab) {
    millions += v >= 1000000;
    small += v <= 10;
  }
  EXPECT_EQ(millions, 5);
  EXPECT_EQ(small, 3);
  // The default family's largest field has 1e6.
  EXPECT_EQ(FindSyntheticFamily("default")->vocab[25], 1000000u);
}

TEST(SyntheticFamilyTest, ClickRatesDifferAndNoisyIsRareAndNoisy) {
  auto rate = [](const std::string& family) {
    double pos = 0;
    for (const SyntheticExample& e : Draw(family, 20000)) pos += e.label;
    return pos / 20000;
  };
  EXPECT_GT(rate("criteo"), 0.2);
  EXPECT_LT(rate("criteo"), 0.35);
  EXPECT_LT(rate("noisy"), 0.08);
  EXPECT_GT(rate("noisy"), 0.02);
  // Noise: no example is certain; the probability is at least 1%.
  for (const SyntheticExample& e : Draw("noisy", 2000)) {
    EXPECT_GE(e.prob, 0.01 - 1e-12);
    EXPECT_LE(e.prob, 0.99 + 1e-12);
  }
}

TEST(SyntheticFamilyTest, DriftChangesTheFirstOrderEffectsOverTheFileOrderOthersDoNot) {
  const SyntheticModel drift(2024, *FindSyntheticFamily("drift"));
  const SyntheticModel fixed(2024, *FindSyntheticFamily("default"));
  double sum_xy = 0, sum_xx = 0, sum_yy = 0;
  for (const SyntheticExample& e : Draw("drift", 5000)) {
    EXPECT_EQ(fixed.Logit(e, 0), fixed.Logit(e, 1));
    const double x = drift.Logit(e, 0) - e.dense_logit, y = drift.Logit(e, 1) - e.dense_logit;
    sum_xy += x * y;
    sum_xx += x * x;
    sum_yy += y * y;
  }
  // Start and end: correlated (the effects turn by 1 radian), not the same.
  const double corr = sum_xy / std::sqrt(sum_xx * sum_yy);
  EXPECT_GT(corr, 0.3);
  EXPECT_LT(corr, 0.9);
}

TEST(SyntheticFamilyTest, CrossesAreSparseAndStrong) {
  const SyntheticModel crosses(2024, *FindSyntheticFamily("crosses"));
  const SyntheticModel fixed(2024, *FindSyntheticFamily("default"));
  int nonzero = 0;
  double sum_sq = 0;
  for (uint64_t a = 0; a < 100; ++a) {
    for (uint64_t b = 0; b < 100; ++b) {
      const double c = crosses.CrossEffect(0, a, b);
      nonzero += c != 0;
      sum_sq += c * c;
    }
  }
  EXPECT_GT(nonzero, 800);  // 10% of 10000 pairs.
  EXPECT_LT(nonzero, 1200);
  EXPECT_GT(std::sqrt(sum_sq / nonzero), 1.0);  // N(0, 1.2^2).
  EXPECT_EQ(FindSyntheticFamily("default")->cross_pairs.size(), 0u);
  EXPECT_EQ(FindSyntheticFamily("crosses")->cross_pairs.size(), 6u);
}

}  // namespace
}  // namespace data
}  // namespace shardps

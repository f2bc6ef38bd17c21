// Convergence: the default job's model, trained in local mode on 3.2M lines
// of generated data (one epoch), reaches an AUC within 0.014 of the data
// set's best achievable AUC (the AUC of the generator's true probabilities
// on the same held-out lines). Local mode is the baseline every PS mode is
// compared against in e2e_test. Measured: 0.8558 against 0.8668 (gap
// 0.0110 with the first-order term; 0.0127 without it, 0.0145 before the
// embeddings' initial accumulator, which this bound refuses). Local mode
// with one intra-op thread is deterministic, so the gap is the same on every
// run of a machine.
//
// Other data: on two more ps_datagen families (worker/data/
// synthetic_family.h), 200k training lines, one epoch in local mode, the
// default model stays above a floor set between the hashed logistic
// regression's AUC minus a margin and well below what it measured
// (docs/benchmarks.md, "Defaults on other data"): it learns there, and
// does not fall far below logistic regression.
#include <fstream>
#include <sstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"

namespace shardps {
namespace {

using testing::ReadFile;

constexpr double kMaxGap = 0.014;
// Floors of the families' tests (see the top). Measured (local mode, one
// intra-op thread, deterministic): criteo 0.8542, crosses 0.7664; the
// hashed LR (bench/hashed_lr.py, best of lr 0.1 and 0.03, 1-3 epochs)
// reaches 0.8556 and 0.7553 there, chance is 0.5. Each floor is about 0.01
// under the measured AUC and about that much under the LR at most.
constexpr double kCriteoFloor = 0.845;
constexpr double kCrossesFloor = 0.750;

TEST(QualityTest, DefaultModelReachesTheBestAchievableAucWithin0014) {
  const std::string data = ::testing::TempDir() + "/quality_data";
  ASSERT_TRUE(testing::MakeSyntheticData(data, 3200000, 50000, 16).ok());
  const std::string config = ::testing::TempDir() + "/quality.pbtxt";
  std::ofstream(config) << absl::StrReplaceAll(
      ReadFile(testing::RunfilePath("configs/default.pbtxt")),
      {{"synthetic_dir: \"data/synthetic\"", "synthetic_dir: \"" + data + "\""}});
  auto result = testing::RunLocal(config, {}, ::testing::TempDir() + "/quality.log");
  ASSERT_TRUE(result.ok()) << result.status();
  double best = 0;
  std::istringstream best_txt(ReadFile(data + "/best.txt"));
  for (std::string key, value; best_txt >> key >> value;) {
    if (key == "best_auc") best = std::stod(value);
  }
  ASSERT_GT(best, 0.8);
  const double auc = std::stod((*result)["eval_auc"]);
  std::printf("trained AUC %.4f, best achievable %.4f, gap %.4f\n", auc, best, best - auc);
  EXPECT_LE(best - auc, kMaxGap) << "trained AUC " << auc << ", best achievable " << best;
}

// One epoch of the default config in local mode on `family`'s data (200k
// training lines, 50k held out): the test AUC.
double DefaultAucOnFamily(const std::string& family) {
  const std::string data = ::testing::TempDir() + "/quality_" + family;
  testing::Subprocess gen;
  EXPECT_TRUE(gen.Start({testing::RunfilePath("worker/data/ps_datagen"), "--out_dir=" + data,
                         "--family=" + family, "--train_lines=200000", "--eval_lines=50000",
                         "--train_shards=8"},
                        data + ".log")
                  .ok());
  auto code = gen.Wait(absl::Minutes(10));
  EXPECT_TRUE(code.ok() && *code == 0) << "ps_datagen: " << ReadFile(data + ".log");
  const std::string config = ::testing::TempDir() + "/quality_" + family + ".pbtxt";
  std::ofstream(config) << absl::StrReplaceAll(
      ReadFile(testing::RunfilePath("configs/default.pbtxt")),
      {{"synthetic_dir: \"data/synthetic\"", "synthetic_dir: \"" + data + "\""},
       {"synthetic_train_lines: 400000", "synthetic_train_lines: 200000"}});
  auto result = testing::RunLocal(config, {}, ::testing::TempDir() + "/quality_" + family + ".log");
  EXPECT_TRUE(result.ok()) << result.status();
  if (!result.ok()) return 0;
  const double auc = std::stod((*result)["eval_auc"]);
  std::printf("family %s: trained AUC %.4f\n", family.c_str(), auc);
  return auc;
}

TEST(QualityTest, DefaultModelLearnsTheCriteoFamily) {
  EXPECT_GT(DefaultAucOnFamily("criteo"), kCriteoFloor);
}

TEST(QualityTest, DefaultModelLearnsTheCrossesFamily) {
  EXPECT_GT(DefaultAucOnFamily("crosses"), kCrossesFloor);
}

}  // namespace
}  // namespace shardps

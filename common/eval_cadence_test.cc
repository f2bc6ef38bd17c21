#include "common/eval_cadence.h"

#include <zlib.h>

#include <fstream>
#include <string>

#include "common/config.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

std::string WriteFile(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

std::string WriteGzip(const std::string& name, const std::string& text) {
  const std::string path = ::testing::TempDir() + "/" + name;
  gzFile gz = gzopen(path.c_str(), "wb");
  gzwrite(gz, text.data(), static_cast<unsigned>(text.size()));
  gzclose(gz);
  return path;
}

TEST(EvalCadenceTest, CountsLinesOfPlainAndGzipFilesAndALastLineWithoutNewline) {
  const std::string a = WriteFile("a.tsv", "1\n2\n3\n");
  const std::string b = WriteGzip("b.tsv.gz", "1\n2\n3\n4\n5");
  auto lines = CountLines({a, b});
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(*lines, 8u);
  auto missing = CountLines({a, ::testing::TempDir() + "/missing.tsv"});
  EXPECT_EQ(missing.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(missing.status().message().find("missing.tsv"), std::string::npos);
}

TEST(EvalCadenceTest, GeneratedDataTakesItsLinesFromBestTxtElseFromTheConfig) {
  const std::string dir = ::testing::TempDir() + "/gen";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  WriteFile("gen/best.txt", "seed 2024\ntrain_lines 400000\neval_lines 50000\n");
  DataConfig data;
  data.set_synthetic_dir(dir);
  auto lines = TrainingLines(data);
  ASSERT_TRUE(lines.ok()) << lines.status();
  EXPECT_EQ(*lines, 400000u);
  // Not generated (yet): the size the workers will generate.
  data.set_synthetic_dir(::testing::TempDir() + "/nothing_here");
  data.set_synthetic_train_lines(20000);
  EXPECT_EQ(*TrainingLines(data), 20000u);
  data.clear_synthetic_train_lines();
  EXPECT_EQ(*TrainingLines(data), kDefaultSyntheticTrainLines);
}

TEST(EvalCadenceTest, HalfAnEpochOfTheReadmeJobIs391Clocks) {
  const std::string dir = ::testing::TempDir() + "/readme";
  ASSERT_EQ(system(("mkdir -p " + dir).c_str()), 0);
  WriteFile("readme/best.txt", "train_lines 400000\n");
  auto config = ParseJobConfig(
      "tables { id: 1 name: \"emb\" dim: 8 optimizer { sgd { learning_rate: 0.1 } } }\n"
      "data { synthetic_dir: \"" +
          dir +
          "\" }\n"
          "training { batch_size: 256 eval_every_epochs: 0.5 }\n"
          "cluster { num_workers: 2 }\ncheckpoint { dir: \"/c\" }\n",
      "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  uint64_t clocks = 0;
  ASSERT_TRUE(ResolveEvalEveryEpochs(&*config, &clocks).ok());
  EXPECT_EQ(clocks, 782u);  // ceil(400000 / 512).
  EXPECT_EQ(config->training().eval_every_steps(), 391u);
  EXPECT_EQ(config->training().eval_every_epochs(), 0);
  EXPECT_TRUE(FinalizeJobConfig(&*config).ok());  // Still valid: one of the two.
}

TEST(EvalCadenceTest, ATinyFractionIsOneClockAndNoEpochsLeavesTheConfigAlone) {
  JobConfig config;
  config.mutable_training()->set_batch_size(256);
  config.mutable_cluster()->set_num_workers(1);
  EXPECT_EQ(ClocksPerEpoch(config, 1000), 4u);
  config.mutable_data()->add_train_files(WriteFile("t.tsv", "1\n2\n3\n"));
  config.mutable_training()->set_eval_every_epochs(0.01);
  ASSERT_TRUE(ResolveEvalEveryEpochs(&config).ok());
  EXPECT_EQ(config.training().eval_every_steps(), 1u);
  config.mutable_training()->set_eval_every_steps(7);
  ASSERT_TRUE(ResolveEvalEveryEpochs(&config).ok());
  EXPECT_EQ(config.training().eval_every_steps(), 7u);
}

}  // namespace
}  // namespace shardps

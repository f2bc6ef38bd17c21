// PredictionWriter fed by the real CriteoReader: one output line per input
// line, "nan" exactly where the reader skipped a malformed line.
#include "worker/export/prediction_writer.h"

#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/file_io.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "worker/data/criteo_reader.h"

namespace shardps {
namespace exporter {
namespace {

JobConfig Config() {
  auto config = ParseJobConfig(R"pb(
    name: "score"
    tables {
      id: 1 name: "categorical" kind: SPARSE dim: 4
      optimizer { sgd { learning_rate: 0.1 } }
    }
    tables { id: 2 name: "mlp" kind: DENSE optimizer { sgd { learning_rate: 0.1 } } }
    model { kind: DLRM bottom_mlp: [4] top_mlp: [4] dense_table: "mlp" }
    data { format: CRITEO synthetic_dir: "/nonexistent" error_budget: 10 }
    training { batch_size: 4 }
  )pb",
                               "test.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// A well-formed Criteo line with label `label` and integer feature `i`.
std::string Good(int label, int i) {
  std::string line = absl::StrCat(label);
  for (int c = 0; c < 13; ++c) absl::StrAppend(&line, "\t", c == 0 ? i : c);
  for (int c = 0; c < 26; ++c) absl::StrAppend(&line, "\t", absl::Hex(i * 31 + c));
  return line;
}

std::string WriteFile(const std::string& name, const std::vector<std::string>& lines) {
  const std::string path = ::testing::TempDir() + "/" + name;
  std::ofstream out(path);
  for (const std::string& l : lines) out << l << "\n";
  return path;
}

// Scores `files` with the reader, prediction = 0.001 * (example number + 1).
absl::Status Score(const JobConfig& config, const std::vector<std::string>& files,
                   PredictionWriter* writer) {
  auto options = data::ReaderOptionsFromConfig(config, files, 0, 1, false);
  if (!options.ok()) return options.status();
  auto reader = data::CriteoReader::Create(*options);
  if (!reader.ok()) return reader.status();
  data::Batch batch;
  int n = 0;
  while (true) {
    batch.Reset(13, 26);
    auto more = (*reader)->NextBatch(4, &batch);
    if (!more.ok()) return more.status();
    if (!*more) break;
    std::vector<float> probs;
    for (int i = 0; i < batch.size; ++i) probs.push_back(0.001f * static_cast<float>(++n));
    if (absl::Status st = writer->Add(batch, probs); !st.ok()) return st;
  }
  return writer->Finish();
}

TEST(PredictionWriterTest, OneLinePerInputLineWithNanForMalformedOnes) {
  const JobConfig config = Config();
  const std::string a = WriteFile("a.tsv", {Good(1, 1), "garbage", Good(0, 2), Good(1, 3),
                                            Good(0, 4), Good(1, 5), "2\tbad label"});
  const std::string b = WriteFile("b.tsv", {"", Good(0, 6), Good(1, 7), "x"});
  const std::string out = ::testing::TempDir() + "/predictions.txt";
  auto writer = PredictionWriter::Create(config, {a, b}, out);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE(Score(config, {a, b}, writer->get()).ok());
  EXPECT_EQ((*writer)->lines(), 11u);
  EXPECT_EQ((*writer)->malformed(), 4u);
  auto text = checkpoint::ReadFileToString(out);
  ASSERT_TRUE(text.ok());
  // k > 0: the k-th example's prediction; 0: a malformed line.
  const std::vector<int> expected = {1, 0, 2, 3, 4, 5, 0, 0, 6, 7, 0};
  std::vector<std::string> got = absl::StrSplit(*text, '\n');
  ASSERT_EQ(got.back(), "");
  got.pop_back();
  ASSERT_EQ(got.size(), expected.size());
  for (size_t i = 0; i < got.size(); ++i) {
    if (expected[i] == 0) {
      EXPECT_EQ(got[i], "nan") << "line " << i + 1;
    } else {
      EXPECT_EQ(std::stof(got[i]), 0.001f * static_cast<float>(expected[i])) << "line " << i + 1;
    }
  }
}

TEST(PredictionWriterTest, ExamplesThatDoNotMatchTheInputAreAnError) {
  const JobConfig config = Config();
  const std::string a = WriteFile("c.tsv", {Good(1, 1), Good(0, 2)});
  const std::string out = ::testing::TempDir() + "/mismatch.txt";
  auto writer = PredictionWriter::Create(config, {a}, out);
  ASSERT_TRUE(writer.ok());
  data::Batch batch;
  batch.size = 2;
  batch.labels = {1, 1};  // The second line's label is 0.
  const std::vector<float> probs = {0.5f, 0.5f};
  const absl::Status st = (*writer)->Add(batch, probs);
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(st.message(), "c.tsv:2")) << st;
  writer->reset();
  EXPECT_FALSE(checkpoint::FileSize(out).ok()) << "no partial predictions file";
}

TEST(PredictionWriterTest, UnscoredLinesAreAnError) {
  const JobConfig config = Config();
  const std::string a = WriteFile("d.tsv", {Good(1, 1), Good(0, 2)});
  auto writer = PredictionWriter::Create(config, {a}, ::testing::TempDir() + "/unscored.txt");
  ASSERT_TRUE(writer.ok());
  const absl::Status st = (*writer)->Finish();
  EXPECT_EQ(st.code(), absl::StatusCode::kInternal);
  EXPECT_TRUE(absl::StrContains(st.message(), "d.tsv:1")) << st;
}

}  // namespace
}  // namespace exporter
}  // namespace shardps

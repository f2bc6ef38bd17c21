#include "worker/data/synthetic.h"

#include <sys/stat.h>

#include <map>
#include <set>
#include <string>

#include "gtest/gtest.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::ReadAll;
using testing::TempPath;

SyntheticSummary Generate(const std::string& dir, SyntheticOptions o) {
  o.out_dir = TempPath(dir);
  auto summary = GenerateSynthetic(o);
  EXPECT_TRUE(summary.ok()) << summary.status();
  return summary.ok() ? *summary : SyntheticSummary();
}

SyntheticOptions Small(uint64_t seed = 2024) {
  SyntheticOptions o;
  o.train_lines = 3000;
  o.eval_lines = 1000;
  o.seed = seed;
  return o;
}

TEST(SyntheticTest, DeterministicForASeed) {
  const SyntheticSummary a = Generate("det_a", Small());
  const SyntheticSummary b = Generate("det_b", Small());
  const SyntheticSummary c = Generate("det_c", Small(2025));
  ASSERT_EQ(a.train_files.size(), 1u);
  EXPECT_EQ(ReadAll(a.train_files[0]), ReadAll(b.train_files[0]));
  EXPECT_EQ(ReadAll(a.eval_files[0]), ReadAll(b.eval_files[0]));
  EXPECT_EQ(ReadAll(TempPath("det_a/best.txt")), ReadAll(TempPath("det_b/best.txt")));
  EXPECT_NE(ReadAll(TempPath("det_a/best.txt")), "");
  EXPECT_NE(ReadAll(a.train_files[0]), ReadAll(c.train_files[0]));
  EXPECT_NE(ReadAll(a.train_files[0]), ReadAll(a.eval_files[0]));
  EXPECT_EQ(a.best_auc, b.best_auc);
}

TEST(SyntheticTest, ShardsSplitTheSameLines) {
  SyntheticOptions o = Small();
  o.train_shards = 3;
  const SyntheticSummary sharded = Generate("shards", o);
  const SyntheticSummary single = Generate("single", Small());
  ASSERT_EQ(sharded.train_files.size(), 3u);
  EXPECT_NE(sharded.train_files[1].find("train-00001-of-00003.tsv"), std::string::npos);
  std::string joined;
  for (const std::string& f : sharded.train_files) joined += ReadAll(f);
  EXPECT_EQ(joined, ReadAll(single.train_files[0]));
}

TEST(SyntheticTest, GzipFilesReadBackWithoutErrors) {
  SyntheticOptions o = Small();
  o.gzip = true;
  const SyntheticSummary s = Generate("gz", o);
  ASSERT_NE(s.train_files[0].find(".tsv.gz"), std::string::npos);
  ReaderOptions ro;
  ro.files = s.train_files;
  for (int i = 0; i < 26; ++i) {
    FieldSpec f;
    f.column = 14 + i;
    ro.fields.push_back(f);
  }
  ro.error_budget = 0;
  auto reader = *CriteoReader::Create(ro);
  Batch batch;
  uint64_t lines = 0;
  double positives = 0;
  while (true) {
    auto more = reader->NextBatch(256, &batch);
    ASSERT_TRUE(more.ok()) << more.status();
    if (!*more) break;
    lines += batch.size;
    for (float l : batch.labels) positives += l;
  }
  EXPECT_EQ(lines, o.train_lines);
  EXPECT_EQ(reader->bad_lines(), 0u);
  EXPECT_NEAR(positives / lines, s.train_positive_rate, 1e-6);
}

TEST(SyntheticTest, SummaryRoundTrips) {
  const SyntheticSummary s = Generate("summary", Small());
  auto read = ReadSyntheticSummary(TempPath("summary"));
  ASSERT_TRUE(read.ok()) << read.status();
  EXPECT_EQ(read->train_files, s.train_files);
  EXPECT_EQ(read->eval_files, s.eval_files);
  EXPECT_EQ(read->train_lines, 3000u);
  EXPECT_NEAR(read->best_auc, s.best_auc, 1e-6);
  EXPECT_NEAR(read->dense_only_auc, s.dense_only_auc, 1e-6);
  EXPECT_EQ(ReadSyntheticSummary(TempPath("nothing_here")).status().code(),
            absl::StatusCode::kNotFound);
  const std::string json = ReadAll(TempPath("summary/best.json"));
  EXPECT_NE(json.find("\"best_auc\": "), std::string::npos);
  EXPECT_NE(json.find("\"train_files\": [\"train.tsv\"]"), std::string::npos) << json;
}

// The requirement on default data: a model of the integer features alone is
// at least 0.05 AUC below the full model.
TEST(SyntheticTest, DenseOnlyAucIsWellBelowTheBestAuc) {
  SyntheticOptions o;  // Defaults (seed 2024), fewer training lines.
  o.train_lines = 100;
  const SyntheticSummary s = Generate("gap", o);
  EXPECT_EQ(s.eval_lines, 50000u);
  EXPECT_LE(s.dense_only_auc, s.best_auc - 0.05)
      << "best " << s.best_auc << " dense-only " << s.dense_only_auc;
  EXPECT_GT(s.dense_only_auc, 0.55);  // The integers do carry signal.
  EXPECT_GT(s.best_auc, 0.7);
  EXPECT_LT(s.best_auc, 0.99);
  EXPECT_LT(s.best_logloss, s.constant_logloss);
  EXPECT_GT(s.eval_positive_rate, 0.1);
  EXPECT_LT(s.eval_positive_rate, 0.4);
}

TEST(SyntheticTest, IdsAreLongTailedAndValuesGoMissing) {
  const SyntheticModel model(2024);
  uint64_t state = 1;
  SyntheticExample e;
  std::map<uint32_t, int> small_field, big_field;
  int missing_c2 = 0, missing_i1 = 0, negative_i2 = 0;
  const int n = 20000;
  for (int i = 0; i < n; ++i) {
    model.Sample(&state, &e);
    if (!e.cat_missing[0]) ++small_field[e.cats[0]];
    if (!e.cat_missing[25]) ++big_field[e.cats[25]];
    missing_c2 += e.cat_missing[1];
    missing_i1 += e.int_missing[1];
    negative_i2 += !e.int_missing[1] && e.ints[1] < 0;
  }
  EXPECT_LE(small_field.size(), 10u);  // V_0 = 10.
  EXPECT_GT(big_field.size(), 2000u);  // V_25 = 1e6: a long tail...
  int top = 0, singletons = 0;
  for (const auto& [id, count] : big_field) {
    top = std::max(top, count);
    singletons += count == 1;
  }
  EXPECT_GT(top, 500);  // ...under a heavy head.
  EXPECT_GT(singletons, 1000);
  EXPECT_NEAR(missing_c2 / double{n}, 0.25, 0.02);  // 0.05 * (5 mod 9)
  EXPECT_NEAR(missing_i1 / double{n}, 0.12, 0.02);  // 0.04 * (3 mod 11)
  EXPECT_NEAR(negative_i2 / static_cast<double>(n - missing_i1), 0.1, 0.02);
}

TEST(SyntheticTest, ResolveDataFilesGeneratesOnceThenReuses) {
  DataConfig data;
  data.set_synthetic_dir(TempPath("resolve"));
  data.set_synthetic_train_lines(500);
  data.set_synthetic_eval_lines(200);
  data.set_synthetic_seed(5);
  auto files = ResolveDataFiles(data);
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(files->train.size(), 1u);
  EXPECT_EQ(files->train[0], TempPath("resolve/train.tsv"));
  EXPECT_EQ(files->eval[0], TempPath("resolve/eval.tsv"));
  EXPECT_EQ(files->synthetic.seed, 5u);
  struct stat before, after;
  ASSERT_EQ(stat(files->train[0].c_str(), &before), 0);
  files = ResolveDataFiles(data);  // Matches best.txt: reused.
  ASSERT_TRUE(files.ok()) << files.status();
  ASSERT_EQ(stat(files->train[0].c_str(), &after), 0);
  EXPECT_EQ(before.st_ino, after.st_ino);
  EXPECT_EQ(before.st_mtim.tv_nsec, after.st_mtim.tv_nsec);
  data.set_synthetic_seed(6);  // Another data set: regenerated.
  files = ResolveDataFiles(data);
  ASSERT_TRUE(files.ok()) << files.status();
  EXPECT_EQ(files->synthetic.seed, 6u);
  EXPECT_EQ(ReadSyntheticSummary(TempPath("resolve"))->seed, 6u);

  DataConfig given;
  given.add_train_files("a.tsv");
  given.add_eval_files("b.tsv.gz");
  files = ResolveDataFiles(given);
  ASSERT_TRUE(files.ok());
  EXPECT_EQ(files->train, std::vector<std::string>{"a.tsv"});
  EXPECT_EQ(files->eval, std::vector<std::string>{"b.tsv.gz"});
  EXPECT_EQ(ResolveDataFiles(DataConfig()).status().code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace data
}  // namespace shardps

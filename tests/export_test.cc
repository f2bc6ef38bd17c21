// Offline scoring and export from a complete checkpoint, with real processes:
// a 2-server/2-worker BSP job writes a checkpoint at clock 30; ps_score on
// the held-out file from that checkpoint gives the same AUC as the trainer's
// own evaluation at step 30, and ps_export's files read back with the
// embedding-file reader and LibTorch match the checkpoint's rows. The sparse
// table admits keys at their second batch, so unadmitted and unseen keys
// read the shared unadmitted rows (server/table.h) the servers trained: in
// the trainer's evaluation, in ps_score (restored from the checkpoint) and
// in ps_export's unadmitted file alike.
//
// "The trainer's evaluation at step 30": the same job stopped after 30 steps
// (--max_steps=30) evaluates the held-out file at its end (PS_JOB_RESULT). A
// BSP job is bit-reproducible (docs/design.md; tests/determinism_test), so its
// weights are those of the other job's cut at clock 30, which runs on to 60.
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/file_io.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"
#include "torch/torch.h"
#include "worker/data/eval_metrics.h"
#include "worker/export/embedding_file.h"

namespace shardps {
namespace {

using testing::ParseResult;
using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;

constexpr uint64_t kCut = 30;
constexpr uint32_t kPartitions = 256;  // cluster.num_partitions below.

// Whether `key` is partition `p`'s reserved shared-row key of table 1: the
// key whose MixKey is the lowest value of its partition (server/table.h).
bool IsSharedRowKey(uint64_t key, uint32_t p) {
  const auto partition = [](uint64_t mixed) {
    return static_cast<uint32_t>((static_cast<unsigned __int128>(mixed) * kPartitions) >> 64);
  };
  const uint64_t mixed = MixKey(1, key);
  return partition(mixed) == p && (mixed == 0 || partition(mixed - 1) != p);
}

// The job's tables and model: testing::kSmallDlrmTables with admission on the
// sparse table.
std::string Tables() {
  testing::SmallDlrm t;
  t.sparse_extra = "admission { min_count: 2 }";
  return testing::SmallDlrmTables(t);
}

constexpr char kConfig[] = R"pb(
name: "export"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
}
@CHECKPOINT@
)pb";

std::string DataDir() { return ::testing::TempDir() + "/export_data"; }
std::string EvalFile() { return DataDir() + "/eval.tsv"; }

std::string Config(const std::string& checkpoint) {
  return Tables() +
         absl::StrReplaceAll(kConfig, {{"@DATA@", DataDir()}, {"@CHECKPOINT@", checkpoint}});
}

// Runs a 2x2 job to its end (its config in TestDir(name)/job.pbtxt);
// returns the scheduler's PS_JOB_RESULT fields.
std::map<std::string, std::string> RunJob(const std::string& name, const std::string& config,
                                          uint64_t max_steps) {
  SupervisedJob job(
      testing::ManualJob(name, config, 2, 2, {absl::StrCat("--max_steps=", max_steps)}));
  EXPECT_TRUE(job.Start().ok());
  auto code = job.WaitScheduler(absl::Minutes(10));
  EXPECT_TRUE(code.ok() && *code == 0) << job.Logs();
  (void)job.WaitWorkers(absl::Seconds(60));
  return ParseResult(job.SchedulerResult());
}

// Runs a tool to its end; its exit code and the fields of its `prefix` line.
struct ToolRun {
  int code = -1;
  std::map<std::string, std::string> result;
  std::string output;
};
ToolRun RunTool(const std::string& binary, const std::vector<std::string>& flags,
                const std::string& prefix, const std::string& log) {
  Subprocess tool;
  std::vector<std::string> argv = {RunfilePath(binary)};
  argv.insert(argv.end(), flags.begin(), flags.end());
  ToolRun run;
  if (!tool.Start(argv, log).ok()) return run;
  auto line = tool.WaitForLine(prefix, absl::Minutes(5));
  if (line.ok()) run.result = ParseResult(*line);
  auto code = tool.Wait(absl::Minutes(1));
  run.code = code.ok() ? *code : -1;
  run.output = tool.output();
  return run;
}

std::vector<std::string> Lines(const std::string& path) {
  std::vector<std::string> lines = absl::StrSplit(testing::ReadFile(path), '\n');
  if (!lines.empty() && lines.back().empty()) lines.pop_back();
  return lines;
}

class ExportTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 20000, 5000).ok());
    ckpt_ = testing::TestDir("export_ckpt");
    // The reference: the trainer's own evaluation after kCut steps.
    reference_ = RunJob("reference", Config(""), kCut);
    ASSERT_FALSE(reference_["eval_auc"].empty()) << "the reference job printed no eval_auc";
    // The job with a checkpoint at clock kCut, running on past it.
    checkpointed_ = RunJob(
        "checkpointed",
        Config(absl::StrCat("checkpoint { dir: \"", ckpt_, "\" every_steps: ", kCut, " keep: 5 }")),
        2 * kCut);
    config_ = testing::TestDir("checkpointed") + "/job.pbtxt";  // The config it ran with.
    ASSERT_TRUE(checkpoint::LoadCheckpoint(ckpt_, kCut).ok()) << "no checkpoint at the cut";
  }

  static std::string ckpt_, config_;
  static std::map<std::string, std::string> reference_, checkpointed_;
};
std::string ExportTest::ckpt_, ExportTest::config_;
std::map<std::string, std::string> ExportTest::reference_, ExportTest::checkpointed_;

TEST_F(ExportTest, ScoringTheCheckpointGivesTheTrainersEvaluation) {
  const std::string predictions = ::testing::TempDir() + "/predictions.txt";
  const ToolRun run =
      RunTool("worker/export/ps_score",
              {"--config=" + config_, "--checkpoint_dir=" + ckpt_, absl::StrCat("--clock=", kCut),
               "--data=" + EvalFile(), "--predictions=" + predictions},
              "PS_SCORE_RESULT ", ::testing::TempDir() + "/ps_score.log");
  ASSERT_EQ(run.code, 0) << testing::ReadFile(::testing::TempDir() + "/ps_score.log");
  std::printf("trainer at step %llu: auc=%s logloss=%s; ps_score: auc=%s logloss=%s\n",
              static_cast<unsigned long long>(kCut), reference_["eval_auc"].c_str(),
              reference_["eval_logloss"].c_str(), run.result.at("auc").c_str(),
              run.result.at("logloss").c_str());
  EXPECT_EQ(run.result.at("clock"), absl::StrCat(kCut));
  EXPECT_EQ(run.result.at("auc"), reference_["eval_auc"]);
  EXPECT_NEAR(std::stod(run.result.at("auc")), std::stod(reference_["eval_auc"]), 1e-6);
  EXPECT_NEAR(std::stod(run.result.at("logloss")), std::stod(reference_["eval_logloss"]), 2e-6);

  // One prediction per input line, and they give the printed AUC.
  const std::vector<std::string> input = Lines(EvalFile());
  const std::vector<std::string> output = Lines(predictions);
  ASSERT_EQ(output.size(), input.size());
  EXPECT_EQ(run.result.at("lines"), absl::StrCat(input.size()));
  EXPECT_EQ(run.result.at("malformed"), "0");
  std::vector<float> labels, probs;
  for (size_t i = 0; i < input.size(); ++i) {
    labels.push_back(input[i][0] == '1' ? 1.0f : 0.0f);
    float p = 0;
    ASSERT_TRUE(absl::SimpleAtof(output[i], &p)) << output[i];
    probs.push_back(p);
  }
  EXPECT_NEAR(data::Auc(labels, probs), std::stod(run.result.at("auc")), 1e-6);
}

// Without --clock: the latest complete checkpoint. That is the cut at 30, or
// the one at 60 if the scheduler took it before the workers finished (the
// last cut of a job races with the workers' end); then it must match the
// checkpointed job's own final evaluation.
TEST_F(ExportTest, TheLatestCheckpointByDefault) {
  const std::string log = ::testing::TempDir() + "/ps_score_latest.log";
  const ToolRun run =
      RunTool("worker/export/ps_score",
              {"--config=" + config_, "--checkpoint_dir=" + ckpt_, "--data=" + EvalFile(),
               "--predictions=" + ::testing::TempDir() + "/latest.txt"},
              "PS_SCORE_RESULT ", log);
  ASSERT_EQ(run.code, 0) << testing::ReadFile(log);
  const std::string clock = run.result.at("clock");
  std::printf("latest checkpoint: clock %s, auc=%s (job's final eval_auc=%s)\n", clock.c_str(),
              run.result.at("auc").c_str(), checkpointed_["eval_auc"].c_str());
  if (clock == absl::StrCat(2 * kCut)) {
    EXPECT_EQ(run.result.at("auc"), checkpointed_["eval_auc"]);
  } else {
    EXPECT_EQ(clock, absl::StrCat(kCut));
    EXPECT_EQ(run.result.at("auc"), reference_["eval_auc"]);
  }
}

TEST_F(ExportTest, MalformedLinesGetNanAndTheSameAuc) {
  std::vector<std::string> input = Lines(EvalFile());
  input.insert(input.begin() + 2, "1\tnot a criteo line");
  const std::string file = ::testing::TempDir() + "/eval_with_garbage.tsv";
  {
    std::ofstream out(file);
    for (const std::string& l : input) out << l << "\n";
  }
  const std::string predictions = ::testing::TempDir() + "/predictions_garbage.txt";
  const std::string log = ::testing::TempDir() + "/ps_score_garbage.log";
  const ToolRun run =
      RunTool("worker/export/ps_score",
              {"--config=" + config_, "--checkpoint_dir=" + ckpt_, absl::StrCat("--clock=", kCut),
               "--data=" + file, "--predictions=" + predictions},
              "PS_SCORE_RESULT ", log);
  ASSERT_EQ(run.code, 0) << testing::ReadFile(log);
  EXPECT_EQ(run.result.at("malformed"), "1");
  EXPECT_EQ(run.result.at("auc"), reference_["eval_auc"]);
  const std::vector<std::string> output = Lines(predictions);
  ASSERT_EQ(output.size(), input.size());
  EXPECT_EQ(output[2], "nan");
  EXPECT_NE(testing::ReadFile(log).find("eval_with_garbage.tsv:3:"), std::string::npos)
      << "the malformed line is reported with file:line";
}

TEST_F(ExportTest, ExportReadsBackWithTheCheckpointsRows) {
  const std::string out = ::testing::TempDir() + "/exported";
  const ToolRun run = RunTool("worker/export/ps_export",
                              {"--config=" + config_, "--checkpoint_dir=" + ckpt_,
                               absl::StrCat("--clock=", kCut), "--out=" + out},
                              "PS_EXPORT_RESULT ", ::testing::TempDir() + "/ps_export.log");
  ASSERT_EQ(run.code, 0) << testing::ReadFile(::testing::TempDir() + "/ps_export.log");

  // The checkpoint's own rows, read with the checkpoint reader.
  auto resolved = checkpoint::LoadCheckpoint(ckpt_, kCut);
  ASSERT_TRUE(resolved.ok()) << resolved.status();
  std::map<uint64_t, std::vector<float>> sparse;  // Weights of table 1.
  std::map<uint32_t, std::vector<float>> shared;  // Its shared rows, by partition.
  std::map<uint64_t, std::vector<float>> chunks;  // Table 2.
  for (const auto& f : resolved->manifest.files()) {
    auto reader =
        checkpoint::CheckpointFileReader::Open(checkpoint::JoinPath(resolved->dir, f.name()));
    ASSERT_TRUE(reader.ok()) << reader.status();
    for (const checkpoint::RecordBlock& b : (*reader)->blocks()) {
      if (!b.rows()) continue;  // Admission counts (the job admits at 2).
      const uint32_t dim = (*reader)->FindTable(b.table_id())->dim;
      for (size_t i = 0; i < b.size(); ++i) {
        std::vector<float> w(dim);
        std::memcpy(w.data(), b.payload(i).data(), dim * sizeof(float));
        if (b.table_id() == 1 && IsSharedRowKey(b.key(i), b.partition())) {
          shared[b.partition()] = std::move(w);
          continue;
        }
        (b.table_id() == 1 ? sparse : chunks)[b.key(i)] = std::move(w);
      }
    }
  }
  ASSERT_GT(sparse.size(), 1000u);

  auto table = exporter::EmbeddingFileReader::Open(out + "/table-1.emb");
  ASSERT_TRUE(table.ok()) << table.status();
  EXPECT_EQ((*table)->header().table_name, "categorical");
  EXPECT_EQ((*table)->header().clock, kCut);
  EXPECT_EQ((*table)->dim(), 8u);
  ASSERT_EQ((*table)->num_rows(), sparse.size());
  EXPECT_EQ(run.result.at("rows"), absl::StrCat(sparse.size()));
  uint64_t i = 0;
  for (const auto& [key, weights] : sparse) {
    ASSERT_EQ((*table)->key(i), key);
    const absl::Span<const float> row = (*table)->row(i++);
    ASSERT_EQ(std::vector<float>(row.begin(), row.end()), weights) << "key " << key;
  }
  // The shared rows: one per partition, trained (not the zeros they start
  // at), two distinct ones (one per server), the export's row p each.
  ASSERT_EQ(shared.size(), kPartitions);
  std::set<std::vector<float>> distinct;
  for (const auto& [p, weights] : shared) distinct.insert(weights);
  EXPECT_EQ(distinct.size(), 2u);
  EXPECT_EQ(distinct.count(std::vector<float>(8, 0.0f)), 0u);
  auto unadmitted = exporter::EmbeddingFileReader::Open(out + "/table-1-unadmitted.emb");
  ASSERT_TRUE(unadmitted.ok()) << unadmitted.status();
  ASSERT_EQ((*unadmitted)->num_rows(), kPartitions);
  for (const auto& [p, weights] : shared) {
    ASSERT_EQ((*unadmitted)->key(p), p);
    const absl::Span<const float> row = (*unadmitted)->row(p);
    ASSERT_EQ(std::vector<float>(row.begin(), row.end()), weights) << "partition " << p;
  }

  // dense.pt: the dense chunks, as named tensors.
  std::vector<float> flat;
  for (const auto& [c, chunk] : chunks) flat.insert(flat.end(), chunk.begin(), chunk.end());
  torch::serialize::InputArchive archive;
  archive.load_from(out + "/dense.pt");
  torch::Tensor all, w;
  ASSERT_TRUE(archive.try_read("flat", all));
  const int64_t n = std::stoll(run.result.at("dense_params"));
  ASSERT_EQ(all.numel(), n);
  EXPECT_TRUE(torch::equal(all, torch::from_blob(flat.data(), {n}, torch::kFloat32)));
  ASSERT_TRUE(archive.try_read("bottom_mlp_0_weight", w));
  EXPECT_EQ(w.sizes().vec(), (std::vector<int64_t>{16, 13}));
  ASSERT_TRUE(archive.try_read("top_mlp_1_bias", w));
  EXPECT_EQ(w.item<float>(), flat[n - 1]);

  const std::string manifest = testing::ReadFile(out + "/manifest.txt");
  EXPECT_NE(manifest.find("format: shardps-export 1"), std::string::npos) << manifest;
  EXPECT_NE(manifest.find(absl::StrCat("table: id=1 name=categorical dim=8 rows=", sparse.size())),
            std::string::npos)
      << manifest;
  EXPECT_NE(manifest.find("unadmitted: table=1 file=table-1-unadmitted.emb"), std::string::npos)
      << manifest;
}

TEST_F(ExportTest, ACheckpointOfAnotherJobIsRefused) {
  const std::string other = ::testing::TempDir() + "/other.pbtxt";
  std::ofstream(other) << absl::StrReplaceAll(testing::ReadFile(config_),
                                              {{"name: \"export\"", "name: \"other\""}});
  const std::string log = ::testing::TempDir() + "/ps_score_other.log";
  const ToolRun run =
      RunTool("worker/export/ps_score",
              {"--config=" + other, "--checkpoint_dir=" + ckpt_, "--data=" + EvalFile(),
               "--predictions=" + ::testing::TempDir() + "/other.txt"},
              "PS_SCORE_RESULT ", log);
  EXPECT_EQ(run.code, 1);
  EXPECT_NE(testing::ReadFile(log).find("checkpoint of job \"export\""), std::string::npos)
      << testing::ReadFile(log);
}

}  // namespace
}  // namespace shardps

// The tuning levers with the real binaries (2 servers, 2 workers, BSP, one
// intra-op thread, so every job is deterministic and a difference between
// two jobs is the lever's alone):
// - dense compression (training.dense_compression, top-k with error
//   feedback) keeps BSP bit-reproducible, really trains differently from the
//   full push, and pushes far fewer dense bytes than it pulls;
// - dense compression at ratio 0.1 and bf16 mixed precision each end within
//   0.005 test AUC of the same job without them.
#include <cmath>
#include <cstdlib>
#include <map>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::SupervisedJob;
constexpr auto Dir = testing::TestDir;

// The job's tables and model: testing::kSmallDlrmTables with its own sparse
// optimizer, its own dense optimizer, wider MLPs.
std::string Tables() {
  testing::SmallDlrm t;
  t.sparse_optimizer = "rowwise_adagrad { learning_rate: 0.05 }";
  t.dense_optimizer = "adagrad { learning_rate: 0.02 }";
  t.bottom_mlp = "32, 8";
  t.top_mlp = "64, 32";
  return testing::SmallDlrmTables(t);
}

constexpr char kConfig[] = R"pb(
name: "tuning"
data { format: CRITEO synthetic_dir: "@DATA@" }
training {
  batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1
  @LEVERS@
}
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 3000
}
)pb";

struct JobResult {
  std::map<int, std::map<std::string, std::string>> workers;  // By rank.
  double auc = 0;
};

// Runs the job named `name` with `levers` in its training block; each
// distinct name runs once per test process.
const JobResult& RunJob(const std::string& name, const std::string& levers) {
  static auto* done = new std::map<std::string, JobResult>();
  if (auto it = done->find(name); it != done->end()) return it->second;
  JobResult& r = (*done)[name];
  const std::string config =
      Tables() + absl::StrReplaceAll(kConfig, {{"@DATA@", ::testing::TempDir() + "/tuning_data"},
                                               {"@LEVERS@", levers}});
  SupervisedJob job(testing::ManualJob(name, config, 2, 2, {"--checksum"}));
  EXPECT_TRUE(job.Start().ok());
  auto code = job.WaitScheduler(absl::Minutes(10));
  EXPECT_TRUE(code.ok() && *code == 0) << name << "\n" << job.Logs();
  auto workers = job.WaitWorkers(absl::Seconds(60));
  EXPECT_TRUE(workers.ok() && workers->size() == 2u) << name << "\n" << job.Logs();
  if (workers.ok()) r.workers = *workers;
  const std::string auc = testing::ParseResult(job.SchedulerResult())["eval_auc"];
  r.auc = auc.empty() ? 0.0 : std::stod(auc);
  return r;
}

double Field(const JobResult& r, int rank, const std::string& key) {
  auto w = r.workers.find(rank);
  if (w == r.workers.end() || !w->second.count(key)) return -1;
  return std::atof(w->second.at(key).c_str());
}

class TuningTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(
        testing::MakeSyntheticData(::testing::TempDir() + "/tuning_data", 60000, 20000).ok());
  }
};

constexpr char kCompress[] = "dense_compression { ratio: 0.1 }";

TEST_F(TuningTest, CompressedBspJobIsBitReproducibleAndPushesFewerDenseBytes) {
  const JobResult& a = RunJob("compressed_a", kCompress);
  const JobResult& b = RunJob("compressed_b", kCompress);
  const JobResult& full = RunJob("plain", "");
  for (int rank : {0, 1}) {
    SCOPED_TRACE(rank);
    ASSERT_EQ(a.workers.count(rank), 1u);
    const std::string sum = a.workers.at(rank).at("checksum");
    ASSERT_EQ(sum.size(), 16u);
    EXPECT_EQ(b.workers.at(rank).at("checksum"), sum) << "two compressed BSP jobs differ";
    EXPECT_NE(full.workers.at(rank).at("checksum"), sum)
        << "compression changed nothing: is the ratio read?";
    // Dense bytes pushed are the top 10% of the elements (4-byte values and
    // 1-2 byte gaps); without compression, one 4-byte gradient per element,
    // as many bytes as the training pulls read.
    const double compressed = Field(a, rank, "push_bytes_dense");
    const double uncompressed = Field(full, rank, "push_bytes_dense");
    const double pulled = Field(full, rank, "pull_bytes_dense");
    ASSERT_GT(pulled, 0);
    EXPECT_GT(compressed, 0);
    EXPECT_LT(compressed, 0.2 * uncompressed);
    EXPECT_NEAR(uncompressed, pulled, 0.02 * pulled);
  }
  EXPECT_EQ(a.auc, b.auc);
}

TEST_F(TuningTest, CompressionAndBf16KeepTestAuc) {
  const double plain = RunJob("plain", "").auc;
  const double compressed = RunJob("compressed_a", kCompress).auc;
  const double bf16 = RunJob("bf16", "mixed_precision: BF16").auc;
  ASSERT_GT(plain, 0.65) << "the job did not learn: the comparison would mean nothing";
  EXPECT_NEAR(compressed, plain, 0.005);
  EXPECT_NEAR(bf16, plain, 0.005);
  EXPECT_NE(bf16, plain) << "bf16 changed nothing: is mixed_precision read?";
  std::printf("test AUC: plain %.6f, compression 0.1 %.6f, bf16 %.6f\n", plain, compressed, bf16);
}

}  // namespace
}  // namespace shardps

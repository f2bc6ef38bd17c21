// Chaos: a job whose servers are killed with SIGKILL at random moments and
// which is restarted from its last complete checkpoint each time (what the
// launcher does: the whole job rolls back, servers restore their partitions,
// workers rewind to their recorded data positions) ends exactly like the
// same job without kills (BSP), or within 0.01 AUC of it (SSP(2)).
#include <signal.h>
#include <sys/stat.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/cluster.h"

namespace shardps {
namespace {

using testing::LocalCluster;
constexpr auto Dir = testing::TestDir;

constexpr char kConfig[] = R"pb(
name: "chaos"
tables {
  id: 1 name: "categorical" kind: SPARSE dim: 8 seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.05 } }
}
tables {
  id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
  optimizer { adam { learning_rate: 0.002 } }
}
model { kind: DLRM bottom_mlp: [16, 8] top_mlp: [16] dense_table: "mlp" }
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 @MODE@
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

int CompleteCheckpoints(const std::string& root) {
  int n = 0;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    if (std::filesystem::exists(e.path() / "MANIFEST")) ++n;
  }
  return n;
}

struct Outcome {
  uint64_t checksum = 0;
  double auc = 0;
  int kills = 0;
};

// Runs the job to its end, killing a server `kills` times (after a fresh
// checkpoint, at a random moment) and restarting the job with --resume.
Outcome RunJob(const std::string& name, const std::string& mode, int kills) {
  const std::string dir = Dir(name);
  const std::string ckpt = Dir(name + "/ckpt");
  const std::string config = dir + "/job.pbtxt";
  std::ofstream(config) << absl::StrReplaceAll(
      kConfig, {{"@DATA@", ::testing::TempDir() + "/chaos_data"}, {"@MODE@", mode},
                {"@CKPT@", ckpt}});
  std::mt19937 rng(std::hash<std::string>()(name));
  Outcome out;
  bool resume = false;
  for (int attempt = 0; attempt < 10; ++attempt) {
    LocalCluster cluster({config, dir, 2, 2, {"--max_steps=500"}, {},
                          resume ? std::vector<std::string>{"--resume"} : std::vector<std::string>{}});
    EXPECT_TRUE(cluster.Start().ok());
    if (out.kills < kills) {
      const int before = CompleteCheckpoints(ckpt);
      const absl::Time deadline = absl::Now() + absl::Seconds(120);
      while (CompleteCheckpoints(ckpt) <= before && absl::Now() < deadline &&
             !cluster.scheduler().Wait(absl::Milliseconds(20)).ok()) {
      }
      absl::SleepFor(absl::Milliseconds(rng() % 600));
      if (cluster.scheduler().Wait(absl::ZeroDuration()).ok()) {
        ADD_FAILURE() << "the job ended before kill " << out.kills + 1 << "\n"
                      << cluster.AllLogTails();
        return out;
      }
      cluster.server(out.kills % 2).Signal(SIGKILL);
      ++out.kills;
      cluster.KillAll();  // The launcher stops the job, then resumes it.
      resume = true;
      continue;
    }
    auto code = cluster.WaitScheduler(absl::Minutes(10));
    EXPECT_TRUE(code.ok() && *code == 0) << cluster.AllLogTails();
    auto checksum = cluster.WaitServersChecksum(absl::Seconds(60));
    EXPECT_TRUE(checksum.ok()) << checksum.status() << cluster.AllLogTails();
    out.checksum = checksum.value_or(0);
    out.auc = std::stod(testing::ParseResult(cluster.SchedulerResult())["eval_auc"]);
    (void)cluster.WaitWorkers(absl::Seconds(30));
    return out;
  }
  ADD_FAILURE() << "too many attempts";
  return out;
}

class RecoveryTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(::testing::TempDir() + "/chaos_data", 80000, 10000, 4).ok());
  }
};

TEST_F(RecoveryTest, BspJobWithThreeServerKillsEndsBitIdentical) {
  const Outcome clean = RunJob("bsp_clean", "mode: BSP", 0);
  const Outcome chaos = RunJob("bsp_chaos", "mode: BSP", 3);
  EXPECT_EQ(chaos.kills, 3);
  EXPECT_NE(clean.checksum, 0u);
  EXPECT_EQ(chaos.checksum, clean.checksum) << "weights differ after recovery";
  EXPECT_EQ(chaos.auc, clean.auc);
  std::printf("BSP: weights %016llx without kills, %016llx with 3 kills; AUC %.6f\n",
              static_cast<unsigned long long>(clean.checksum),
              static_cast<unsigned long long>(chaos.checksum), chaos.auc);
}

TEST_F(RecoveryTest, Ssp2JobWithThreeServerKillsReachesTheSameAuc) {
  const Outcome clean = RunJob("ssp_clean", "mode: SSP staleness: 2", 0);
  const Outcome chaos = RunJob("ssp_chaos", "mode: SSP staleness: 2", 3);
  EXPECT_EQ(chaos.kills, 3);
  std::printf("SSP(2): AUC %.6f without kills, %.6f with 3 kills\n", clean.auc, chaos.auc);
  EXPECT_NEAR(chaos.auc, clean.auc, 0.01);
}

}  // namespace
}  // namespace shardps

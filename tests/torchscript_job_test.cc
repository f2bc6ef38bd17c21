// A TorchScript model (model.kind TORCHSCRIPT) in jobs of the real binaries:
//
//  - the zoo's DLRM, scripted for the job by the user's command
//    (models/script.py, which reads the job's shape from ps_model_spec),
//    trains under BSP; with a server SIGKILLed mid-job and restarted by the
//    supervisor, the job rolls back to its last checkpoint and ends with
//    weights bit-identical to the same job without the kill;
//  - a module the workers refuse fails the job, naming what was expected,
//    instead of leaving it waiting.
#include <signal.h>

#include <cstdio>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::JobOutcome;
using testing::SupervisedJob;

// Each worker trains kSteps steps, each at least kStepDelayMs long; the kill
// is planned by clock, well before the end.
constexpr uint64_t kSteps = 240;
constexpr int kStepDelayMs = 20;

constexpr char kJob[] = R"pb(
name: "@NAME@"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 3 shuffle_seed: 7 intra_op_threads: 1 prefetch: true }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000 worker_deadline_ms: 4000
}
checkpoint { dir: "@CKPT@" every_steps: 40 keep: 2 }
)pb";

std::string DataDir() { return ::testing::TempDir() + "/torchscript_job_data"; }

// The job config with the model of `module` (the tables of the small DLRM
// job, its model a TORCHSCRIPT one).
std::string Config(const std::string& name, const std::string& module) {
  const std::string tables = absl::StrReplaceAll(
      testing::kSmallDlrmTables,
      {{"kind: DLRM", absl::StrCat("kind: TORCHSCRIPT torchscript_file: \"", module, "\"")}});
  return absl::StrCat(tables, absl::StrReplaceAll(kJob, {{"@NAME@", name}, {"@DATA@", DataDir()}}));
}

class TorchScriptJobTest : public ::testing::Test {
 protected:
  // The data, and the zoo's DLRM scripted for the job the way a user does.
  static void SetUpTestSuite() {
    ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 40000, 5000, 4).ok());
    const std::string dir = testing::TestDir("torchscript_model");
    module_ = dir + "/dlrm.pt";
    const std::string config = dir + "/job.pbtxt";
    FILE* f = std::fopen(config.c_str(), "w");
    ASSERT_NE(f, nullptr);
    const std::string text =
        absl::StrReplaceAll(Config("script", module_), {{"@CKPT@", dir + "/ckpt"}});
    std::fputs(text.c_str(), f);
    std::fclose(f);
    testing::Subprocess script;
    ASSERT_TRUE(script
                    .Start({"/usr/bin/python3", testing::RunfilePath("models/script.py"), "dlrm",
                            "--config", config, "--spec_tool",
                            testing::RunfilePath("worker/model/ps_model_spec"), "--out", module_},
                           dir + "/script.log")
                    .ok());
    auto wrote = script.WaitForLine("models/script.py: wrote ", absl::Minutes(2));
    ASSERT_TRUE(wrote.ok()) << wrote.status() << testing::ReadFile(dir + "/script.log");
    // The small job's DLRM: bottom 13 -> 16 -> 8 (360), top 8 + 27 * 26 / 2 -> 16 -> 1 (5777).
    EXPECT_NE(wrote->find("dlrm, 6137 dense parameters in 8 tensors"), std::string::npos) << *wrote;
    auto code = script.Wait(absl::Minutes(1));
    ASSERT_TRUE(code.ok() && *code == 0) << testing::ReadFile(dir + "/script.log");
  }

  static std::string module_;
};

std::string TorchScriptJobTest::module_;

SupervisedJob::Options Options(const std::string& name, const std::string& module,
                               int max_restarts) {
  SupervisedJob::Options o;
  o.name = name;
  o.config = Config(name, module);
  o.worker_flags = {absl::StrCat("--max_steps=", kSteps),
                    absl::StrCat("--step_delay_ms=", kStepDelayMs)};
  o.supervisor = {max_restarts, absl::Seconds(1)};
  o.job_secret = false;
  return o;
}

// Runs the job; with `kill`, SIGKILLs server 1 half-way between two
// checkpoints (the supervisor starts it again) and waits for the rollback.
JobOutcome RunJob(const std::string& name, const std::string& module, bool kill) {
  SupervisedJob job(Options(name, module, /*max_restarts=*/3));
  const absl::Status started = job.Start();
  EXPECT_TRUE(started.ok()) << started;
  if (kill && job.ExpectClock(100)) {
    const uint64_t before = job.JobStatus().ok() ? job.JobStatus()->generation() : 0;
    job.sup().Signal(job.server(1), SIGKILL);
    auto recovered = job.WaitFor(
        "the rollback after the kill",
        [before](const JobStatusResponse& s) {
          bool complete = true;
          for (const auto& r : s.recoveries()) complete &= r.complete();
          return s.generation() > before && complete && s.state() == "running";
        },
        absl::Minutes(2));
    EXPECT_TRUE(recovered.ok()) << recovered.status() << "\n" << job.Logs();
  }
  JobOutcome out = job.Finish(absl::Minutes(10));
  EXPECT_NE(testing::ReadFile(job.dir() + "/worker-0.log").find("model: TorchScript"),
            std::string::npos)
      << "the workers did not say they run the module\n"
      << job.LogTail("worker-0");
  return out;
}

TEST_F(TorchScriptJobTest, BspServerKilledEndsBitIdentical) {
  const JobOutcome clean = RunJob("ts_bsp_clean", module_, false);
  ASSERT_EQ(clean.code, 0) << clean.result;
  const JobOutcome chaos = RunJob("ts_bsp_kill", module_, true);
  EXPECT_EQ(chaos.code, 0) << chaos.result;
  EXPECT_GE(chaos.recoveries, 1) << chaos.result;
  EXPECT_NE(clean.checksum, 0u);
  EXPECT_EQ(chaos.checksum, clean.checksum) << "weights differ after the recovery";
  EXPECT_EQ(chaos.auc, clean.auc);
  EXPECT_GT(clean.auc, 0.6) << clean.result;
  std::printf("scripted DLRM, BSP: weights %016llx without a kill, %016llx with one; AUC %.6f\n",
              static_cast<unsigned long long>(clean.checksum),
              static_cast<unsigned long long>(chaos.checksum), chaos.auc);
}

// The workers refuse a module whose forward takes only the dense features;
// the job fails (after worker_deadline_ms without a worker) and its reason
// names what was expected. (Nothing restarts: a restarted worker would be
// refused the same way.)
TEST_F(TorchScriptJobTest, ARefusedModuleFailsTheJobNamingIt) {
  const std::string bad = testing::RunfilePath("worker/model/testdata/wrong_signature.pt");
  SupervisedJob job(Options("ts_refused", bad, /*max_restarts=*/0));
  ASSERT_TRUE(job.Start().ok());
  const JobOutcome out = job.Finish(absl::Minutes(3), /*trained=*/false);
  EXPECT_EQ(out.code, 1) << out.result;
  EXPECT_NE(out.result.find("state=failed"), std::string::npos) << out.result;
  const std::string log = job.SchedulerLog();
  EXPECT_NE(log.find("want forward(self, dense: Tensor, sparse: List[Tensor]) -> Tensor"),
            std::string::npos)
      << "the failure does not say why\n"
      << job.Logs();
  std::printf("refused module: %s\n", out.result.c_str());
}

}  // namespace
}  // namespace shardps

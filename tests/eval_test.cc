// Periodic evaluation, early stopping and keep-best with real processes: a
// 2-server/2-worker SSP job evaluates a checkpoint every 10 clocks
// (training.eval_every_steps) on an eval file whose labels are flipped.
// Training makes the model better on the true labels, so its AUC on the
// flipped ones falls: the first evaluations are the best, and early stopping
// (patience 2) ends the job long before its data does. Checked:
//  - every due checkpoint is evaluated (none is garbage-collected first,
//    although checkpoint.keep is 1), and each value equals ps_score's
//    standalone evaluation of that checkpoint;
//  - the job stops at the clock the scheduler names, after `patience`
//    evaluations without improvement, and every worker trained exactly to
//    it;
//  - the best checkpoint survives GC, BEST names it, PS_JOB_RESULT reports
//    it, and ps_score loads it by default.
#include <csignal>
#include <cstdio>
#include <fstream>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_replace.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::ParseResult;
using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;

constexpr uint64_t kEvery = 10;
constexpr uint32_t kPatience = 2;
constexpr uint64_t kStepsOfData = 312;  // 4 epochs of 10000 lines per worker, batch 128.

constexpr char kJob[] = R"pb(
name: "eval"
data { format: CRITEO synthetic_dir: "@DATA@" eval_files: "@EVAL@" }
training {
  batch_size: 128 epochs: 4 shuffle_seed: 7 intra_op_threads: 1
  eval_every_steps: 10 early_stopping { patience: 2 }
}
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 256 mode: SSP staleness: 2
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 30000
}
checkpoint { dir: "@CKPT@" keep: 1 }
)pb";

std::string DataDir() { return ::testing::TempDir() + "/eval_data"; }

// The synthetic eval file with every label flipped.
std::string FlippedEvalFile() {
  const std::string path = ::testing::TempDir() + "/eval_flipped.tsv";
  std::ifstream in(DataDir() + "/eval.tsv");
  std::ofstream out(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty()) line[0] = line[0] == '1' ? '0' : '1';
    out << line << "\n";
  }
  return path;
}

struct Eval {
  double auc = 0;
  double logloss = 0;
  std::string line;  // The whole record: "eval <clock> <auc> <logloss> <examples> <seconds>".
};

// <ckpt>/EVALUATIONS: clock -> evaluation. A line that is neither a comment,
// "stopped_at <clock>" nor a well-formed record fails the test.
std::map<uint64_t, Eval> ReadEvaluations(const std::string& ckpt) {
  std::map<uint64_t, Eval> out;
  for (absl::string_view line :
       absl::StrSplit(testing::ReadFile(ckpt + "/EVALUATIONS"), '\n', absl::SkipEmpty())) {
    if (absl::StartsWith(line, "#") || absl::StartsWith(line, "stopped_at ")) continue;
    std::vector<std::string> f = absl::StrSplit(line, ' ');
    uint64_t clock = 0, examples = 0;
    double seconds = 0;
    Eval e;
    e.line = std::string(line);
    if (f.size() == 6 && f[0] == "eval" && absl::SimpleAtoi(f[1], &clock) &&
        absl::SimpleAtod(f[2], &e.auc) && absl::SimpleAtod(f[3], &e.logloss) &&
        absl::SimpleAtoi(f[4], &examples) && absl::SimpleAtod(f[5], &seconds)) {
      out[clock] = e;
    } else {
      ADD_FAILURE() << "malformed line in " << ckpt << "/EVALUATIONS: " << line;
    }
  }
  return out;
}

// How many times the workers' logs say they evaluated the checkpoint at
// `clock` (CheckpointEvaluator logs each evaluation once).
int TimesEvaluated(const std::string& job_dir, int workers, uint64_t clock) {
  const std::string needle = absl::StrCat("evaluated the checkpoint at clock ", clock, ":");
  int n = 0;
  for (int r = 0; r < workers; ++r) {
    const std::string log = testing::ReadFile(absl::StrCat(job_dir, "/worker-", r, ".log"));
    for (size_t at = log.find(needle); at != std::string::npos; at = log.find(needle, at + 1)) ++n;
  }
  return n;
}

// Runs ps_score on the checkpoint at `clock` (-1: the default one).
std::map<std::string, std::string> Score(const std::string& config, const std::string& ckpt,
                                         const std::string& eval, int64_t clock) {
  Subprocess tool;
  const std::string log = ::testing::TempDir() + absl::StrCat("/ps_score_", clock, ".log");
  std::vector<std::string> argv = {RunfilePath("worker/export/ps_score"), "--config=" + config,
                                   "--checkpoint_dir=" + ckpt, "--data=" + eval,
                                   "--predictions=" + ::testing::TempDir() + "/pred.txt"};
  if (clock >= 0) argv.push_back(absl::StrCat("--clock=", clock));
  std::map<std::string, std::string> result;
  if (!tool.Start(argv, log).ok()) return result;
  auto line = tool.WaitForLine("PS_SCORE_RESULT ", absl::Minutes(5));
  if (line.ok()) result = ParseResult(*line);
  (void)tool.Wait(absl::Minutes(1));
  EXPECT_FALSE(result.empty()) << testing::ReadFile(log);
  return result;
}

TEST(EvalTest, PeriodicEvaluationStopsEarlyAndKeepsTheBest) {
  ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 20000, 5000).ok());
  const std::string eval = FlippedEvalFile();
  const std::string ckpt = testing::TestDir("eval_ckpt");
  SupervisedJob cluster(testing::ManualJob(
      "eval_job",
      testing::kSmallDlrmTables +
          absl::StrReplaceAll(kJob, {{"@DATA@", DataDir()}, {"@EVAL@", eval}, {"@CKPT@", ckpt}}),
      2, 2));
  ASSERT_TRUE(cluster.Start().ok()) << cluster.Logs();
  const std::string config = cluster.config_path();
  auto code = cluster.WaitScheduler(absl::Minutes(10));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  auto workers = cluster.WaitWorkers(absl::Seconds(60));
  ASSERT_TRUE(workers.ok()) << workers.status();
  ASSERT_EQ(workers->size(), 2u);
  std::map<std::string, std::string> job = ParseResult(cluster.SchedulerResult());
  std::printf("%s\n", cluster.SchedulerResult().c_str());

  // Stopped early, every worker exactly at the stop clock.
  uint64_t stop = 0;
  ASSERT_TRUE(absl::SimpleAtoi(job["early_stopped_at"], &stop)) << cluster.SchedulerResult();
  EXPECT_GT(stop, 0u);
  EXPECT_LT(stop, kStepsOfData);
  for (const auto& [rank, r] : *workers) {
    ASSERT_EQ(r.count("steps"), 1u) << rank;
    EXPECT_EQ(r.at("steps"), absl::StrCat(stop)) << rank;
  }

  // Every multiple of kEvery up to the stop, and the final checkpoint.
  const std::map<uint64_t, Eval> evals = ReadEvaluations(ckpt);
  std::vector<uint64_t> want, got;
  for (uint64_t c = kEvery; c <= stop; c += kEvery) want.push_back(c);
  if (stop % kEvery != 0) want.push_back(stop);
  for (const auto& [clock, e] : evals) got.push_back(clock);
  EXPECT_EQ(got, want);
  EXPECT_EQ(job["evaluations"], absl::StrCat(want.size()));

  // The stop came after `patience` evaluations without improvement, at
  // the first clock nobody had started once the scheduler knew.
  std::optional<double> ref;
  uint32_t without = 0;
  std::optional<uint64_t> trigger;
  for (const auto& [clock, e] : evals) {
    if (!ref || e.auc > *ref) {
      ref = e.auc;
      without = 0;
    } else if (++without == kPatience && !trigger) {
      trigger = clock;
    }
  }
  ASSERT_TRUE(trigger.has_value()) << "no evaluation should have stopped the job";
  EXPECT_GT(stop, *trigger);

  // The best one: reported, named in BEST, kept by GC (keep: 1 keeps only
  // the newest otherwise), and loaded by ps_score by default.
  uint64_t best = evals.begin()->first;
  for (const auto& [clock, e] : evals) {
    if (e.auc > evals.at(best).auc) best = clock;
  }
  EXPECT_EQ(job["best_clock"], absl::StrCat(best));
  EXPECT_EQ(job["best_auc"], absl::StrFormat("%.6f", evals.at(best).auc));
  EXPECT_EQ(testing::ReadFile(ckpt + "/BEST"), absl::StrCat(best, "\n"));
  EXPECT_TRUE(checkpoint::LoadCheckpoint(ckpt, best).ok()) << "the best checkpoint is gone";
  EXPECT_TRUE(checkpoint::LoadCheckpoint(ckpt, stop).ok()) << "the final checkpoint is gone";
  for (uint64_t c : want) {
    if (c != best && c != stop) {
      EXPECT_FALSE(checkpoint::IsDirectory(checkpoint::CheckpointPath(ckpt, c)))
          << "checkpoint " << c << " was not garbage-collected";
    }
  }

  // Each kept checkpoint's periodic evaluation equals ps_score's on it.
  for (uint64_t c : {best, stop}) {
    const auto score = Score(config, ckpt, eval, static_cast<int64_t>(c));
    EXPECT_EQ(score.at("clock"), absl::StrCat(c));
    EXPECT_EQ(score.at("auc"), absl::StrFormat("%.6f", evals.at(c).auc)) << "clock " << c;
    EXPECT_EQ(score.at("logloss"), absl::StrFormat("%.6f", evals.at(c).logloss)) << "clock " << c;
  }
  EXPECT_EQ(Score(config, ckpt, eval, -1).at("clock"), absl::StrCat(best));
  // The job's eval_auc is its final checkpoint's evaluation.
  EXPECT_EQ(job["eval_auc"], absl::StrFormat("%.6f", evals.at(stop).auc));
}

// The scheduler is SIGKILLed after the first evaluation and started again
// on its address: it reads the evaluations back, takes the job over, and
// the job ends with every complete due checkpoint evaluated once (those
// from before the kill not again: their records are unchanged, seconds
// included, and no worker evaluated them a second time) and BEST naming the
// best of them.
TEST(EvalTest, ARestartedSchedulerKeepsTheEvaluationsAndTheBest) {
  ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 20000, 5000).ok());
  const std::string ckpt = testing::TestDir("eval_restart_ckpt");
  constexpr uint64_t kSteps = 200;
  // 20 ms a step: at least 4 s of training, so that the kill after the
  // first evaluation finds the job running.
  SupervisedJob cluster(testing::ManualJob(
      "eval_restart_job",
      testing::kSmallDlrmTables + absl::StrReplaceAll(kJob, {{"@DATA@", DataDir()},
                                                             {"@EVAL@", DataDir() + "/eval.tsv"},
                                                             {"@CKPT@", ckpt},
                                                             {"early_stopping { patience: 2 }", ""},
                                                             {"keep: 1", "keep: 2"}}),
      2, 2, {absl::StrCat("--max_steps=", kSteps), "--step_delay_ms=20"}));
  ASSERT_TRUE(cluster.Start().ok()) << cluster.Logs();
  const absl::Time deadline = absl::Now() + absl::Minutes(2);
  std::map<uint64_t, Eval> before;
  while (before.empty() && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(50));  // Polls the file; bounded by `deadline`.
    before = ReadEvaluations(ckpt);
  }
  ASSERT_FALSE(before.empty()) << "no evaluation within 2 minutes\n" << cluster.Logs();
  // Still training: the kill interrupts the job, not a job that has ended.
  auto running = cluster.WaitFor(
      "a running job", [](const JobStatusResponse& s) { return s.state() == "running"; },
      absl::Minutes(1));
  ASSERT_TRUE(running.ok()) << running.status();
  ASSERT_LT(running->max_clock(), kSteps) << "the job ended before the kill";
  cluster.sup().Signal(cluster.scheduler(), SIGKILL);
  auto killed = cluster.sup().WaitFinal(cluster.scheduler(), absl::Seconds(10));
  ASSERT_TRUE(killed.ok() && *killed == 128 + SIGKILL) << "the scheduler was not running";
  ASSERT_TRUE(cluster.RestartScheduler({}).ok()) << cluster.Logs();
  auto code = cluster.WaitScheduler(absl::Minutes(10));
  ASSERT_TRUE(code.ok() && *code == 0) << cluster.Logs();
  auto workers = cluster.WaitWorkers(absl::Seconds(60));
  EXPECT_TRUE(workers.ok()) << workers.status();
  std::map<std::string, std::string> job = ParseResult(cluster.SchedulerResult());

  // Every multiple of 10 up to 200 but, at most, the one whose cut the kill
  // interrupted (no MANIFEST: no checkpoint to evaluate).
  const std::map<uint64_t, Eval> evals = ReadEvaluations(ckpt);
  for (const auto& [clock, e] : evals) {
    EXPECT_TRUE(clock % kEvery == 0 && clock <= kSteps) << clock;
    // An evaluation in flight at the kill may be done again; none twice more.
    EXPECT_GE(TimesEvaluated(cluster.dir(), 2, clock), 1) << "clock " << clock;
  }
  EXPECT_GE(evals.size(), kSteps / kEvery - 1) << cluster.Logs();
  EXPECT_EQ(evals.count(kSteps), 1u);
  for (const auto& [clock, e] : before) {  // Kept as they were, not evaluated again.
    ASSERT_EQ(evals.count(clock), 1u) << "the evaluation at clock " << clock << " was lost";
    EXPECT_EQ(evals.at(clock).line, e.line) << "clock " << clock << " was evaluated again";
    EXPECT_EQ(TimesEvaluated(cluster.dir(), 2, clock), 1)
        << "clock " << clock << " was evaluated again";
  }
  uint64_t best = evals.begin()->first;
  for (const auto& [clock, e] : evals) {
    if (e.auc > evals.at(best).auc) best = clock;
  }
  EXPECT_EQ(job["evaluations"], absl::StrCat(evals.size()));
  EXPECT_EQ(job["best_clock"], absl::StrCat(best));
  EXPECT_EQ(testing::ReadFile(ckpt + "/BEST"), absl::StrCat(best, "\n"));
  EXPECT_TRUE(checkpoint::LoadCheckpoint(ckpt, best).ok()) << "the best checkpoint is gone";
  EXPECT_EQ(job["early_stopped_at"], "0");
}

}  // namespace
}  // namespace shardps

// JobCoordinator: periodic evaluation, keep-best and early stopping (fake
// servers, workers and an evaluator driven by hand).
#include <algorithm>
#include <atomic>
#include <map>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/checkpoint/file_io.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "scheduler/job.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

using testing::Config;
using testing::FakeServerOps;
using testing::Finish;
using testing::RegisterAll;
using testing::StartOf;
using testing::Step;

constexpr uint64_t kEvery = 5;

JobConfig EvalConfig(const std::string& dir) {
  JobConfig c = Config(0, SSP, dir);
  c.mutable_training()->set_eval_every_steps(kEvery);
  c.mutable_training()->mutable_early_stopping()->set_patience(1);
  return c;
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/job_eval_" + name;
  (void)checkpoint::RemoveAll(dir);
  return dir;
}

// Trains worker `rank` until the clocks stop it (OUT_OF_RANGE), then
// reports done; returns the clock it stopped at.
uint64_t TrainUntilStopped(JobCoordinator* job, uint32_t rank) {
  auto start = StartOf(job, rank);
  EXPECT_TRUE(start.ok()) << start.status();
  if (!start.ok()) return 0;
  uint64_t t = start->clock();
  for (; t < 100000; ++t) {
    const absl::Status st = Step(job, rank, start->generation(), t);
    if (absl::IsOutOfRange(st)) break;
    EXPECT_TRUE(st.ok()) << st;
    if (!st.ok()) return t;
    absl::SleepFor(absl::Milliseconds(1));
  }
  EXPECT_TRUE(Finish(job, rank, start->generation()).ok());
  return t;
}

// Evaluates what the job hands out: AUC 0.7 at clock 5, 0.6 at 10 (no
// improvement: patience 1 stops the job), 0.65 after. Returns the clocks
// evaluated, in order.
std::vector<uint64_t> Evaluate(JobCoordinator* job, uint32_t rank) {
  std::vector<uint64_t> clocks;
  EvaluationRequest request;
  request.set_rank(rank);
  request.set_timeout_ms(200);
  const absl::Time deadline = absl::Now() + absl::Seconds(60);
  while (absl::Now() < deadline) {
    EvaluationResponse response;
    const absl::Status st = job->Evaluation(request, &response);
    EXPECT_TRUE(st.ok()) << st;
    request.clear_done();
    if (!st.ok() || response.job_ended()) break;
    if (response.clock() == 0) continue;
    clocks.push_back(response.clock());
    CheckpointEval* done = request.mutable_done();
    done->set_clock(response.clock());
    done->set_auc(response.clock() == 5 ? 0.7 : response.clock() == 10 ? 0.6 : 0.65);
    done->set_logloss(0.5);
    done->set_examples(1000);
  }
  return clocks;
}

TEST(JobEvalTest, EvaluatesEachDueCheckpointStopsEarlyAndKeepsTheBest) {
  const std::string dir = FreshDir("stop");
  const JobConfig c = EvalConfig(dir);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  ops.set_job(&job);
  ASSERT_TRUE(job.CheckCheckpointDir().ok());
  job.Start();
  RegisterAll(&job, c);
  std::vector<uint64_t> evaluated;
  std::thread evaluator([&] { evaluated = Evaluate(&job, 1); });
  uint64_t stopped[2] = {0, 0};
  std::thread w0([&] { stopped[0] = TrainUntilStopped(&job, 0); });
  std::thread w1([&] { stopped[1] = TrainUntilStopped(&job, 1); });
  w0.join();
  w1.join();
  ASSERT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(30)).ok());
  evaluator.join();

  JobStatusResponse status;
  job.JobStatus(&status);
  // Both workers stopped at the same clock, after the evaluation at 10 (the
  // first without improvement), and no later than the scheduler said.
  const uint64_t stop = status.early_stopped_at();
  EXPECT_GE(stop, 10u);
  EXPECT_EQ(stopped[0], stop);
  EXPECT_EQ(stopped[1], stop);
  // Every multiple of 5 up to the stop, and the final checkpoint, were
  // evaluated once, oldest first.
  std::vector<uint64_t> want;
  for (uint64_t k = kEvery; k <= stop; k += kEvery) want.push_back(k);
  if (stop % kEvery != 0) want.push_back(stop);
  EXPECT_EQ(evaluated, want);
  ASSERT_EQ(status.evaluations_size(), static_cast<int>(want.size()));
  EXPECT_EQ(status.best_eval_clock(), 5u);
  EXPECT_EQ(status.best_eval_auc(), 0.7);
  EXPECT_EQ(status.eval_auc(), status.evaluations(status.evaluations_size() - 1).auc());
  // The best checkpoint was pinned for GC at the last cut, and is named in BEST.
  const std::vector<uint64_t> pinned = ops.pinned();
  EXPECT_NE(std::find(pinned.begin(), pinned.end(), 5u), pinned.end());
  EXPECT_EQ(*checkpoint::ReadFileToString(dir + "/BEST"), "5\n");

  // A restarted scheduler reads the evaluations and the stop back.
  FakeServerOps ops2(c);
  JobCoordinator again(c, nullptr, &ops2);
  ASSERT_TRUE(again.CheckCheckpointDir().ok());
  JobStatusResponse reread;
  again.JobStatus(&reread);
  EXPECT_EQ(reread.evaluations_size(), status.evaluations_size());
  EXPECT_EQ(reread.best_eval_clock(), 5u);
  EXPECT_EQ(reread.early_stopped_at(), stop);
}

TEST(JobEvalTest, EvaluationIsRefusedWhenOffAndFromUnknownRanks) {
  const JobConfig c = Config(0);
  FakeServerOps ops(c);
  JobCoordinator job(c, nullptr, &ops);
  job.Start();
  RegisterAll(&job, c);
  EvaluationRequest request;
  request.set_rank(0);
  EvaluationResponse response;
  EXPECT_EQ(job.Evaluation(request, &response).code(), absl::StatusCode::kFailedPrecondition);
  request.set_rank(7);
  EXPECT_EQ(job.Evaluation(request, &response).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps

// JobCoordinator: what a lost worker does to the job under each
// cluster.on_worker_loss (job.h, "Worker loss"), with fake servers and
// workers driven by hand. A worker is lost by going silent: the others keep
// heartbeating and the coordinator's own sweeper declares it dead.
#include <atomic>
#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/config.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "scheduler/job.h"
#include "scheduler/job_test_util.h"

namespace shardps {
namespace {

using testing::Config;
using testing::FakeServerOps;
using testing::Finish;
using testing::RegisterAll;
using testing::Req;
using testing::StartOf;
using testing::Step;
using testing::WaitCheckpoints;

// Incarnations RegisterAll gives: server 0 is 1, worker r is 2 + r.
constexpr uint64_t kServerIncarnation = 1;

JobConfig LossConfig(
    ConsistencyMode mode, uint64_t every_steps,
    ClusterConfig::OnWorkerLoss policy = ClusterConfig::ON_WORKER_LOSS_UNSPECIFIED) {
  JobConfig c = Config(every_steps, mode);
  c.mutable_cluster()->set_dead_after_ms(400);
  c.mutable_cluster()->set_worker_deadline_ms(60000);
  if (policy != ClusterConfig::ON_WORKER_LOSS_UNSPECIFIED) {
    c.mutable_cluster()->set_on_worker_loss(policy);
  }
  return c;
}

// Heartbeats for the given members every 50 ms until destroyed.
class Heartbeats {
 public:
  struct Who {
    Role role;
    uint32_t index;
    uint64_t incarnation;
  };
  Heartbeats(JobCoordinator* job, const JobConfig& c, std::vector<Who> who)
      : thread_([this, job, fp = ConfigFingerprint(c), who = std::move(who)] {
          while (!stop_) {
            for (const Who& w : who) {
              HeartbeatRequest r;
              r.set_job_id(fp);
              r.set_role(w.role);
              r.set_index(w.index);
              r.set_incarnation(w.incarnation);
              HeartbeatResponse resp;
              (void)job->Heartbeat(r, &resp);
            }
            absl::SleepFor(absl::Milliseconds(50));
          }
        }) {}
  ~Heartbeats() {
    stop_ = true;
    thread_.join();
  }

 private:
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

// Polls JobStatus until worker `rank` is in `state` (20 s at most).
bool WaitWorkerState(const JobCoordinator& job, uint32_t rank, MemberState state) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (absl::Now() < deadline) {
    JobStatusResponse s;
    job.JobStatus(&s);
    for (const MemberStatus& m : s.members()) {
      if (m.role() == WORKER && m.index() == rank && m.state() == state) return true;
    }
    absl::SleepFor(absl::Milliseconds(10));
  }
  return false;
}

// Both workers' start points (the job formed); returns the generation.
absl::StatusOr<uint64_t> StartBoth(JobCoordinator* job) {
  auto s0 = StartOf(job, 0);
  if (!s0.ok()) return s0.status();
  auto s1 = StartOf(job, 1);
  if (!s1.ok()) return s1.status();
  return s0->generation();
}

// Whether worker `rank` may start `step` now (the clock does not hold it).
absl::StatusCode TryStep(JobCoordinator* job, uint32_t rank, uint64_t generation, uint64_t t) {
  return Step(job, rank, generation, t, /*timeout_ms=*/300).code();
}

// Records the active worker sets the coordinator sends the servers.
class ActiveSets {
 public:
  JobCoordinator::ServerNotifier Notifier() {
    return [this](const PartitionMapProto&, const std::vector<uint32_t>& active) {
      MutexLock lock(&mu_);
      sets_.push_back(active);
    };
  }
  std::vector<uint32_t> Last() const {
    MutexLock lock(&mu_);
    return sets_.empty() ? std::vector<uint32_t>{} : sets_.back();
  }

 private:
  mutable Mutex mu_;
  std::vector<std::vector<uint32_t>> sets_ ABSL_GUARDED_BY(mu_);
};

// The members as RegisterAll registers them (incarnations 1, 2, 3).
const Heartbeats::Who kServer0 = {SERVER, 0, kServerIncarnation};
const Heartbeats::Who kWorker0 = {WORKER, 0, 2};
const Heartbeats::Who kWorker1 = {WORKER, 1, 3};

// One started job of fake servers (FakeServerOps, set_job done) with every
// member registered (RegisterAll): `alive` heartbeat until Beat() replaces
// them, `lost` until Lose().
class LossJob {
 public:
  LossJob(const JobConfig& c, std::vector<Heartbeats::Who> alive,
          std::vector<Heartbeats::Who> lost = {}, JobCoordinator::ServerNotifier notifier = nullptr)
      : config_(c), ops_(c), job_(c, std::move(notifier), &ops_) {
    ops_.set_job(&job_);
    RegisterAll(&job_, c);
    Beat(std::move(alive));
    if (!lost.empty()) lost_ = std::make_unique<Heartbeats>(&job_, c, std::move(lost));
    job_.Start();
  }

  JobCoordinator& job() { return job_; }
  // The `lost` members go silent.
  void Lose() { lost_.reset(); }
  // Only `alive` heartbeat from now on (of the members given so far).
  void Beat(std::vector<Heartbeats::Who> alive) {
    alive_.reset();
    alive_ = std::make_unique<Heartbeats>(&job_, config_, std::move(alive));
  }

 private:
  const JobConfig config_;
  FakeServerOps ops_;
  JobCoordinator job_;
  // Declared after job_: their threads stop before it goes.
  std::unique_ptr<Heartbeats> alive_;
  std::unique_ptr<Heartbeats> lost_;
};

// Registers incarnation `incarnation` of server 0 once its slot's holder
// has been silent long enough (two heartbeat periods); 20 s at most.
absl::Status ReplaceServer0(JobCoordinator* job, const JobConfig& c, uint64_t incarnation) {
  RegisterResponse resp;
  absl::Status replaced;
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  do {
    replaced = job->Register(Req(c, SERVER, 0, incarnation), &resp);
    if (!replaced.ok()) absl::SleepFor(absl::Milliseconds(20));
  } while (!replaced.ok() && absl::Now() < deadline);
  return replaced;
}

// WAIT (BSP's default): the lost worker holds the clocks and stays in the
// servers' active set; its replacement resumes at its last tick and the
// job goes on.
TEST(WorkerLossTest, WaitHoldsTheClocksUntilTheWorkerIsBack) {
  const JobConfig c = LossConfig(BSP, 0);
  ASSERT_EQ(c.cluster().on_worker_loss(), ClusterConfig::WAIT);
  ActiveSets active;
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1}, active.Notifier());
  JobCoordinator& job = loss.job();
  auto s0 = StartOf(&job, 0);
  auto s1 = StartOf(&job, 1);
  ASSERT_TRUE(s0.ok() && s1.ok());
  const uint64_t g = s0->generation();
  for (uint64_t t = 0; t < 3; ++t) {
    ASSERT_TRUE(Step(&job, 0, g, t).ok());
    ASSERT_TRUE(Step(&job, 1, g, t).ok());
  }
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  ASSERT_TRUE(Step(&job, 0, g, 3).ok());
  EXPECT_EQ(TryStep(&job, 0, g, 4), absl::StatusCode::kDeadlineExceeded)
      << "a BSP clock went on without the lost worker";
  EXPECT_EQ(active.Last(), (std::vector<uint32_t>{0, 1}));
  // The supervisor starts worker 1 again: it resumes at clock 3.
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, WORKER, 1, 30), &resp).ok());
  auto back = StartOf(&job, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->clock(), 3u);
  EXPECT_EQ(back->generation(), g);
  std::thread w0([&] { EXPECT_TRUE(Step(&job, 0, g, 4).ok()); });
  Heartbeats beats1(&job, c, {{WORKER, 1, 30}});
  EXPECT_TRUE(Step(&job, 1, g, 3).ok());
  EXPECT_TRUE(Step(&job, 1, g, 4).ok());
  w0.join();
  ASSERT_TRUE(Finish(&job, 0, g).ok());
  ASSERT_TRUE(Finish(&job, 1, g).ok());
  EXPECT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(20)).ok());
}

// WAIT: a worker not back within worker_deadline_ms fails the job, naming it.
TEST(WorkerLossTest, WaitFailsTheJobNamingAWorkerPastItsDeadline) {
  JobConfig c = LossConfig(BSP, 0);
  c.mutable_cluster()->set_worker_deadline_ms(300);
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1});
  JobCoordinator& job = loss.job();
  ASSERT_TRUE(StartOf(&job, 0).ok());
  ASSERT_TRUE(StartOf(&job, 1).ok());
  loss.Lose();
  const absl::Status st = job.WaitDone(absl::Now() + absl::Seconds(20));
  EXPECT_EQ(st.code(), absl::StatusCode::kAborted) << st;
  EXPECT_NE(st.message().find("worker 1 dead for more than worker_deadline_ms"), std::string::npos)
      << st;
}

// REASSIGN (SSP's default): the others go on past the staleness bound, but
// the job is not done until the lost worker is back and has trained its
// share.
TEST(WorkerLossTest, ReassignGoesOnButEndsOnlyWithEveryShareTrained) {
  const JobConfig c = LossConfig(SSP, 0);
  ASSERT_EQ(c.cluster().on_worker_loss(), ClusterConfig::REASSIGN);
  ActiveSets active;
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1}, active.Notifier());
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  for (uint64_t t = 0; t < 6; ++t) ASSERT_TRUE(Step(&job, 0, g, t).ok()) << t;
  EXPECT_EQ(active.Last(), std::vector<uint32_t>{0});
  ASSERT_TRUE(Finish(&job, 0, g).ok());
  EXPECT_EQ(job.WaitDone(absl::Now() + absl::Milliseconds(500)).code(),
            absl::StatusCode::kDeadlineExceeded)
      << "the job ended with worker 1's share untrained";
  JobStatusResponse status;
  job.JobStatus(&status);
  EXPECT_NE(status.summary().find("worker 1: DEAD, data unfinished after 1 steps"),
            std::string::npos)
      << status.summary();
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, WORKER, 1, 30), &resp).ok());
  Heartbeats beats1(&job, c, {{WORKER, 1, 30}});
  auto back = StartOf(&job, 1);
  ASSERT_TRUE(back.ok()) << back.status();
  EXPECT_EQ(back->clock(), 1u);
  for (uint64_t t = 1; t < 6; ++t) ASSERT_TRUE(Step(&job, 1, g, t).ok()) << t;
  ASSERT_TRUE(Finish(&job, 1, g).ok());
  EXPECT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(20)).ok());
  job.JobStatus(&status);
  EXPECT_EQ(status.untrained_samples(), 0u);
}

// REASSIGN: a worker done with its own share is offered a lost worker's
// (once it has been lost for dead_after_ms), takes its slot as a new
// process and trains it to the end; the share is offered to one worker at
// a time.
TEST(WorkerLossTest, ReassignHandsALostShareToAFinishedWorker) {
  const JobConfig c = LossConfig(SSP, 0);
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  ASSERT_TRUE(Step(&job, 1, g, 1).ok());
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  for (uint64_t t = 0; t < 6; ++t) ASSERT_TRUE(Step(&job, 0, g, t).ok()) << t;
  ASSERT_TRUE(Finish(&job, 0, g).ok());
  auto offer = StartOf(&job, 0, g);
  ASSERT_TRUE(offer.ok()) << offer.status();
  ASSERT_TRUE(offer->has_adopt_rank()) << offer->DebugString();
  EXPECT_EQ(offer->adopt_rank(), 1u);
  // Not offered twice while the lease runs.
  EXPECT_EQ(StartOf(&job, 0, g, /*timeout_ms=*/200).status().code(),
            absl::StatusCode::kDeadlineExceeded);
  // Worker 0's process registers for rank 1 and trains its share.
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, WORKER, 1, 40), &resp).ok());
  Heartbeats adopter(&job, c, {{WORKER, 1, 40}});
  auto start = StartOf(&job, 1);
  ASSERT_TRUE(start.ok()) << start.status();
  EXPECT_EQ(start->clock(), 2u);
  EXPECT_EQ(start->position(), "w1@2");
  for (uint64_t t = 2; t < 6; ++t) ASSERT_TRUE(Step(&job, 1, g, t).ok()) << t;
  ASSERT_TRUE(Finish(&job, 1, g).ok());
  EXPECT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(20)).ok());
}

// REASSIGN: rank 0, done with its share and waiting at the barrier before
// its evaluation of the final weights, is handed the lost share there (the
// barrier would otherwise wait for it for ever).
TEST(WorkerLossTest, ReassignOffersALostShareAtTheTrainedBarrier) {
  const JobConfig c = LossConfig(SSP, 0);
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  for (uint64_t t = 0; t < 4; ++t) ASSERT_TRUE(Step(&job, 0, g, t).ok()) << t;
  MetricsReport done;
  done.set_rank(0);
  done.set_step(4);
  done.set_done(true);
  done.set_generation(g);
  ASSERT_TRUE(job.ReportMetrics(done).ok());
  BarrierRequest barrier;
  barrier.set_role(WORKER);
  barrier.set_index(0);
  barrier.set_name("trained");
  barrier.set_generation(g);
  barrier.set_timeout_ms(20000);
  BarrierResponse response;
  ASSERT_TRUE(job.Barrier(barrier, &response).ok());
  ASSERT_TRUE(response.has_adopt_rank());
  EXPECT_EQ(response.adopt_rank(), 1u);
}

// DROP: the job ends done without the lost worker's share, says how much
// was left untrained, and still takes its final checkpoint.
TEST(WorkerLossTest, DropEndsDoneCountingTheUntrainedSamples) {
  const JobConfig c = LossConfig(SSP, 4, ClusterConfig::DROP);
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  // Worker 1's last tick says how many samples its share trained (300 of
  // two batches: a short last batch), which no report of it carries.
  WaitClockRequest wait;
  wait.set_rank(1);
  wait.set_step(1);
  wait.set_timeout_ms(20000);
  wait.set_generation(g);
  WaitClockResponse waited;
  ASSERT_TRUE(job.WaitClock(wait, &waited).ok());
  TickRequest tick;
  tick.set_rank(1);
  tick.set_clock(2);
  tick.set_generation(g);
  tick.set_samples(2 * c.training().batch_size() + 1);
  TickResponse ticked;
  EXPECT_EQ(job.Tick(tick, &ticked).code(), absl::StatusCode::kInvalidArgument)
      << "more samples than clock x batch_size";
  tick.set_samples(300);
  ASSERT_TRUE(job.Tick(tick, &ticked).ok());
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  for (uint64_t t = 0; t < 6; ++t) ASSERT_TRUE(Step(&job, 0, g, t).ok()) << t;
  MetricsReport done;
  done.set_rank(0);
  done.set_step(6);
  done.set_samples(6 * c.training().batch_size());
  done.set_done(true);
  done.set_final(true);
  done.set_generation(g);
  ASSERT_TRUE(job.ReportMetrics(done).ok());
  ASSERT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(20)).ok());
  JobStatusResponse status;
  job.JobStatus(&status);
  // Worker 1 stopped at clock 2 of the 6 worker 0 trained.
  EXPECT_EQ(status.untrained_samples(), 4u * c.training().batch_size());
  EXPECT_EQ(status.total_samples(), 6u * c.training().batch_size() + 300);
  const std::vector<uint64_t> cuts = job.Checkpoints();
  ASSERT_FALSE(cuts.empty());
  EXPECT_EQ(cuts.back(), 6u) << "no final checkpoint";
}

// Every worker lost at once and back later (REASSIGN): the periodic cuts,
// and the final one, go on after they are back.
TEST(WorkerLossTest, CutsGoOnAfterEveryWorkerWasLost) {
  const JobConfig c = LossConfig(SSP, 4);
  LossJob loss(c, {kServer0}, {kWorker0, kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 0, g, 0).ok());
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 0, DEAD));
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  RegisterResponse resp;
  ASSERT_TRUE(job.Register(Req(c, WORKER, 0, 20), &resp).ok());
  ASSERT_TRUE(job.Register(Req(c, WORKER, 1, 30), &resp).ok());
  Heartbeats beats01(&job, c, {{WORKER, 0, 20}, {WORKER, 1, 30}});
  std::vector<std::thread> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([&job, r] {
      auto start = StartOf(&job, r);
      ASSERT_TRUE(start.ok()) << start.status();
      EXPECT_EQ(start->clock(), 1u);
      for (uint64_t t = 1; t < 10; ++t) {
        ASSERT_TRUE(Step(&job, r, start->generation(), t).ok()) << t;
      }
      ASSERT_TRUE(Finish(&job, r, start->generation()).ok());
    });
  }
  for (std::thread& w : workers) w.join();
  ASSERT_TRUE(job.WaitDone(absl::Now() + absl::Seconds(20)).ok());
  EXPECT_EQ(job.Checkpoints(), (std::vector<uint64_t>{4, 8, 10}));
}

// After a rollback the clocks resume only once every worker has registered
// again, so a worker back a little later than the others trains the same
// clocks as without the fault (REASSIGN would otherwise let the others go
// on).
TEST(WorkerLossTest, ClocksResumeAfterARollbackOnceEveryWorkerRegistered) {
  const JobConfig c = LossConfig(SSP, 0);
  LossJob loss(c, {kServer0, kWorker0}, {kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 0, g, 0).ok());
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  loss.Lose();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  // A node lost: the server is replaced too.
  loss.Beat({});
  // A new process takes the slot once its holder is silent (two periods).
  const absl::Status replaced = ReplaceServer0(&job, c, 11);
  ASSERT_TRUE(replaced.ok()) << replaced;
  loss.Beat({{SERVER, 0, 11}, kWorker0});
  RegisterResponse resp;
  auto r0 = StartOf(&job, 0, g);
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_GT(r0->generation(), g);
  EXPECT_EQ(TryStep(&job, 0, r0->generation(), 0), absl::StatusCode::kDeadlineExceeded)
      << "the clocks resumed before worker 1 registered";
  ASSERT_TRUE(job.Register(Req(c, WORKER, 1, 30), &resp).ok());
  Heartbeats beats1(&job, c, {{WORKER, 1, 30}});
  EXPECT_EQ(TryStep(&job, 0, r0->generation(), 0), absl::StatusCode::kDeadlineExceeded)
      << "the clocks resumed before worker 1 started in the new generation";
  auto r1 = StartOf(&job, 1);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->generation(), r0->generation());
  EXPECT_TRUE(Step(&job, 0, r0->generation(), 0, 20000).ok());
  // The recovery is complete once both restarted.
  JobStatusResponse status;
  job.JobStatus(&status);
  ASSERT_GE(status.recoveries_size(), 1);
  EXPECT_TRUE(status.recoveries(status.recoveries_size() - 1).complete());
}

// WAIT: a restarted worker that cannot redo its step exactly (part of its
// push reached the servers, RollBackRequest) has the job roll back: every
// worker starts again in a new generation. A request of an older generation
// changes nothing; a policy other than WAIT refuses it.
TEST(WorkerLossTest, AWorkerThatCannotRedoItsStepRollsTheJobBack) {
  const JobConfig c = LossConfig(BSP, 0);
  LossJob loss(c, {kServer0, kWorker0, kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 0, g, 0).ok());
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  JobStatusResponse before;
  job.JobStatus(&before);
  RollBackRequest ask;
  ask.set_rank(1);
  ask.set_clock(1);
  ask.set_generation(g);
  ask.set_incarnation(3);
  ask.set_cause("server 0 has applied clock 1");
  ASSERT_TRUE(job.RequestRollBack(ask).ok());
  auto r0 = StartOf(&job, 0, g);
  ASSERT_TRUE(r0.ok()) << r0.status();
  EXPECT_GT(r0->generation(), g);
  auto r1 = StartOf(&job, 1, g);
  ASSERT_TRUE(r1.ok()) << r1.status();
  EXPECT_EQ(r1->generation(), r0->generation());
  EXPECT_EQ(r1->clock(), 0u) << "no checkpoint yet: back to the initial values";
  JobStatusResponse status;
  job.JobStatus(&status);
  const int n = before.recoveries_size() + 1;
  ASSERT_EQ(status.recoveries_size(), n);
  EXPECT_EQ(status.recoveries(n - 1).kind(), "rollback");
  EXPECT_NE(status.recoveries(n - 1).cause().find("worker 1 cannot redo step 1 exactly"),
            std::string::npos)
      << status.recoveries(n - 1).cause();
  // Asked again from the old generation: the rollback covers it.
  ASSERT_TRUE(job.RequestRollBack(ask).ok());
  JobStatusResponse after;
  job.JobStatus(&after);
  EXPECT_EQ(after.recoveries_size(), n);
  EXPECT_EQ(after.generation(), r0->generation());

  const JobConfig ssp = LossConfig(SSP, 0);
  FakeServerOps ssp_ops(ssp);
  JobCoordinator other(ssp, nullptr, &ssp_ops);
  ssp_ops.set_job(&other);
  RegisterAll(&other, ssp);
  EXPECT_EQ(other.RequestRollBack(ask).code(), absl::StatusCode::kFailedPrecondition);
}

// A node lost: the worker lost with the server is declared dead only after
// the rollback began (it was still alive when the servers restored). The
// clocks still wait for it to start in the new generation, and the
// recovery completes when it does.
TEST(WorkerLossTest, AWorkerLostDuringTheRollbackIsWaitedFor) {
  const JobConfig c = LossConfig(SSP, 0);
  LossJob loss(c, {kServer0, kWorker0, kWorker1});
  JobCoordinator& job = loss.job();
  const absl::StatusOr<uint64_t> started = StartBoth(&job);
  ASSERT_TRUE(started.ok()) << started.status();
  const uint64_t g = *started;
  ASSERT_TRUE(Step(&job, 0, g, 0).ok());
  ASSERT_TRUE(Step(&job, 1, g, 0).ok());
  // The node's server and worker die; the server's replacement registers
  // before the worker is declared dead.
  loss.Beat({kWorker0});
  const absl::Status replaced = ReplaceServer0(&job, c, 11);
  ASSERT_TRUE(replaced.ok()) << replaced;
  RegisterResponse resp;
  Heartbeats server(&job, c, {{SERVER, 0, 11}});
  auto r0 = StartOf(&job, 0, g);
  ASSERT_TRUE(r0.ok()) << r0.status();
  ASSERT_TRUE(WaitWorkerState(job, 1, DEAD));
  EXPECT_EQ(TryStep(&job, 0, r0->generation(), 0), absl::StatusCode::kDeadlineExceeded)
      << "worker 0 went on alone after the rollback";
  ASSERT_TRUE(job.Register(Req(c, WORKER, 1, 30), &resp).ok());
  Heartbeats beats1(&job, c, {{WORKER, 1, 30}});
  ASSERT_TRUE(StartOf(&job, 1).ok());
  EXPECT_TRUE(Step(&job, 0, r0->generation(), 0, 20000).ok());
  JobStatusResponse status;
  job.JobStatus(&status);
  ASSERT_GE(status.recoveries_size(), 1);
  EXPECT_TRUE(status.recoveries(status.recoveries_size() - 1).complete());
}

}  // namespace
}  // namespace shardps

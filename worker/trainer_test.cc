// The trainer against a fake job clock and in-process tables: the order of
// clock waits, pulls, pushes and ticks of each step pipeline, refusals,
// resuming, max_steps and metrics reports.
#include "worker/trainer.h"

#include <algorithm>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/generation.h"
#include "gtest/gtest.h"
#include "worker/data/synthetic.h"
#include "worker/param_store.h"
#include "worker/trainer_test_fakes.h"

namespace shardps {
namespace {

using testing::Event;
using testing::EventLog;
using testing::FakeClock;
using testing::RecordingStore;
using testing::ToString;

constexpr int kFiles = 3;
constexpr int kLinesPerFile = 48;
constexpr int kBatch = 16;
// Two epochs of every file, one worker.
constexpr uint64_t kSteps = 2 * kFiles * kLinesPerFile / kBatch;

std::vector<std::string>& TrainFiles() {
  static auto* files = new std::vector<std::string>;
  return *files;
}

// `training`: more training settings (e.g. the embedding cache).
JobConfig Config(ConsistencyMode mode, bool prefetch, const std::string& training = "") {
  auto config = ParseJobConfig(
      absl::StrCat(R"pb(
    name: "trainer-test"
    tables {
      id: 1 name: "categorical" kind: SPARSE dim: 4 seed: 17
      init { kind: UNIFORM scale: 0.05 }
      optimizer { adagrad { learning_rate: 0.1 } }
    }
    tables {
      id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
      optimizer { sgd { learning_rate: 0.05 } }
    }
    model { kind: DLRM bottom_mlp: [8, 4] top_mlp: [8] dense_table: "mlp" }
    data { format: CRITEO synthetic_dir: "/unused" }
    training {
      batch_size: )pb",
                   kBatch, R"pb( epochs: 2 shuffle_seed: 5 intra_op_threads: 1
      prefetch: )pb",
                   prefetch ? "true" : "false", R"pb(
      lr_schedule { warmup_steps: 4 } )pb",
                   training, R"pb(
    }
    cluster { num_servers: 1 num_workers: 1 num_partitions: 16 mode: )pb",
                   ConsistencyMode_Name(mode), mode == SSP ? " staleness: 2" : "", " }"),
      "trainer_test.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

// What one Train() did.
struct TrainRun {
  absl::Status status;
  TrainSummary summary;
  std::vector<Event> events;
  std::vector<std::string> losses;  // "step loss" lines.
  std::vector<MetricsReport> reports;
  std::set<uint32_t> ranks;
  uint64_t checksum = 0;     // Of the final weights, when track_keys.
  uint64_t rows_pulled = 0;  // Rows of the training pulls, every table.

  std::vector<Event> Only(Event::Kind kind) const {
    std::vector<Event> out;
    for (const Event& e : events) {
      if (e.kind == kind) out.push_back(e);
    }
    return out;
  }
  // Index of the first event of `kind` for `n`; -1 if none.
  int IndexOf(Event::Kind kind, uint64_t n, bool ok = true) const {
    for (size_t i = 0; i < events.size(); ++i) {
      if (events[i].kind == kind && events[i].n == n && events[i].ok == ok) {
        return static_cast<int>(i);
      }
    }
    return -1;
  }
};

class TrainerTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    if (!TrainFiles().empty()) return;
    data::SyntheticModel model(2024);
    uint64_t state = 99;
    for (int f = 0; f < kFiles; ++f) {
      std::string text;
      data::SyntheticExample example;
      for (int i = 0; i < kLinesPerFile; ++i) {
        model.Sample(&state, &example);
        data::SyntheticModel::AppendLine(example, &text);
      }
      const std::string path = absl::StrCat(::testing::TempDir(), "/train-", f, ".tsv");
      std::ofstream(path) << text;
      TrainFiles().push_back(path);
    }
  }

  // Trains with `options` (config, train files, params, clock and loss log
  // filled in here) on fresh in-process tables, through `clock` if set.
  TrainRun Train(const JobConfig& config, FakeClock* clock, EventLog* log,
                 TrainerOptions options = Options()) {
    TrainRun run;
    auto local = MakeLocalParamStore(config);
    EXPECT_TRUE(local.ok()) << local.status();
    RecordingStore store(*std::move(local), log);
    store.pulls_with_state = replay_;
    options.config = config;
    options.train_files = TrainFiles();
    options.params = &store;
    options.clock = clock;
    options.loss_log = absl::StrCat(::testing::TempDir(), "/losses-", ++runs_, ".txt");
    auto trainer = Trainer::Create(options);
    EXPECT_TRUE(trainer.ok()) << trainer.status();
    if (!trainer.ok()) return run;
    run.status = (*trainer)->InitDenseWeights();
    if (run.status.ok()) {
      auto summary = (*trainer)->Train();
      run.status = summary.status();
      if (summary.ok()) run.summary = *summary;
    }
    if (run.status.ok() && options.track_keys) {
      auto checksum = (*trainer)->WeightsChecksum();
      EXPECT_TRUE(checksum.ok()) << checksum.status();
      if (checksum.ok()) run.checksum = *checksum;
    }
    trainer->reset();
    run.rows_pulled = store.train_rows_pulled;
    run.events = log->events();
    std::ifstream in(options.loss_log);
    for (std::string line; std::getline(in, line);) run.losses.push_back(line);
    if (clock != nullptr) {
      run.reports = clock->reports();
      run.ranks = clock->ranks();
    }
    return run;
  }

  // No metrics reports unless a test asks for them.
  static TrainerOptions Options() {
    TrainerOptions o;
    o.report_every = absl::Hours(1);
    return o;
  }

  static int runs_;
  bool replay_ = false;  // The store serves state pulls (trainer replays).
};
int TrainerTest::runs_ = 0;

// What every run with a clock must respect: a step is pulled only once the
// clock allowed it, clock t + 1 is ticked only after step t's push, and
// pushes and ticks go up one by one.
void CheckProtocol(const TrainRun& run, uint64_t first_step) {
  std::set<uint64_t> allowed;
  std::set<uint64_t> pushed;
  uint64_t next_push = first_step, next_tick = first_step + 1;
  for (const Event& e : run.events) {
    switch (e.kind) {
      case Event::kWait:
      case Event::kProbe:
        if (e.ok) allowed.insert(e.n);
        break;
      case Event::kPull:
        EXPECT_TRUE(allowed.count(e.n)) << "step " << e.n << " pulled before the clock "
                                        << "allowed it:\n"
                                        << ToString(run.events);
        break;
      case Event::kPush:
        EXPECT_EQ(e.n, next_push++) << ToString(run.events);
        pushed.insert(e.n);
        break;
      case Event::kTick:
        EXPECT_EQ(e.n, next_tick++) << ToString(run.events);
        EXPECT_TRUE(pushed.count(e.n - 1))
            << "clock " << e.n << " ticked before step " << e.n - 1 << "'s push:\n"
            << ToString(run.events);
        EXPECT_FALSE(e.position.empty());
        break;
    }
  }
}

// The first number of each "step loss" line.
std::vector<uint64_t> LossSteps(const TrainRun& run) {
  std::vector<uint64_t> steps;
  for (const std::string& line : run.losses) {
    steps.push_back(std::stoull(std::vector<std::string>(absl::StrSplit(line, ' '))[0]));
  }
  return steps;
}

std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> out;
  for (uint64_t i = from; i < to; ++i) out.push_back(i);
  return out;
}

TEST_F(TrainerTest, BspWaitsPullsPushesAndTicksEachStepInOrder) {
  EventLog log;
  FakeClock clock(&log);
  const TrainRun run = Train(Config(BSP, /*prefetch=*/true), &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  EXPECT_EQ(run.summary.samples, kSteps * kBatch);
  std::vector<std::string> want;
  for (uint64_t t = 0; t < kSteps; ++t) {
    for (const std::string& e : {absl::StrCat("wait ", t), absl::StrCat("pull ", t),
                                 absl::StrCat("push ", t), absl::StrCat("tick ", t + 1)}) {
      want.push_back(e);
    }
  }
  std::vector<std::string> got;
  for (const Event& e : run.events) got.push_back(ToString(e));
  EXPECT_EQ(got, want);
  CheckProtocol(run, 0);
  // Each tick carries the data position after its step: all different.
  std::set<std::string> positions;
  for (const Event& e : run.Only(Event::kTick)) positions.insert(e.position);
  EXPECT_EQ(positions.size(), kSteps);
  EXPECT_EQ(LossSteps(run), Range(0, kSteps));
  EXPECT_EQ(run.ranks, std::set<uint32_t>{0});
}

TEST_F(TrainerTest, LocalModeTakesTheSameStepsAsAnOpenClock) {
  const JobConfig config = Config(BSP, true);
  EventLog local_log;
  const TrainRun local = Train(config, nullptr, &local_log);
  ASSERT_TRUE(local.status.ok()) << local.status;
  EventLog log;
  FakeClock clock(&log);
  const TrainRun ps = Train(config, &clock, &log);
  ASSERT_TRUE(ps.status.ok()) << ps.status;
  EXPECT_EQ(local.summary.steps, kSteps);
  ASSERT_EQ(local.losses.size(), kSteps);
  EXPECT_EQ(local.losses, ps.losses);  // Bit for bit (%.17g).
  EXPECT_EQ(local.Only(Event::kPush).size(), kSteps);
}

TEST_F(TrainerTest, LocalPrefetchPullsTheNextStepBeforePushing) {
  EventLog log;
  const TrainRun run = Train(Config(SSP, true), nullptr, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  EXPECT_EQ(LossSteps(run), Range(0, kSteps));
  for (uint64_t t = 0; t + 1 < kSteps; ++t) {
    EXPECT_LT(run.IndexOf(Event::kPull, t + 1), run.IndexOf(Event::kPush, t))
        << "step " << t + 1 << " was not prefetched:\n"
        << ToString(run.events);
  }
  // Steps 1 on pull in two parts (read-your-own-writes prefetch).
  EXPECT_EQ(run.Only(Event::kPull).size(), 2 * kSteps - 1);
}

TEST_F(TrainerTest, SspPrefetchProbesAndPullsTheNextStepBeforeTicking) {
  EventLog log;
  FakeClock clock(&log);
  const TrainRun run = Train(Config(SSP, true), &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  CheckProtocol(run, 0);
  EXPECT_EQ(run.Only(Event::kTick).size(), kSteps);
  EXPECT_EQ(run.Only(Event::kPull).size(), 2 * kSteps - 1);
  // Step t + 1 is probed (not waited for) and its rows that step t does not
  // push are pulled once step t - 1's push is acknowledged: before step t's
  // push is issued, and so before clock t + 1 is ticked. The rest of step
  // t + 1 is pulled after step t's push. Only step 0 waits for the clock.
  for (uint64_t t = 0; t + 1 < kSteps; ++t) {
    const int probe = run.IndexOf(Event::kProbe, t + 1);
    ASSERT_GE(probe, 0) << "no probe for step " << t + 1 << ":\n" << ToString(run.events);
    EXPECT_LT(probe, run.IndexOf(Event::kTick, t + 1)) << ToString(run.events);
    EXPECT_LT(run.IndexOf(Event::kPull, t + 1), run.IndexOf(Event::kPush, t))
        << ToString(run.events);
  }
  for (const Event& e : run.Only(Event::kWait)) EXPECT_EQ(e.n, 0u) << ToString(run.events);
  EXPECT_EQ(LossSteps(run), Range(0, kSteps));
}

// Read-your-own-writes prefetch: with one worker, whose only staleness is
// its own, prefetch changes nothing, bit for bit: per-step losses and the
// final weights (embedding rows and dense chunks) are those of the
// synchronous steps, with a clock and in local mode, and whether the rows
// step t pushes are pulled after its push or pulled before it and replayed
// (a store that serves optimizer state). Without it, every prefetched step
// would miss the previous step's dense update.
TEST_F(TrainerTest, PrefetchSeesItsOwnPushesBitForBit) {
  TrainerOptions o = Options();
  o.track_keys = true;
  for (const bool replay : {false, true})
    for (const bool with_clock : {true, false}) {
      SCOPED_TRACE(absl::StrCat(with_clock ? "with a clock" : "local mode",
                                replay ? ", replayed" : ", waited for"));
      replay_ = replay;
      EventLog sync_log, log;
      FakeClock sync_clock(&sync_log), clock(&log);
      const TrainRun sync =
          Train(Config(SSP, false), with_clock ? &sync_clock : nullptr, &sync_log, o);
      const TrainRun run = Train(Config(SSP, true), with_clock ? &clock : nullptr, &log, o);
      ASSERT_TRUE(sync.status.ok()) << sync.status;
      ASSERT_TRUE(run.status.ok()) << run.status;
      // Really prefetched: step t + 1 partly pulled before step t's push;
      // replayed, wholly (both parts).
      for (uint64_t t = 0; t + 1 < kSteps; ++t) {
        const int push = run.IndexOf(Event::kPush, t);
        int pulls_before = 0;
        for (int i = 0; i < push; ++i) {
          pulls_before += run.events[i].kind == Event::kPull && run.events[i].n == t + 1;
        }
        EXPECT_EQ(pulls_before, replay ? 2 : 1) << "step " << t + 1 << ":\n"
                                                << ToString(run.events);
      }
      ASSERT_EQ(sync.losses.size(), kSteps);
      EXPECT_EQ(run.losses, sync.losses);  // %.17g
      EXPECT_NE(sync.checksum, 0u);
      EXPECT_EQ(run.checksum, sync.checksum);
    }
}

// The embedding cache with one worker: the job's minimum clock is the
// worker's own, so a cached row (the servers' row when read, plus every
// own push since) is exactly the servers' row, and the run is the one
// without the cache, bit for bit, in every pipeline: with prefetch (the
// replay feeds the cache), without, and with prefetches refused (each step
// pulled alone). It pulls fewer rows: a row read at clock m serves steps up
// to m + 2 in SSP(2).
TEST_F(TrainerTest, CacheWithOneWorkerChangesNothingBitForBitAndPullsFewerRows) {
  TrainerOptions o = Options();
  o.track_keys = true;
  replay_ = true;  // The store serves rows with their optimizer state.
  struct Case {
    const char* name;
    bool prefetch;
    bool probes;
  };
  for (const Case& c : {Case{"prefetch", true, true}, Case{"no prefetch", false, true},
                        Case{"prefetches refused", true, false}}) {
    SCOPED_TRACE(c.name);
    EventLog plain_log, log;
    FakeClock plain_clock(&plain_log), clock(&log);
    plain_clock.allow_probes = clock.allow_probes = c.probes;
    clock.report_min_clock = true;
    const TrainRun plain = Train(Config(SSP, c.prefetch), &plain_clock, &plain_log, o);
    const TrainRun run =
        Train(Config(SSP, c.prefetch, "cache { max_rows: 100000 }"), &clock, &log, o);
    ASSERT_TRUE(plain.status.ok()) << plain.status;
    ASSERT_TRUE(run.status.ok()) << run.status;
    CheckProtocol(run, 0);
    ASSERT_EQ(plain.losses.size(), kSteps);
    EXPECT_EQ(run.losses, plain.losses);  // %.17g
    EXPECT_NE(plain.checksum, 0u);
    EXPECT_EQ(run.checksum, plain.checksum);
    const CacheSummary& cs = run.summary.cache;
    EXPECT_FALSE(plain.summary.cache.on);
    EXPECT_TRUE(cs.on);
    EXPECT_GT(cs.lookups, 0u);
    EXPECT_GT(cs.hits, cs.lookups / 10) << "hits " << cs.hits << " of " << cs.lookups;
    EXPECT_EQ(cs.bytes_saved, cs.hits * (8 + 4 * 4));  // Dim 4, fp32.
    EXPECT_LE(cs.staleness_max, 2u);
    EXPECT_GT(cs.staleness_mean, 0.0);
    EXPECT_EQ(run.rows_pulled + cs.hits, plain.rows_pulled);
  }
}

// Without a minimum clock from the scheduler a row is known to hold only
// what a pull for its own step must (pushes of steps < t - s): it serves no
// later step. Only rows read before step s + 1 (which every push of steps
// < 0 vacuously is in) serve steps up to s: the hits of a whole run are
// those of its first s + 1 steps.
TEST_F(TrainerTest, CacheServesNoLaterStepWithoutAMinimumClock) {
  replay_ = true;
  EventLog log, first_log;
  FakeClock clock(&log), first_clock(&first_log);
  const TrainRun run = Train(Config(SSP, true, "cache { }"), &clock, &log);
  TrainerOptions o = Options();
  o.max_steps = 3;  // SSP(2): steps 0..2.
  const TrainRun first = Train(Config(SSP, true, "cache { }"), &first_clock, &first_log, o);
  ASSERT_TRUE(run.status.ok()) << run.status;
  ASSERT_TRUE(first.status.ok()) << first.status;
  EXPECT_TRUE(run.summary.cache.on);
  EXPECT_GT(run.summary.cache.lookups, first.summary.cache.lookups);
  EXPECT_EQ(run.summary.cache.hits, first.summary.cache.hits);
  EXPECT_LE(run.summary.cache.staleness_max, 2u);
}

// BSP keeps the cache inert: the same calls, rows and losses as without it.
// So does a store that cannot serve optimizer state (values on the wire
// other than fp32), and local mode.
TEST_F(TrainerTest, CacheIsOffInBspWithoutStateAndInLocalMode) {
  TrainerOptions o = Options();
  o.track_keys = true;
  struct Case {
    const char* name;
    ConsistencyMode mode;
    bool state;
    bool with_clock;
  };
  for (const Case& c : {Case{"BSP", BSP, true, true}, Case{"no state", SSP, false, true},
                        Case{"local mode", SSP, true, false}}) {
    SCOPED_TRACE(c.name);
    replay_ = c.state;
    EventLog plain_log, log;
    FakeClock plain_clock(&plain_log), clock(&log);
    clock.report_min_clock = true;
    const TrainRun plain =
        Train(Config(c.mode, true), c.with_clock ? &plain_clock : nullptr, &plain_log, o);
    const TrainRun run =
        Train(Config(c.mode, true, "cache { }"), c.with_clock ? &clock : nullptr, &log, o);
    ASSERT_TRUE(run.status.ok()) << run.status;
    EXPECT_FALSE(run.summary.cache.on);
    EXPECT_EQ(run.summary.cache.lookups, 0u);
    EXPECT_EQ(ToString(run.events), ToString(plain.events));
    EXPECT_EQ(run.rows_pulled, plain.rows_pulled);
    EXPECT_EQ(run.losses, plain.losses);
    EXPECT_EQ(run.checksum, plain.checksum);
  }
}

TEST_F(TrainerTest, RefusedPrefetchesFallBackToTheSynchronousStep) {
  // The clock never allows a step early: each step waits for the clock
  // after the previous step's tick, and so trains exactly like SSP without
  // prefetch.
  EventLog log;
  FakeClock clock(&log);
  clock.allow_probes = false;
  const TrainRun run = Train(Config(SSP, true), &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps);
  CheckProtocol(run, 0);
  for (uint64_t t = 1; t < kSteps; ++t) {
    const int wait = run.IndexOf(Event::kWait, t);
    ASSERT_GE(wait, 0) << ToString(run.events);
    EXPECT_LT(run.IndexOf(Event::kTick, t), wait) << ToString(run.events);
    EXPECT_LT(wait, run.IndexOf(Event::kPull, t)) << ToString(run.events);
  }

  EventLog sync_log;
  FakeClock sync_clock(&sync_log);
  const TrainRun sync = Train(Config(SSP, false), &sync_clock, &sync_log);
  ASSERT_TRUE(sync.status.ok()) << sync.status;
  ASSERT_EQ(sync.losses.size(), kSteps);
  EXPECT_EQ(run.losses, sync.losses);
}

TEST_F(TrainerTest, ReportsCarryRankAndStep) {
  EventLog log;
  FakeClock clock(&log);
  TrainerOptions o = Options();
  o.rank = 1;
  // Rank 1 of 2 is dealt whole files (worker/data/shard_plan.h): one of the
  // 3 in epoch 0, two in epoch 1.
  o.num_workers = 2;
  o.report_every = absl::ZeroDuration();
  o.start_step = 5;
  const TrainRun run = Train(Config(SSP, true), &clock, &log, o);
  ASSERT_TRUE(run.status.ok()) << run.status;  // Failing reports do not stop training.
  const uint64_t steps = 3 * kLinesPerFile / kBatch;
  EXPECT_EQ(run.summary.steps, steps);
  EXPECT_EQ(run.ranks, std::set<uint32_t>{1});
  ASSERT_EQ(run.reports.size(), steps);
  for (uint64_t i = 0; i < steps; ++i) {
    EXPECT_EQ(run.reports[i].rank(), 1u);
    EXPECT_EQ(run.reports[i].step(), 5 + i + 1);
    EXPECT_EQ(run.reports[i].samples(), (i + 1) * kBatch);
    EXPECT_GT(run.reports[i].train_loss(), 0);
    EXPECT_FALSE(run.reports[i].done());
  }
}

// The same for each pipeline that runs with a clock: synchronous in BSP and
// in SSP without prefetch, prefetching in SSP with prefetch.
struct Pipeline {
  const char* name;
  ConsistencyMode mode;
  bool prefetch;
};

class TrainerPipelineTest : public TrainerTest, public ::testing::WithParamInterface<Pipeline> {
 protected:
  JobConfig PipelineConfig() { return Config(GetParam().mode, GetParam().prefetch); }
};

TEST_P(TrainerPipelineTest, RefusedClockWaitEndsTraining) {
  for (uint64_t at : {0, 5}) {
    SCOPED_TRACE(at);
    EventLog log;
    FakeClock clock(&log);
    clock.refuse_wait_at = at;
    const TrainRun run = Train(PipelineConfig(), &clock, &log);
    EXPECT_TRUE(IsStaleGeneration(run.status)) << run.status;
    CheckProtocol(run, 0);
    for (const Event& e : run.events) {
      if (e.kind == Event::kPush || e.kind == Event::kPull) {
        EXPECT_LT(e.n, at) << ToString(run.events);
      }
    }
    // Refused once: no asking again.
    EXPECT_EQ(
        std::count_if(run.events.begin(), run.events.end(), [](const Event& e) { return !e.ok; }),
        1)
        << ToString(run.events);
    // The steps before: all logged (but step at - 1 of the async push,
    // whose chain made the refused probe).
    EXPECT_EQ(LossSteps(run), Range(0, run.losses.size()));
    EXPECT_LE(run.losses.size(), at);
    EXPECT_GE(run.losses.size() + 1, at);
  }
}

TEST_P(TrainerPipelineTest, RefusedTickEndsTraining) {
  EventLog log;
  FakeClock clock(&log);
  clock.refuse_tick_at = 4;
  clock.refusal = absl::FailedPreconditionError("refused");
  const TrainRun run = Train(PipelineConfig(), &clock, &log);
  EXPECT_EQ(run.status, clock.refusal);
  CheckProtocol(run, 0);
  const std::vector<Event> pushes = run.Only(Event::kPush);
  ASSERT_FALSE(pushes.empty());
  EXPECT_EQ(pushes.back().n, 3u) << "pushed after the refused tick:\n" << ToString(run.events);
  EXPECT_EQ(run.Only(Event::kTick).size(), 3u);
}

TEST_P(TrainerPipelineTest, ResumesAtStartStepAndPosition) {
  EventLog full_log;
  FakeClock full_clock(&full_log);
  const TrainRun full = Train(PipelineConfig(), &full_clock, &full_log);
  ASSERT_TRUE(full.status.ok()) << full.status;
  const std::vector<Event> full_ticks = full.Only(Event::kTick);
  ASSERT_EQ(full_ticks.size(), kSteps);

  constexpr uint64_t kStart = 7;
  EventLog log;
  FakeClock clock(&log);
  TrainerOptions o = Options();
  o.start_step = kStart;
  o.start_position = full_ticks[kStart - 1].position;  // Clock kStart's.
  const TrainRun run = Train(PipelineConfig(), &clock, &log, o);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, kSteps - kStart);
  CheckProtocol(run, kStart);
  ASSERT_FALSE(run.events.empty());
  EXPECT_EQ(ToString(run.events[0]), absl::StrCat("wait ", kStart));
  // The same clocks with the same data positions as the uninterrupted run.
  const std::vector<Event> ticks = run.Only(Event::kTick);
  ASSERT_EQ(ticks.size(), kSteps - kStart);
  for (size_t i = 0; i < ticks.size(); ++i) {
    EXPECT_EQ(ticks[i].n, full_ticks[kStart + i].n);
    EXPECT_EQ(ticks[i].position, full_ticks[kStart + i].position) << "clock " << ticks[i].n;
  }
  EXPECT_EQ(LossSteps(run), Range(kStart, kSteps));
  // The job's samples of this share count those before the start too.
  EXPECT_EQ(run.summary.samples, (kSteps - kStart) * kBatch);
  EXPECT_EQ(run.summary.job_samples, kSteps * kBatch);
  EXPECT_EQ(full.summary.job_samples, kSteps * kBatch);
}

// max_steps 7, or the clock refusing step 7 (early stopping): same steps.
TEST_P(TrainerPipelineTest, HonoursMaxStepsAndAStopByTheClock) {
  for (const bool by_clock : {false, true}) {
    for (uint64_t start : {0, 3}) {
      SCOPED_TRACE(absl::StrCat("start ", start, by_clock ? ", stopped by the clock" : ""));
      EventLog log;
      FakeClock clock(&log);
      TrainerOptions o = Options();
      if (by_clock) clock.refuse_wait_at = 7;
      if (by_clock) clock.refusal = absl::OutOfRangeError("training stopped at clock 7");
      if (!by_clock) o.max_steps = 7;  // A clock: the last step is 6.
      o.start_step = start;
      const TrainRun run = Train(PipelineConfig(), &clock, &log, o);
      ASSERT_TRUE(run.status.ok()) << run.status;
      EXPECT_EQ(run.summary.steps, 7 - start);
      CheckProtocol(run, start);
      for (const Event& e : run.events) {
        if (e.kind == Event::kTick) {
          EXPECT_LE(e.n, 7u);
        } else if (e.ok) {
          EXPECT_LT(e.n, 7u) << ToString(run.events);
        }
      }
      EXPECT_EQ(run.Only(Event::kTick).back().n, 7u);
      EXPECT_EQ(LossSteps(run), Range(start, 7));
    }
  }
}

TEST_P(TrainerPipelineTest, HonoursMaxStepsFromTheConfig) {
  JobConfig config = PipelineConfig();
  config.mutable_training()->set_max_steps(5);
  EventLog log;
  FakeClock clock(&log);
  const TrainRun run = Train(config, &clock, &log);
  ASSERT_TRUE(run.status.ok()) << run.status;
  EXPECT_EQ(run.summary.steps, 5u);
  EXPECT_EQ(run.Only(Event::kPush).size(), 5u);
}

INSTANTIATE_TEST_SUITE_P(Pipelines, TrainerPipelineTest,
                         ::testing::Values(Pipeline{"BspSynchronous", BSP, true},
                                           Pipeline{"SspSynchronous", SSP, false},
                                           Pipeline{"SspPrefetching", SSP, true}),
                         [](const ::testing::TestParamInfo<Pipeline>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace shardps

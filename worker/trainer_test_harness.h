// The trainer's test harness: a small synthetic data set (kFiles files of
// kLinesPerFile lines, two epochs of kSteps steps for one worker), the job
// config of the trainer's tests, and TrainerTest, a fixture whose Train()
// runs the trainer against a fake job clock and in-process tables and
// returns what it did (TrainRun); CheckProtocol is what every run with a
// clock must respect. Included by the trainer's tests (trainer_test,
// trainer_exactness_test, trainer_pipeline_test) only.
#ifndef SHARDPS_WORKER_TRAINER_TEST_HARNESS_H_
#define SHARDPS_WORKER_TRAINER_TEST_HARNESS_H_

#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "worker/data/synthetic.h"
#include "worker/param_store.h"
#include "worker/trainer.h"
#include "worker/trainer_test_fakes.h"

namespace shardps {
namespace testing {

constexpr int kFiles = 3;
constexpr int kLinesPerFile = 48;
constexpr int kBatch = 16;
// Two epochs of every file, one worker.
constexpr uint64_t kSteps = 2 * kFiles * kLinesPerFile / kBatch;

inline std::vector<std::string>& TrainFiles() {
  static auto* files = new std::vector<std::string>;
  return *files;
}

// `training`: more training settings (e.g. the embedding cache).
inline JobConfig Config(ConsistencyMode mode, bool prefetch, const std::string& training = "") {
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

  static inline int runs_ = 0;
  bool replay_ = false;  // The store serves state pulls (trainer replays).
};

// What every run with a clock must respect: a step is pulled only once the
// clock allowed it, clock t + 1 is ticked only after step t's push, and
// pushes and ticks go up one by one.
inline void CheckProtocol(const TrainRun& run, uint64_t first_step) {
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
inline std::vector<uint64_t> LossSteps(const TrainRun& run) {
  std::vector<uint64_t> steps;
  for (const std::string& line : run.losses) {
    steps.push_back(std::stoull(std::vector<std::string>(absl::StrSplit(line, ' '))[0]));
  }
  return steps;
}

inline std::vector<uint64_t> Range(uint64_t from, uint64_t to) {
  std::vector<uint64_t> out;
  for (uint64_t i = from; i < to; ++i) out.push_back(i);
  return out;
}

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_TEST_HARNESS_H_

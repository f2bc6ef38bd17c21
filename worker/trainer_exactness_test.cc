// What must change nothing, bit for bit, with one worker: read-your-own-
// writes prefetch and the embedding cache (with and without a clock, with
// prefetches replayed or refused); where the cache must stay inert.
#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"
#include "worker/trainer.h"
#include "worker/trainer_test_harness.h"

namespace shardps {
namespace {

using testing::CheckProtocol;
using testing::Config;
using testing::Event;
using testing::EventLog;
using testing::FakeClock;
using testing::kBatch;
using testing::kLinesPerFile;
using testing::kSteps;
using testing::LossSteps;
using testing::Range;
using testing::ToString;
using testing::TrainerTest;
using testing::TrainRun;

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

}  // namespace
}  // namespace shardps

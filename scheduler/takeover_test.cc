#include "scheduler/takeover.h"

#include "gtest/gtest.h"

namespace shardps {
namespace {

Rejoin InGeneration(uint64_t generation) {
  Rejoin r;
  r.set_generation(generation);
  r.set_clock(40);
  return r;
}

TEST(TakeoverTest, OneGenerationForEveryProcessIsTakenOver) {
  Takeover t;
  EXPECT_FALSE(t.active());
  t.Rejoined(SERVER, 0, InGeneration(7));
  t.Rejoined(SERVER, 1, InGeneration(7));
  t.Rejoined(WORKER, 0, InGeneration(7));
  EXPECT_TRUE(t.active());
  EXPECT_EQ(t.Problem(), "");
  EXPECT_EQ(t.generation(), 7u);
  EXPECT_EQ(t.MaxGeneration(3), 7u);
  EXPECT_EQ(t.MaxGeneration(9), 9u);
}

TEST(TakeoverTest, ANewProcessOrAMixOfGenerationsNeedsARollback) {
  Takeover fresh;
  fresh.Rejoined(SERVER, 0, InGeneration(7));
  fresh.Fresh(WORKER, 1);
  EXPECT_EQ(fresh.Problem(), "worker 1 registered without the state it had (a new process)");

  Takeover mixed;
  mixed.Rejoined(SERVER, 0, InGeneration(7));
  mixed.Rejoined(SERVER, 1, InGeneration(8));
  EXPECT_EQ(mixed.Problem(),
            "the processes that rejoined are in different job generations [7,8] (a rollback "
            "was under way)");
  // The rollback's generation goes above every one seen.
  EXPECT_EQ(mixed.MaxGeneration(2), 8u);

  Takeover unstarted;
  unstarted.Rejoined(SERVER, 0, InGeneration(0));
  EXPECT_EQ(unstarted.Problem(), "the job had not started when the scheduler stopped");
}

TEST(TakeoverTest, TheLastRegistrationOfAProcessCounts) {
  Takeover t;
  t.Fresh(SERVER, 0);
  t.Rejoined(SERVER, 0, InGeneration(4));  // It was a rejoin after all.
  EXPECT_EQ(t.Problem(), "");
  t.Fresh(SERVER, 0);  // Restarted again, without state.
  EXPECT_NE(t.Problem(), "");
}

TEST(TakeoverTest, SparesDoNotCountAndTheMapServersMustHoldOneMap) {
  Rejoin on_map2 = InGeneration(7);
  on_map2.set_owner_map_version(2);
  Takeover t;
  t.Rejoined(SERVER, 0, on_map2);
  t.Rejoined(SERVER, 1, on_map2);
  t.Fresh(SERVER, 2);  // A spare without state.
  t.Rejoined(WORKER, 0, InGeneration(7));
  EXPECT_EQ(t.Problem(2), "");
  // The same server 2 in a map of three servers: it has no state.
  EXPECT_EQ(t.Problem(3), "server 2 registered without the state it had (a new process)");
  t.Rejoined(SERVER, 2, InGeneration(0));  // An idle spare rejoins.
  EXPECT_EQ(t.Problem(2), "");
  Rejoin on_map3 = InGeneration(7);
  on_map3.set_owner_map_version(3);
  t.Rejoined(SERVER, 1, on_map3);  // It took the switch of a move, server 0 did not.
  EXPECT_EQ(t.Problem(2),
            "the servers hold different partition maps (versions 2,3): a move was under way");
}

}  // namespace
}  // namespace shardps

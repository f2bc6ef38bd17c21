#include "scheduler/membership.h"

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

JobConfig Config() {
  JobConfig c;
  c.mutable_cluster()->set_num_servers(2);
  c.mutable_cluster()->set_num_workers(2);
  c.mutable_cluster()->set_num_partitions(16);
  return c;
}

// `incarnation` 0: a new one per call (a new process each time).
RegisterRequest Req(Role role, std::string address, int index = -1, uint64_t fingerprint = 42,
                    uint64_t incarnation = 0) {
  static uint64_t next = 1000;
  if (incarnation == 0) incarnation = next++;
  RegisterRequest r;
  r.set_role(role);
  r.set_address(address);
  if (index >= 0) r.set_requested_index(index);
  r.set_config_fingerprint(fingerprint);
  r.set_incarnation(incarnation);
  return r;
}

TEST(MembershipTest, AssignsIndicesAndBuildsTheMapWhenServersAreIn) {
  Membership m(Config(), 42);
  const absl::Time now = absl::Now();
  auto s0 = m.Register(Req(SERVER, "a:1"), now);
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(s0->member.index, 0u);
  EXPECT_FALSE(m.Map().has_value());  // second server not there yet
  auto s1 = m.Register(Req(SERVER, "b:2"), now);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->member.index, 1u);
  auto map = m.Map();
  ASSERT_TRUE(map.has_value());
  EXPECT_EQ(map->version(), 1u);
  EXPECT_EQ(map->owner_size(), 16);
  EXPECT_EQ(map->server_addresses(1), "b:2");
  EXPECT_EQ(m.Register(Req(SERVER, "c:3"), now).status().code(),
            absl::StatusCode::kResourceExhausted);  // a late extra server
}

TEST(MembershipTest, RefusesWrongConfigDuplicateIndexAndBadRequests) {
  Membership m(Config(), 42);
  const absl::Time now = absl::Now();
  auto wrong = m.Register(Req(WORKER, "", -1, 7), now);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_NE(wrong.status().message().find("different job config"), std::string::npos);
  ASSERT_TRUE(m.Register(Req(WORKER, "", 1), now).ok());
  EXPECT_EQ(m.Register(Req(WORKER, "", 1), now).status().code(), absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Register(Req(WORKER, "", 5), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Req(SERVER, ""), now).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Req(ROLE_UNSPECIFIED, "x"), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  // A 1 MB address would be kept and shown by JobStatus.
  EXPECT_EQ(m.Register(Req(WORKER, std::string(1 << 20, 'a')), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Req(SERVER, std::string(301, 'a')), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(m.Register(Req(SERVER, std::string(296, 'a') + ":700"), now).ok());
}

TEST(MembershipTest, DeadMemberIsReplacedByARestartWithTheSameIndex) {
  Membership m(Config(), 42);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1", -1, 42, 1), t0).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "b:2", -1, 42, 2), t0).ok());
  ASSERT_TRUE(m.Heartbeat(SERVER, 0, 1, t0 + absl::Seconds(5)).ok());
  auto died = m.Sweep(t0 + absl::Seconds(11), absl::Seconds(10));
  ASSERT_EQ(died.size(), 1u);  // server 1 went silent
  EXPECT_EQ(died[0].index, 1u);
  EXPECT_NE(died[0].reason.find("missed heartbeats"), std::string::npos);
  EXPECT_EQ(m.DeadServers().size(), 1u);
  // A heartbeat of a member declared dead: register again.
  EXPECT_EQ(*m.Heartbeat(SERVER, 1, 2, t0 + absl::Seconds(12)), HeartbeatVerdict::kRejoin);
  auto back = m.Register(Req(SERVER, "b:9", 1), t0 + absl::Seconds(12));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->member.registrations, 2u);
  EXPECT_EQ(back->previous_state, DEAD);
  EXPECT_TRUE(back->new_process);
  EXPECT_EQ(m.Map()->version(), 2u);  // new address, new version
  EXPECT_EQ(m.Map()->server_addresses(1), "b:9");
  EXPECT_TRUE(m.DeadServers().empty());
}

// Incarnations: the holder's own retry keeps its slot; another process takes
// it only from a silent holder, and the holder then learns it was replaced.
TEST(MembershipTest, IncarnationsTellARetryFromARestart) {
  JobConfig c = Config();
  c.mutable_cluster()->set_heartbeat_ms(1000);
  Membership m(c, 42);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(m.Register(Req(WORKER, "", 0, 42, 7), t0).ok());
  auto retry = m.Register(Req(WORKER, "", 0, 42, 7), t0 + absl::Milliseconds(500));
  ASSERT_TRUE(retry.ok());
  EXPECT_TRUE(retry->repeat);
  EXPECT_EQ(retry->member.registrations, 1u);
  EXPECT_EQ(m.Register(Req(WORKER, "", 0, 42, 8), t0 + absl::Milliseconds(1500)).status().code(),
            absl::StatusCode::kAlreadyExists);  // The holder beat 1 s ago.
  auto taken = m.Register(Req(WORKER, "", 0, 42, 8), t0 + absl::Milliseconds(2600));
  ASSERT_TRUE(taken.ok());
  EXPECT_TRUE(taken->new_process);
  EXPECT_EQ(taken->previous_state, ALIVE);
  EXPECT_EQ(taken->member.registrations, 2u);
  EXPECT_EQ(*m.Heartbeat(WORKER, 0, 7, t0 + absl::Seconds(3)), HeartbeatVerdict::kReplaced);
  EXPECT_EQ(*m.Heartbeat(WORKER, 0, 8, t0 + absl::Seconds(3)), HeartbeatVerdict::kOk);
  EXPECT_EQ(*m.Heartbeat(WORKER, 1, 9, t0), HeartbeatVerdict::kRejoin);  // Unknown.
  EXPECT_EQ(m.Heartbeat(WORKER, 5, 9, t0).status().code(), absl::StatusCode::kInvalidArgument);
}

// A registration or heartbeat without an incarnation is refused, and a
// heartbeat of another incarnation than the holder's refreshes nothing: a
// forged heartbeat cannot keep a silent member alive.
TEST(MembershipTest, HeartbeatsMustNameTheHoldersIncarnation) {
  Membership m(Config(), 42);
  const absl::Time t0 = absl::Now();
  RegisterRequest none = Req(SERVER, "a:1");
  none.set_incarnation(0);
  EXPECT_EQ(m.Register(none, t0).status().code(), absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1", -1, 42, 5), t0).ok());
  auto zero = m.Heartbeat(SERVER, 0, 0, t0 + absl::Seconds(5));
  EXPECT_EQ(zero.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(zero.status().message().find("server 0 sent no incarnation"), std::string::npos)
      << zero.status();
  EXPECT_EQ(*m.Heartbeat(SERVER, 0, 6, t0 + absl::Seconds(5)), HeartbeatVerdict::kReplaced);
  auto died = m.Sweep(t0 + absl::Seconds(11), absl::Seconds(10));
  ASSERT_EQ(died.size(), 1u) << "forged heartbeats kept server 0 alive";
}

TEST(MembershipTest, JobEndsWhenEveryWorkerFinishedOrDied) {
  Membership m(Config(), 42);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(m.Register(Req(WORKER, "", -1, 42, 11), t0).ok());
  ASSERT_TRUE(m.Register(Req(WORKER, "", -1, 42, 12), t0).ok());
  EXPECT_FALSE(m.AllWorkersDoneOrDead());
  m.MarkFinished(0, t0);
  EXPECT_FALSE(m.AllWorkersDoneOrDead());
  // A finished worker heartbeats until the job ends; worker 1 went silent.
  ASSERT_TRUE(m.Heartbeat(WORKER, 0, 11, t0 + absl::Seconds(15)).ok());
  m.Sweep(t0 + absl::Seconds(20), absl::Seconds(10));
  EXPECT_TRUE(m.AllWorkersDoneOrDead());
  EXPECT_TRUE(m.AnyWorkerFinished());
}

}  // namespace
}  // namespace shardps

namespace shardps {
namespace {

// Two servers in the map, room for four (cluster.max_servers).
JobConfig GrowableConfig() {
  JobConfig c = Config();
  c.mutable_cluster()->set_max_servers(4);
  return c;
}

TEST(MembershipSpareTest, AServerBeyondTheMapJoinsAsASpareOwningNothing) {
  Membership m(GrowableConfig(), 42);
  const absl::Time now = absl::Now();
  auto spare = m.Register(Req(SERVER, "s:9", 3), now);  // Before the map is complete.
  ASSERT_TRUE(spare.ok()) << spare.status();
  EXPECT_TRUE(spare->spare);
  EXPECT_FALSE(m.Map().has_value());  // It is not what the map waits for.
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1", 0), now).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "b:2", 1), now).ok());
  auto map = m.Map();
  ASSERT_TRUE(map.has_value());
  EXPECT_EQ(map->version(), 1u);
  EXPECT_EQ(map->server_addresses_size(), 2);
  for (uint32_t owner : map->owner()) EXPECT_LT(owner, 2u);
  EXPECT_EQ(m.MapServers(), 2u);
  // Members() is the map's servers and the workers; the spare is apart.
  uint32_t servers = 0;
  for (const Member& member : m.Members()) servers += member.role == SERVER;
  EXPECT_EQ(servers, 2u);
  ASSERT_EQ(m.Spares().size(), 1u);
  EXPECT_EQ(m.Spares()[0].index, 3u);
  // A server without an index takes the free spare slot once the map's are held.
  auto unindexed = m.Register(Req(SERVER, "c:3"), now);
  ASSERT_TRUE(unindexed.ok());
  EXPECT_EQ(unindexed->member.index, 2u);
  EXPECT_TRUE(unindexed->spare);
  EXPECT_EQ(m.Register(Req(SERVER, "d:4", 4), now).status().code(),
            absl::StatusCode::kInvalidArgument);  // Beyond max_servers.
  // Spares never moved the map.
  EXPECT_EQ(m.MapVersion(), 1u);
}

TEST(MembershipSpareTest, ASilentSpareDiesWithoutStartingARecovery) {
  Membership m(GrowableConfig(), 42);
  const absl::Time now = absl::Now();
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1", 0), now).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "b:2", 1), now).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "s:9", 2), now).ok());
  ASSERT_TRUE(m.Register(Req(WORKER, "", 0), now + absl::Seconds(20)).ok());
  ASSERT_TRUE(m.Register(Req(WORKER, "", 1), now + absl::Seconds(20)).ok());
  for (uint32_t i : {0u, 1u}) {
    ASSERT_TRUE(
        m.Heartbeat(SERVER, i, m.Get(SERVER, i)->incarnation, now + absl::Seconds(20)).ok());
  }
  const std::vector<Member> died = m.Sweep(now + absl::Seconds(25), absl::Seconds(10));
  EXPECT_TRUE(died.empty()) << died[0].index;
  EXPECT_EQ(m.Get(SERVER, 2)->state, DEAD);
  EXPECT_TRUE(m.DeadServers().empty());
  EXPECT_TRUE(m.ExpireUnregistered(SERVER, now).empty());  // Slot 3 is optional.
}

TEST(MembershipSpareTest, SetOwnersMovesServersIntoAndOutOfTheMap) {
  Membership m(GrowableConfig(), 42);
  const absl::Time now = absl::Now();
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1", 0), now).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "b:2", 1), now).ok());
  std::vector<uint32_t> three(16);
  for (uint32_t p = 0; p < 16; ++p) three[p] = p % 3;
  EXPECT_EQ(m.SetOwners(three).status().code(),
            absl::StatusCode::kFailedPrecondition);  // Server 2 has not registered.
  EXPECT_EQ(m.SetOwners(std::vector<uint32_t>(15, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.SetOwners(std::vector<uint32_t>(16, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Register(Req(SERVER, "s:9", 2), now).ok());
  auto grown = m.SetOwners(three);
  ASSERT_TRUE(grown.ok()) << grown.status();
  EXPECT_EQ(grown->version(), 2u);
  EXPECT_EQ(grown->server_addresses_size(), 3);
  EXPECT_EQ(grown->server_addresses(2), "s:9");
  EXPECT_EQ(grown->owner(2), 2u);
  EXPECT_EQ(m.MapServers(), 3u);
  EXPECT_TRUE(m.Spares().empty());
  // Back to two: server 2 is a spare again (it may exit).
  std::vector<uint32_t> two(16);
  for (uint32_t p = 0; p < 16; ++p) two[p] = p % 2;
  auto shrunk = m.SetOwners(two);
  ASSERT_TRUE(shrunk.ok());
  EXPECT_EQ(shrunk->version(), 3u);
  EXPECT_EQ(shrunk->server_addresses_size(), 2);
  ASSERT_EQ(m.Spares().size(), 1u);
  // A restart of a map server bumps the version, keeping the owners.
  ASSERT_TRUE(m.Register(Req(SERVER, "a:5", 0), now + absl::Seconds(30)).ok());
  EXPECT_EQ(m.Map()->version(), 4u);
  EXPECT_EQ(m.Map()->owner(1), 1u);
}

// A restarted scheduler takes the owners a server of the earlier one held
// (the newest version seen), so the job goes on with the moved map.
TEST(MembershipSpareTest, AdoptOwnersOfARejoiningServerMakesASpareOneOfTheMap) {
  Membership m(GrowableConfig(), 42);
  const absl::Time now = absl::Now();
  std::vector<uint32_t> three(16);
  for (uint32_t p = 0; p < 16; ++p) three[p] = p % 3;
  EXPECT_EQ(m.AdoptOwners(5, std::vector<uint32_t>(15, 0)).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.AdoptOwners(5, std::vector<uint32_t>(16, 4)).status().code(),
            absl::StatusCode::kInvalidArgument);
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1", 0), now).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "b:2", 1), now).ok());
  ASSERT_TRUE(m.Map().has_value());
  auto adopted = m.AdoptOwners(5, three);
  ASSERT_TRUE(adopted.ok());
  EXPECT_TRUE(*adopted);
  EXPECT_EQ(m.MapServers(), 3u);
  EXPECT_FALSE(m.Map().has_value()) << "server 2 of the adopted map has not registered";
  auto s2 = m.Register(Req(SERVER, "s:9", 2), now);
  ASSERT_TRUE(s2.ok());
  EXPECT_FALSE(s2->spare);
  auto map = m.Map();
  ASSERT_TRUE(map.has_value());
  EXPECT_GT(map->version(), 5u);
  EXPECT_EQ(map->server_addresses_size(), 3);
  for (uint32_t p = 0; p < 16; ++p) EXPECT_EQ(map->owner(p), p % 3);
  // An older map another server rejoins with changes nothing.
  EXPECT_FALSE(*m.AdoptOwners(4, std::vector<uint32_t>(16, 0)));
  EXPECT_EQ(m.Map()->owner(2), 2u);
}

}  // namespace
}  // namespace shardps

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

RegisterRequest Req(Role role, std::string address, int index = -1,
                    uint64_t fingerprint = 42) {
  RegisterRequest r;
  r.set_role(role);
  r.set_address(address);
  if (index >= 0) r.set_requested_index(index);
  r.set_config_fingerprint(fingerprint);
  return r;
}

TEST(MembershipTest, AssignsIndicesAndBuildsTheMapWhenServersAreIn) {
  Membership m(Config(), 42);
  const absl::Time now = absl::Now();
  auto s0 = m.Register(Req(SERVER, "a:1"), now);
  ASSERT_TRUE(s0.ok());
  EXPECT_EQ(s0->index, 0u);
  EXPECT_FALSE(m.Map().has_value());  // second server not there yet
  auto s1 = m.Register(Req(SERVER, "b:2"), now);
  ASSERT_TRUE(s1.ok());
  EXPECT_EQ(s1->index, 1u);
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
  EXPECT_NE(wrong.status().message().find("different job config"),
            std::string::npos);
  ASSERT_TRUE(m.Register(Req(WORKER, "", 1), now).ok());
  EXPECT_EQ(m.Register(Req(WORKER, "", 1), now).status().code(),
            absl::StatusCode::kAlreadyExists);
  EXPECT_EQ(m.Register(Req(WORKER, "", 5), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Req(SERVER, ""), now).status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(m.Register(Req(ROLE_UNSPECIFIED, "x"), now).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(MembershipTest, DeadMemberIsReplacedByARestartWithTheSameIndex) {
  Membership m(Config(), 42);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(m.Register(Req(SERVER, "a:1"), t0).ok());
  ASSERT_TRUE(m.Register(Req(SERVER, "b:2"), t0).ok());
  ASSERT_TRUE(m.Heartbeat(SERVER, 0, t0 + absl::Seconds(5)).ok());
  auto died = m.Sweep(t0 + absl::Seconds(11), absl::Seconds(10));
  ASSERT_EQ(died.size(), 1u);  // server 1 went silent
  EXPECT_EQ(died[0].index, 1u);
  EXPECT_EQ(m.DeadServers().size(), 1u);
  EXPECT_EQ(m.Heartbeat(SERVER, 1, t0 + absl::Seconds(12)).code(),
            absl::StatusCode::kFailedPrecondition);
  auto back = m.Register(Req(SERVER, "b:9", 1), t0 + absl::Seconds(12));
  ASSERT_TRUE(back.ok());
  EXPECT_EQ(back->registrations, 2u);
  EXPECT_EQ(m.Map()->version(), 2u);  // new address, new version
  EXPECT_EQ(m.Map()->server_addresses(1), "b:9");
  EXPECT_TRUE(m.DeadServers().empty());
}

TEST(MembershipTest, JobEndsWhenEveryWorkerFinishedOrDied) {
  Membership m(Config(), 42);
  const absl::Time t0 = absl::Now();
  ASSERT_TRUE(m.Register(Req(WORKER, ""), t0).ok());
  ASSERT_TRUE(m.Register(Req(WORKER, ""), t0).ok());
  EXPECT_FALSE(m.AllWorkersDoneOrDead());
  m.MarkFinished(0, t0);
  EXPECT_FALSE(m.AllWorkersDoneOrDead());
  m.Sweep(t0 + absl::Seconds(20), absl::Seconds(10));
  EXPECT_TRUE(m.AllWorkersDoneOrDead());
  EXPECT_TRUE(m.AnyWorkerFinished());
}

}  // namespace
}  // namespace shardps

// Moving partitions between running servers (parameter_server_core.h,
// "Resharding"): a BSP job moved 2 -> 3 -> 2 servers at clock boundaries
// (cut, restore the moving partitions on their destinations, switch the map,
// drop them at their sources) ends with every row bit-identical to the same
// job without moves; bad partition lists are refused and change nothing;
// the same in two steps (a pre-copy while the job trains and evicts, a
// catch-up from a delta cut) is bit-identical too; a catch-up without its
// pre-copy is refused; a drop frees rows and pending admission counts.
// Core-level, no network.
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/parameter_server_core.h"
#include "server/snapshot_test_util.h"

namespace shardps {
namespace {

using testing::Dump;
using testing::kParts;

// The map switch of a move: version + 1 with `new_owner`, each moved
// partition dropped at its source.
void Switch(testing::Job& job, const std::vector<uint32_t>& new_owner) {
  const PartitionMap& old = job.map();
  for (uint32_t s = 0; s < job.size(); ++s) {
    ControlRequest request;
    request.set_map_version(old.version() + 1);
    for (uint32_t owner : new_owner) request.add_partition_owner(owner);
    for (uint32_t p = 0; p < kParts; ++p) {
      if (old.OwnerOfPartition(p) == s && new_owner[p] != s) request.add_drop_partitions(p);
    }
    ControlResponse response;
    const absl::Status st = job.core(s).Control(request, &response);
    ASSERT_TRUE(st.ok()) << "server " << s << ": " << st;
  }
  uint32_t max_owner = 0;
  for (uint32_t owner : new_owner) max_owner = std::max(max_owner, owner);
  job.SetMap(*PartitionMap::FromOwners(
      old.version() + 1, new_owner,
      std::max(job.core(0).config().cluster().num_servers(), max_owner + 1)));
}

// Restores on every destination the partitions `new_owner` gives it from
// the checkpoint at `clock`: in one step, as a pre-copy (`precopy`), or as
// the catch-up of the links after `catch_up_from`. Adds the time the
// destinations slept for cluster.move_mb_per_s to `*paced_ms`.
void Add(testing::Job& job, uint64_t clock, const std::vector<uint32_t>& new_owner, bool precopy,
         std::optional<uint64_t> catch_up_from, uint64_t* paced_ms = nullptr) {
  std::vector<RestoreRequest> adds(job.size());
  for (uint32_t p = 0; p < kParts; ++p) {
    if (job.map().OwnerOfPartition(p) != new_owner[p]) adds[new_owner[p]].add_partitions(p);
  }
  for (uint32_t s = 0; s < job.size(); ++s) {
    if (adds[s].partitions_size() == 0) continue;
    adds[s].set_clock(clock);
    adds[s].set_precopy(precopy);
    if (catch_up_from) adds[s].set_catch_up_from(*catch_up_from);
    RestoreResponse response;
    const absl::Time start = absl::Now();
    const absl::Status st = job.core(s).Restore(adds[s], &response);
    const absl::Duration took = absl::Now() - start;
    ASSERT_TRUE(st.ok()) << "server " << s << ": " << st;
    EXPECT_EQ(response.clock(), clock);
    if (paced_ms != nullptr) *paced_ms += response.paced_ms();
    const uint32_t mb_per_s = job.core(s).config().cluster().move_mb_per_s();
    if (precopy && mb_per_s > 0) {
      // Paced: half of the files' bytes are due before the last file is
      // read, so the call lasts at least that (less the pace's 2 ms lead),
      // however fast the machine.
      EXPECT_GE(took,
                absl::Seconds(response.bytes_read() / 2 / (mb_per_s * 1e6)) - absl::Milliseconds(2))
          << "server " << s << " read " << response.bytes_read() << " bytes";
    }
  }
}

// The scheduler's part of a move at a clock boundary, played by the test,
// after the cut at `clock` (every core has applied exactly the clocks <
// clock): each moving partition restored on its destination from the cut,
// then the switch.
void Move(testing::Job& job, uint64_t clock, const std::vector<uint32_t>& new_owner) {
  Add(job, clock, new_owner, /*precopy=*/false, std::nullopt);
  Switch(job, new_owner);
}

// A core joining `job` as server `index`: it owns nothing under the job's
// map, and a full restore of the cut at `clock` puts it at the job's clock.
std::unique_ptr<ParameterServerCore> Join(testing::Job& job, const std::string& root,
                                          uint64_t clock, uint32_t index) {
  CoreOptions options;
  options.config = job.core(0).config();
  options.server_index = index;
  options.map = *PartitionMap::FromOwners(job.map().version(), job.map().owners(), index + 1);
  auto core = ParameterServerCore::Create(options);
  EXPECT_TRUE(core.ok()) << core.status();
  (*core)->SetCheckpointRoot(root);
  RestoreRequest restore;
  restore.set_clock(clock);
  RestoreResponse response;
  const absl::Status st = (*core)->Restore(restore, &response);
  EXPECT_TRUE(st.ok()) << st;
  EXPECT_EQ(response.rows(), 0u);
  EXPECT_EQ((*core)->applied_clock(), clock);
  return std::move(*core);
}

std::vector<uint32_t> ContiguousOwners(uint32_t servers) {
  return PartitionMap::Contiguous(1, kParts, servers)->owners();
}

TEST(PartitionMoveTest, TwoToThreeToTwoIsBitIdenticalToNoMove) {
  testing::Job still(2);
  for (uint64_t clock = 0; clock < 15; ++clock) still.Step(clock);
  const Dump expected = still.DumpAll();
  ASSERT_FALSE(expected.empty());

  const std::string root = testing::NewRoot("partition_move");
  testing::Job moved(2);
  moved.SetRoot(root);
  for (uint64_t clock = 0; clock < 5; ++clock) moved.Step(clock);
  // 2 -> 3: [43, 64) moves 0 -> 1, [86, 128) moves 1 -> 2 (a new server).
  moved.Checkpoint(root, 5);
  moved.AddCore(Join(moved, root, 5, 2));
  Move(moved, 5, ContiguousOwners(3));
  EXPECT_EQ(moved.map().version(), 2u);
  for (uint64_t clock = 5; clock < 10; ++clock) moved.Step(clock);
  // 3 -> 2: server 2 is drained.
  moved.Checkpoint(root, 10);
  Move(moved, 10, ContiguousOwners(2));
  for (Table* table : moved.core(2).store()->tables()) {
    EXPECT_EQ(table->Counters().live_rows, 0u) << "drained server, table " << table->id();
  }
  for (uint64_t clock = 10; clock < 15; ++clock) moved.Step(clock);
  EXPECT_EQ(moved.DumpAll(), expected);  // DumpAll also fails on a row held twice.
  EXPECT_EQ(moved.PullAll(15), still.PullAll(15));
}

// The keys a step of the eviction job pushes: every key up to clock 4, then
// only every other one, so the rest age out (ttl_clocks 2) on whichever
// server holds them.
std::vector<uint64_t> EvictionKeys(uint64_t clock, uint32_t table) {
  std::vector<uint64_t> keys = testing::Job::Keys(table);
  if (clock < 5) return keys;
  std::vector<uint64_t> half;
  for (size_t i = 0; i < keys.size(); i += 2) half.push_back(keys[i]);
  return half;
}

JobConfig EvictionConfig() {
  JobConfig c = testing::Config(2);
  for (TableConfig& t : *c.mutable_tables()) t.mutable_eviction()->set_ttl_clocks(2);
  return c;
}

// The keys a step pushes: (clock, table) -> keys.
using StepKeys = std::vector<uint64_t> (*)(uint64_t clock, uint32_t table);

// A step of the eviction job (the keys of `keys`), then a sweep on every
// server; the rows evicted.
uint64_t EvictionStep(testing::Job& job, uint64_t clock, StepKeys keys = EvictionKeys) {
  job.Push(clock, [clock, keys](uint32_t table) { return keys(clock, table); });
  return job.Evict();
}

// The move of the scheduler in two steps (docs/design.md "Resharding"): the
// bulk pre-copied from a full cut while the job trains on (pushes to moving
// rows, rows evicted at their sources and, past their ttl, on their
// destinations, which must keep them), the rest caught up from a delta cut
// on it (the rows changed and the keys evicted since), then the switch:
// every row bit-identical to the job that never moved, 2 -> 3 -> 2.
// 2 -> 3 -> 2 in two steps each, with evictions between them, under
// `config` (EvictionConfig and more): bit-identical to no move. Returns the
// time the pre-copies slept for cluster.move_mb_per_s, in ms. `keys`: what
// each step pushes; `rows_evicted`: whether the job evicts rows then.
uint64_t ExpectTwoStepMovesBitIdentical(const JobConfig& config, StepKeys keys = EvictionKeys,
                                        bool rows_evicted = true) {
  uint64_t paced_ms = 0;
  testing::Job still(2, config);
  uint64_t still_evicted = 0;
  for (uint64_t clock = 0; clock < 20; ++clock) still_evicted += EvictionStep(still, clock, keys);
  const Dump expected = still.DumpAll();
  EXPECT_EQ(still_evicted > 0, rows_evicted);
  EXPECT_FALSE(expected.empty());

  const std::string root = testing::NewRoot("partition_move_two_step");
  testing::Job moved(2, config);
  moved.SetRoot(root);
  for (uint64_t clock = 0; clock < 4; ++clock) EvictionStep(moved, clock, keys);
  // 2 -> 3: pre-copy from the cut at 4, catch up from a delta at 9.
  const checkpoint::CheckpointManifest first =
      testing::CheckpointCores(moved.cores(), root, 4, nullptr, testing::kJob, kParts);
  moved.AddCore(Join(moved, root, 4, 2));
  Add(moved, 4, ContiguousOwners(3), /*precopy=*/true, std::nullopt, &paced_ms);
  for (uint64_t clock = 4; clock < 9; ++clock) EvictionStep(moved, clock, keys);
  testing::CheckpointCores(moved.cores(), root, 9, &first, testing::kJob, kParts);
  Add(moved, 9, ContiguousOwners(3), /*precopy=*/false, /*catch_up_from=*/4);
  Switch(moved, ContiguousOwners(3));
  EXPECT_EQ(moved.core(2).applied_clock(), 9u) << "the joining spare takes the catch-up's clock";
  for (uint64_t clock = 9; clock < 12; ++clock) EvictionStep(moved, clock, keys);
  // 3 -> 2: server 2 drained the same way.
  const checkpoint::CheckpointManifest third =
      testing::CheckpointCores(moved.cores(), root, 12, nullptr, testing::kJob, kParts);
  Add(moved, 12, ContiguousOwners(2), /*precopy=*/true, std::nullopt, &paced_ms);
  for (uint64_t clock = 12; clock < 15; ++clock) EvictionStep(moved, clock, keys);
  testing::CheckpointCores(moved.cores(), root, 15, &third, testing::kJob, kParts);
  Add(moved, 15, ContiguousOwners(2), /*precopy=*/false, /*catch_up_from=*/12);
  Switch(moved, ContiguousOwners(2));
  for (Table* table : moved.core(2).store()->tables()) {
    EXPECT_EQ(table->Counters().live_rows, 0u) << "drained server, table " << table->id();
  }
  for (uint64_t clock = 15; clock < 20; ++clock) EvictionStep(moved, clock, keys);
  EXPECT_EQ(moved.DumpAll(), expected);  // DumpAll also fails on a row held twice.
  return paced_ms;
}

TEST(PartitionMoveTest, TwoStepMoveWithEvictionsIsBitIdenticalToNoMove) {
  EXPECT_EQ(ExpectTwoStepMovesBitIdentical(EvictionConfig()), 0u) << "no pace configured";
}

// cluster.move_mb_per_s paces the pre-copies (each lasts at least its
// bytes' due time: Add checks it) and changes nothing else.
TEST(PartitionMoveTest, APacedPreCopyIsBitIdenticalToo) {
  JobConfig config = EvictionConfig();
  config.mutable_cluster()->set_move_mb_per_s(1);
  ExpectTwoStepMovesBitIdentical(config);
}

// The keys of the admission job: every other key at every clock; the rest
// at clocks 0-3 and from 9 on, not between a 2 -> 3 move's steps (4 and 9).
std::vector<uint64_t> AdmissionKeys(uint64_t clock, uint32_t table) {
  std::vector<uint64_t> keys = testing::Job::Keys(table);
  if (clock < 4 || clock >= 9) return keys;
  std::vector<uint64_t> half;
  for (size_t i = 0; i < keys.size(); i += 2) half.push_back(keys[i]);
  return half;
}

// With admission (min_count 8, unadmitted keys reading their initial value,
// so no per-server shared row) and no eviction: every key is pending at
// the 2 -> 3 move's pre-copy (count 4). Half of them reach 8 between the
// steps (rows in the catch-up's delta); the other half keep their count of
// 4 until the switch (not in the delta: only the pre-copy carries it), then
// are admitted at clock 12 on their destinations. A destination that
// counted them from zero would admit them at clock 16, with other rows.
TEST(PartitionMoveTest, AdmissionCountsMoveWithTheirPartitions) {
  JobConfig config = testing::Config(2);
  for (TableConfig& t : *config.mutable_tables()) {
    if (t.kind() != TableConfig::SPARSE) continue;
    t.mutable_admission()->set_min_count(8);
    t.mutable_admission()->set_unadmitted(AdmissionConfig::INITIAL);
  }
  ExpectTwoStepMovesBitIdentical(config, AdmissionKeys, /*rows_evicted=*/false);
}

// A pre-copied partition is the source's until the switch: the
// destination's eviction sweep leaves it alone even when its rows are past
// their ttl there (the source's evictions reach it in the catch-up).
TEST(PartitionMoveTest, TheSweepKeepsAPreCopiedPartition) {
  const std::string root = testing::NewRoot("partition_move_sweep");
  testing::Job job(2, EvictionConfig());
  job.SetRoot(root);
  job.Step(0);
  job.Step(1);
  testing::CheckpointCores(job.cores(), root, 2, nullptr, testing::kJob, kParts);
  RestoreRequest precopy;
  precopy.set_clock(2);
  precopy.set_precopy(true);
  precopy.add_partitions(0);  // Server 0's.
  RestoreResponse response;
  ASSERT_TRUE(job.core(1).Restore(precopy, &response).ok());
  ASSERT_GT(response.rows(), 0u);
  // Every key but partition 0's trains on: its rows age out everywhere.
  const auto not_p0 = [](uint32_t table) {
    std::vector<uint64_t> keys;
    for (uint64_t key : testing::Job::Keys(table)) {
      if (PartitionOf(table, key, kParts) != 0) keys.push_back(key);
    }
    return keys;
  };
  uint64_t rows_of_p0 = 0;
  for (uint64_t clock = 2; clock < 6; ++clock) {
    job.Push(clock, not_p0);
    job.Evict();
  }
  for (Table* table : job.core(1).store()->tables()) {
    table->ForEachRow([&](uint64_t key, const float*) {
      rows_of_p0 += PartitionOf(table->id(), key, kParts) == 0;
    });
  }
  EXPECT_EQ(rows_of_p0, response.rows()) << "the destination evicted rows it does not own";
  uint64_t left_on_source = 0;
  for (Table* table : job.core(0).store()->tables()) {
    table->ForEachRow([&](uint64_t key, const float*) {
      left_on_source += PartitionOf(table->id(), key, kParts) == 0;
    });
  }
  EXPECT_EQ(left_on_source, 0u) << "the source evicts its own idle rows";
}

// A catch-up is refused, and changes nothing, unless this process
// pre-copied every partition from the clock it names, and that clock is a
// link of the checkpoint's chain.
TEST(PartitionMoveTest, ACatchUpWithoutItsPreCopyIsAborted) {
  const std::string root = testing::NewRoot("partition_move_catch_up_refusals");
  testing::Job job(2);
  job.SetRoot(root);
  job.Step(0);
  const checkpoint::CheckpointManifest first =
      testing::CheckpointCores(job.cores(), root, 1, nullptr, testing::kJob, kParts);
  job.Step(1);
  testing::CheckpointCores(job.cores(), root, 2, &first, testing::kJob, kParts);
  RestoreRequest request;
  request.set_clock(2);
  request.set_catch_up_from(1);
  request.add_partitions(0);
  RestoreResponse response;
  const Dump before = job.DumpAll();
  absl::Status st = job.core(1).Restore(request, &response);
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  EXPECT_NE(st.message().find("did not pre-copy partition 0"), absl::string_view::npos) << st;
  // Pre-copied from 1, caught up from another clock: refused too.
  RestoreRequest precopy;
  precopy.set_clock(1);
  precopy.set_precopy(true);
  precopy.add_partitions(0);
  ASSERT_TRUE(job.core(1).Restore(precopy, &response).ok());
  request.set_catch_up_from(0);
  st = job.core(1).Restore(request, &response);
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  // A drop forgets the pre-copy.
  ControlRequest drop;
  drop.add_drop_partitions(0);
  ControlResponse dropped;
  ASSERT_TRUE(job.core(1).Control(drop, &dropped).ok());
  request.set_catch_up_from(1);
  st = job.core(1).Restore(request, &response);
  EXPECT_TRUE(absl::IsAborted(st)) << st;
  EXPECT_EQ(job.DumpAll(), before);
  // Both steps at once, or a catch-up from a clock not before the cut: bad
  // requests.
  request.set_precopy(true);
  EXPECT_EQ(job.core(1).Restore(request, &response).code(), absl::StatusCode::kInvalidArgument);
  request.set_precopy(false);
  request.set_catch_up_from(2);
  EXPECT_EQ(job.core(1).Restore(request, &response).code(), absl::StatusCode::kInvalidArgument);
}

// A core of a 2-server BSP job after two steps, and its rows.
class RefusalTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = testing::NewRoot("partition_move_refusals");
    job_.SetRoot(root_);
    job_.Step(0);
    job_.Step(1);
    job_.Checkpoint(root_, 2);
    before_ = job_.DumpAll();
  }
  absl::StatusCode RestoreCode(const std::vector<uint32_t>& partitions, uint64_t clock = 2,
                               bool initial = false) {
    RestoreRequest request;
    if (!initial) request.set_clock(clock);
    request.set_initial(initial);
    for (uint32_t p : partitions) request.add_partitions(p);
    RestoreResponse response;
    return job_.core(0).Restore(request, &response).code();
  }
  absl::StatusCode DropCode(const std::vector<uint32_t>& partitions, bool with_map = false) {
    ControlRequest request;
    for (uint32_t p : partitions) request.add_drop_partitions(p);
    if (with_map) {
      request.set_map_version(2);
      for (uint32_t p = 0; p < kParts; ++p) request.add_partition_owner(p < 10 ? 1 : 0);
    }
    ControlResponse response;
    return job_.core(0).Control(request, &response).code();
  }

  std::string root_;
  testing::Job job_{2};
  Dump before_;
};

TEST_F(RefusalTest, BadRestorePartitionListsChangeNothing) {
  // Server 0 owns [0, 64); 64 and up are server 1's.
  EXPECT_EQ(RestoreCode({kParts}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RestoreCode({70, 71, 70}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RestoreCode({70}, 0, /*initial=*/true), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(RestoreCode({70, 3}), absl::StatusCode::kFailedPrecondition);  // 3 is owned.
  job_.Step(2);  // Applied clock 3: the cut at 2 is of another clock.
  EXPECT_EQ(RestoreCode({70}), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job_.core(0).map_version(), 1u);
  testing::Job reference(2);
  for (uint64_t clock = 0; clock < 3; ++clock) reference.Step(clock);
  EXPECT_EQ(job_.DumpAll(), reference.DumpAll());
}

TEST_F(RefusalTest, BadDropListsChangeNothingNotEvenTheMap) {
  EXPECT_EQ(DropCode({kParts + 5}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DropCode({70, 70}), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DropCode({3}), absl::StatusCode::kFailedPrecondition);  // Owned under v1.
  // Owned under the map of the same request (10 and up stay server 0's).
  EXPECT_EQ(DropCode({5, 20}, /*with_map=*/true), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(job_.core(0).map_version(), 1u);
  EXPECT_EQ(job_.DumpAll(), before_);
  // The same request's map gives [0, 10) away: they may go.
  EXPECT_EQ(DropCode({5, 6}, /*with_map=*/true), absl::StatusCode::kOk);
  EXPECT_EQ(job_.core(0).map_version(), 2u);
}

TEST_F(RefusalTest, ARestoredPartitionKeepsTheServersOwnRows) {
  // Server 0 takes partition 70 (server 1's) from the cut at clock 2.
  RestoreRequest request;
  request.set_clock(2);
  request.add_partitions(70);
  RestoreResponse response;
  ASSERT_TRUE(job_.core(0).Restore(request, &response).ok());
  uint64_t rows_of_70 = 0;
  for (const auto& [id, payload] : before_) {
    rows_of_70 += PartitionOf(id.first, id.second, kParts) == 70;
  }
  ASSERT_GT(rows_of_70, 0u) << "pick a partition that holds rows";
  EXPECT_EQ(response.rows(), rows_of_70);
  uint64_t rows0 = 0;
  for (const auto& [id, payload] : before_) {
    const uint32_t p = PartitionOf(id.first, id.second, kParts);
    rows0 += p < 64 || p == 70;
  }
  uint64_t live = 0;
  for (Table* table : job_.core(0).store()->tables()) live += table->Counters().live_rows;
  EXPECT_EQ(live, rows0);
  EXPECT_EQ(job_.core(0).applied_clock(), 2u);
}

// A rollback's full restore carries the scheduler's map: a server that
// missed a switch restores what that map gives it, not what its own did.
TEST_F(RefusalTest, AFullRestoreTakesTheMapItCarries) {
  const auto owner = [](uint32_t p) { return p < 10 || p >= 64 ? 1u : 0u; };
  RestoreRequest request;
  request.set_clock(2);
  request.set_map_version(3);
  for (uint32_t p = 0; p < kParts; ++p) request.add_partition_owner(owner(p));
  RestoreResponse response;
  ASSERT_TRUE(job_.core(0).Restore(request, &response).ok());
  EXPECT_EQ(job_.core(0).map_version(), 3u);
  uint64_t rows0 = 0;
  for (const auto& [id, payload] : before_) {
    rows0 += owner(PartitionOf(id.first, id.second, kParts)) == 0;
  }
  ASSERT_GT(rows0, 0u);
  EXPECT_EQ(response.rows(), rows0);
  // An older map than the server's is not taken: it restores under its own.
  request.set_map_version(2);
  for (uint32_t p = 0; p < kParts; ++p) request.set_partition_owner(p, 0);
  ASSERT_TRUE(job_.core(0).Restore(request, &response).ok());
  EXPECT_EQ(job_.core(0).map_version(), 3u);
  EXPECT_EQ(response.rows(), rows0);
  // Owners that do not fit the job are refused.
  request.set_map_version(4);
  request.add_partition_owner(0);
  EXPECT_EQ(job_.core(0).Restore(request, &response).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(job_.core(0).map_version(), 3u);
}

TEST(SpareServerTest, AServerBeyondNumServersStartsOwningNothing) {
  CoreOptions options;
  options.config = testing::Config(2);
  options.config.mutable_cluster()->set_max_servers(3);
  options.server_index = 2;
  auto spare = ParameterServerCore::Create(options);
  ASSERT_TRUE(spare.ok()) << spare.status();
  PushRequest push;
  push.set_map_version(1);
  push.set_clock(0);
  TableGradients* t = push.add_tables();
  t->set_table_id(1);
  t->add_keys(12345);
  t->set_gradients(std::string(4 * sizeof(float), '\0'));
  PushResponse response;
  EXPECT_EQ((*spare)->Push(push, &response).code(), absl::StatusCode::kAborted);
  options.server_index = 3;  // Beyond max_servers.
  EXPECT_EQ(ParameterServerCore::Create(options).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST(PartitionDropTest, DropFreesRowsAndPendingAdmissionCounts) {
  JobConfig config = testing::Config(1);
  config.mutable_tables(0)->mutable_admission()->set_min_count(3);
  config.mutable_cluster()->set_mode(ASP);
  auto table = Table::Create(config.tables(0), 8, nullptr, kParts);
  ASSERT_TRUE(table.ok()) << table.status();
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < 400; ++k) keys.push_back(k * 7919 + 3);
  std::vector<float> grads(keys.size() * (*table)->dim(), 0.5f);
  for (int i = 0; i < 3; ++i) (*table)->Push(keys.data(), 200, grads.data(), 1.0f);  // Admitted.
  (*table)->Push(keys.data() + 200, 200, grads.data(), 1.0f);  // Pending, one count.
  ASSERT_EQ((*table)->Counters().live_rows, 200u);
  ASSERT_EQ((*table)->Counters().pending_rows, 200u);
  std::vector<bool> drop(kParts, false);
  for (uint32_t p = 0; p < kParts / 2; ++p) drop[p] = true;
  uint64_t live_kept = 0, pending_kept = 0;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (drop[PartitionOf(1, keys[i], kParts)]) continue;
    (i < 200 ? live_kept : pending_kept) += 1;
  }
  EXPECT_EQ((*table)->DropPartitions(drop), 200u - live_kept);
  EXPECT_EQ((*table)->Counters().live_rows, live_kept);
  EXPECT_EQ((*table)->Counters().pending_rows, pending_kept);
  for (size_t i = 0; i < 200; ++i) {
    EXPECT_EQ((*table)->Contains(keys[i]), !drop[PartitionOf(1, keys[i], kParts)]) << keys[i];
  }
}

}  // namespace
}  // namespace shardps

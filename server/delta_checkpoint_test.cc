// Delta checkpoints of ParameterServerCore (snapshot.h "Deltas",
// parameter_server_core.h): a chain FULL -> DELTA -> DELTA restores tables
// and optimizer state bit-identical to the servers that wrote it and to a
// FULL checkpoint of the same state; evictions are applied as deletions; a
// corrupt or missing link is refused naming its file; GC keeps the chain; a
// restored server continues the chain. Core-level, no network.
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/codec.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "server/parameter_server_core.h"
#include "server/snapshot_test_util.h"

namespace shardps {
namespace {

namespace ckpt = checkpoint;

using testing::Dump;
using testing::kParts;

constexpr char kJob[] = "delta-test";
constexpr uint32_t kServers = 2;

// testing::Config's two tables, ASP; rows of "user" idle for 3 clocks are
// evicted.
JobConfig Config() {
  JobConfig c = testing::Config(kServers);
  c.set_name(kJob);
  c.mutable_tables(1)->mutable_eviction()->set_ttl_clocks(3);
  c.mutable_cluster()->set_mode(ASP);
  return c;
}

// The keys pushed at `clock`: table 1 a quarter of its 400 keys (a different
// quarter each clock); table 2 keys 0..39 always and 40..199 before clock 2
// only (those are evicted from clock 5 on).
std::vector<uint64_t> KeysAt(uint32_t table, uint64_t clock) {
  std::vector<uint64_t> keys;
  if (table == 1) {
    for (uint64_t i = 0; i < 400; ++i) {
      if ((i + clock) % 4 == 0) keys.push_back(i * 1000003 + 1);
    }
  } else {
    for (uint64_t i = 0; i < (clock < 2 ? 200u : 40u); ++i) {
      keys.push_back(i * 999983 + 2);
    }
  }
  return keys;
}

// The servers of one ASP job (testing::Job) pushing KeysAt(clock), each
// step followed by an eviction sweep.
class Job : public testing::Job {
 public:
  Job() : testing::Job(kServers, Config()) {}

  void Step(uint64_t clock) {
    Push(clock, [clock](uint32_t table) { return KeysAt(table, clock); });
    evicted_ += Evict();
  }

  // A checkpoint at `clock` on every server, FULL or a DELTA on `base`,
  // and its manifest (testing::CheckpointCores).
  ckpt::CheckpointManifest Checkpoint(const std::string& root, uint64_t clock,
                                      const ckpt::CheckpointManifest* base) {
    return testing::CheckpointCores(cores(), root, clock, base, kJob, kParts);
  }

  uint64_t evicted() const { return evicted_; }

 private:
  uint64_t evicted_ = 0;
};

std::string NewRoot(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/delta_" + name;
  EXPECT_TRUE(ckpt::RemoveAll(root).ok());
  return root;
}

uint64_t Bytes(const ckpt::CheckpointManifest& m) {
  uint64_t bytes = 0;
  for (const ckpt::CheckpointFile& f : m.files()) bytes += f.size();
  return bytes;
}

// An original job trained with a FULL checkpoint at 2 and deltas at 4 and 7
// (rows evicted in between), and a FULL checkpoint of the final state in
// another root.
class DeltaChainTest : public ::testing::Test {
 protected:
  void SetUp() override {
    root_ = NewRoot(::testing::UnitTest::GetInstance()->current_test_info()->name());
    for (uint64_t c = 0; c < 2; ++c) original_.Step(c);
    full_ = original_.Checkpoint(root_, 2, nullptr);
    for (uint64_t c = 2; c < 4; ++c) original_.Step(c);
    delta4_ = original_.Checkpoint(root_, 4, &full_);
    for (uint64_t c = 4; c < 7; ++c) original_.Step(c);
    delta7_ = original_.Checkpoint(root_, 7, &delta4_);
    final_ = original_.DumpAll();
    reference_ = original_.Checkpoint(root_ + "_full", 7, nullptr);
  }

  std::string File(uint64_t clock, const std::string& name) {
    return ckpt::JoinPath(ckpt::CheckpointPath(root_, clock), name);
  }

  std::string root_;
  Job original_;
  ckpt::CheckpointManifest full_, delta4_, delta7_, reference_;
  Dump final_;
};

TEST_F(DeltaChainTest, ChainRestoresBitIdenticalToTheWritersAndToAFullCheckpoint) {
  ASSERT_GT(original_.evicted(), 0u);  // The last delta holds deletions.
  EXPECT_EQ(delta7_.chain_size(), 3);

  Job from_chain;
  from_chain.Step(0);  // Rows a restore must replace.
  ASSERT_TRUE(from_chain.Restore(root_, 7).ok());
  Job from_full;
  ASSERT_TRUE(from_full.Restore(root_ + "_full", 7).ok());
  const Dump chain = from_chain.DumpAll();
  EXPECT_EQ(chain.size(), final_.size());
  EXPECT_TRUE(chain == final_) << "the chain does not restore the writers' rows";
  EXPECT_TRUE(from_full.DumpAll() == chain);
  for (uint32_t s = 0; s < kServers; ++s) {
    EXPECT_EQ(from_chain.core(s).applied_clock(), 7u);
  }
  // Evicted rows are gone: table 2 keys 40.. were last pushed at clock 1.
  for (uint64_t i = 40; i < 200; ++i) {
    EXPECT_EQ(chain.count({2, i * 999983 + 2}), 0u) << i;
  }

  // Deltas are smaller than the full checkpoint of the same state.
  std::cout << "checkpoint bytes: full " << Bytes(reference_) << ", delta " << Bytes(delta7_)
            << " (" << Bytes(delta4_) << " for the first)\n";
  EXPECT_LT(Bytes(delta7_), Bytes(reference_));
  EXPECT_LT(Bytes(delta4_), Bytes(reference_));

  // Restoring the middle of the chain gives the state at clock 4.
  Job mid;
  ASSERT_TRUE(mid.Restore(root_, 4).ok());
  EXPECT_EQ(mid.core(0).applied_clock(), 4u);
}

TEST_F(DeltaChainTest, RestoredServersContinueTheChain) {
  Job resumed;
  ASSERT_TRUE(resumed.Restore(root_, 7).ok());
  for (uint64_t c = 7; c < 9; ++c) {
    original_.Step(c);
    resumed.Step(c);
  }
  ASSERT_TRUE(resumed.DumpAll() == original_.DumpAll());
  const ckpt::CheckpointManifest delta9 = resumed.Checkpoint(root_, 9, &delta7_);
  EXPECT_EQ(delta9.chain_size(), 4);
  EXPECT_LT(Bytes(delta9), Bytes(reference_));
  Job again;
  ASSERT_TRUE(again.Restore(root_, 9).ok());
  EXPECT_TRUE(again.DumpAll() == original_.DumpAll());
}

TEST_F(DeltaChainTest, CorruptDeltaIsRefusedNamingItsFile) {
  // Server 0's file of the middle link: the first server to restore refuses.
  const std::string path = File(4, "part-0000.shard");
  auto bytes = ckpt::ReadFileToString(path);
  ASSERT_TRUE(bytes.ok());
  (*bytes)[bytes->size() / 2] ^= 0x10;
  std::ofstream(path, std::ios::binary | std::ios::trunc) << *bytes;

  Job target;
  target.Step(0);
  const Dump before = target.DumpAll();
  const absl::Status st = target.Restore(root_, 7);
  EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << st;
  EXPECT_TRUE(target.DumpAll() == before);  // Nothing changed.
}

TEST_F(DeltaChainTest, MissingLinkIsRefusedNamingIt) {
  const std::string path = File(2, "part-0000.shard");
  ASSERT_TRUE(ckpt::RemoveAll(path).ok());
  Job target;
  const absl::Status st = target.Restore(root_, 7);
  EXPECT_EQ(st.code(), absl::StatusCode::kNotFound) << st;
  EXPECT_NE(st.message().find(path), std::string::npos) << st;
  // The newest complete checkpoint is now the FULL one of the other root only.
  auto latest = ckpt::LatestComplete(root_);
  EXPECT_EQ(latest.status().code(), absl::StatusCode::kNotFound);
}

TEST_F(DeltaChainTest, GcKeepsTheChainOfTheNewest) {
  auto gc = ckpt::GarbageCollect(root_, ckpt::GcOptions{1, true});
  ASSERT_TRUE(gc.ok()) << gc.status();
  EXPECT_EQ(gc->kept, (std::vector<std::string>{ckpt::CheckpointId(2), ckpt::CheckpointId(4),
                                                ckpt::CheckpointId(7)}));
  EXPECT_TRUE(gc->removed.empty());
  Job target;
  EXPECT_TRUE(target.Restore(root_, 7).ok());
  EXPECT_TRUE(target.DumpAll() == final_);
}

TEST(DeltaCheckpointTest, DeltaWithoutItsBaseIsRefusedAndWritesNothing) {
  const std::string root = NewRoot("nobase");
  Job job;
  job.Step(0);
  job.core(0).SetCheckpointRoot(root);
  CheckpointRequest request;
  request.set_clock(1);
  request.set_delta(true);
  request.set_base_clock(0);
  CheckpointResponse response;
  absl::Status st = job.core(0).Checkpoint(request, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_FALSE(ckpt::IsDirectory(ckpt::CheckpointPath(root, 1)));
  // After a full one at 1 (the trailing '/' names the same root), a delta on
  // it is accepted, one on another clock is not.
  request.set_delta(false);
  ASSERT_TRUE(job.core(0).Checkpoint(request, &response).ok());
  job.core(0).SetCheckpointRoot(root + "/");
  request.set_delta(true);
  request.set_base_clock(1);
  request.set_clock(2);
  EXPECT_TRUE(job.core(0).Checkpoint(request, &response).ok());
  request.set_base_clock(0);
  request.set_clock(3);
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(),
            absl::StatusCode::kFailedPrecondition);
  request.set_base_clock(3);
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps

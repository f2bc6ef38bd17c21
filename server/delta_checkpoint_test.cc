// Delta checkpoints of ParameterServerCore (snapshot.h "Deltas",
// parameter_server_core.h): a chain FULL -> DELTA -> DELTA restores tables
// and optimizer state bit-identical to the servers that wrote it and to a
// FULL checkpoint of the same state; evictions are applied as deletions; a
// corrupt or missing link is refused naming its file; GC keeps the chain; a
// restored server continues the chain. Core-level, no network.
#include <algorithm>
#include <cstring>
#include <fstream>
#include <iostream>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/codec.h"
#include "common/partition.h"
#include "common/table_hash.h"
#include "gtest/gtest.h"
#include "server/parameter_server_core.h"
#include "server/snapshot_test_util.h"
#include "server/version_log.h"

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

  // A version between checkpoints at `clock` on every server (phase
  // VERSION on the checkpoint at `base_clock`); the first error.
  absl::Status CutVersion(uint64_t clock, uint64_t base_clock, bool delta = true) {
    absl::Status first;
    for (uint32_t s = 0; s < kServers; ++s) {
      CheckpointRequest request;
      request.set_clock(clock);
      request.set_delta(delta);
      request.set_base_clock(base_clock);
      request.set_phase(CheckpointRequest::VERSION);
      CheckpointResponse response;
      const absl::Status st = core(s).Checkpoint(request, &response);
      if (first.ok()) first = st;
    }
    return first;
  }

  // Per server, its part of the cut at `clock` (published by a thread of
  // the server's: waited for up to a minute); null, and a failure, if none.
  std::vector<std::shared_ptr<const VersionChunks>> PartsAt(uint64_t clock) {
    std::vector<std::shared_ptr<const VersionChunks>> parts;
    for (uint32_t s = 0; s < kServers; ++s) {
      parts.push_back(core(s).versions()->Next(0, clock - 1, absl::Now() + absl::Minutes(1)));
      EXPECT_NE(parts.back(), nullptr) << "server " << s << " published no part at " << clock;
    }
    return parts;
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

// The replicas' versions (version_log.h): once a follower has asked, each
// cut's copy publishes a part per server; the FULL part's weights, then
// each DELTA part's deletions and weights applied in order, equal the
// weights the servers hold at each cut (evicted rows gone).
TEST(VersionPartsTest, PartsOfEveryCutRebuildTheServersWeights) {
  const std::string root = NewRoot("versions");
  Job job;
  for (uint32_t s = 0; s < kServers; ++s) {
    // A follower's first ask: nothing kept yet, and parts are wanted now.
    EXPECT_EQ(job.core(s).versions()->Next(0, 0, absl::InfinitePast()), nullptr);
    EXPECT_TRUE(job.core(s).versions()->wanted());
  }
  // (table, key) -> weights, as a replica applies the parts.
  std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> served;
  const auto apply = [&](uint64_t clock, bool full, uint64_t base) {
    std::vector<uint32_t> covered;
    for (uint32_t s = 0; s < kServers; ++s) {
      const auto chunks = job.core(s).versions()->Next(0, clock - 1, absl::InfinitePast());
      ASSERT_NE(chunks, nullptr) << "server " << s << " published no part at " << clock;
      ASSERT_EQ(chunks->size(), 1u);  // Under the default message size.
      const std::shared_ptr<const VersionPart>& part = chunks->front();
      EXPECT_EQ(part->clock(), clock);
      EXPECT_EQ(part->full(), full);
      EXPECT_EQ(part->server_index(), s);
      EXPECT_EQ(part->num_partitions(), kParts);
      if (!full) {
        EXPECT_EQ(part->base_clock(), base);
        EXPECT_EQ(part->base_generation(), part->generation());
      }
      covered.insert(covered.end(), part->partitions().begin(), part->partitions().end());
      for (const VersionRows& t : part->tables()) {
        for (uint64_t key : t.deleted()) served.erase({t.table_id(), key});
        ASSERT_EQ(t.weights().size(), t.keys_size() * t.dim() * sizeof(float));
        for (int k = 0; k < t.keys_size(); ++k) {
          std::vector<float> w(t.dim());
          std::memcpy(w.data(), t.weights().data() + k * t.dim() * sizeof(float),
                      t.dim() * sizeof(float));
          served[{t.table_id(), t.keys(k)}] = w;
        }
      }
    }
    std::sort(covered.begin(), covered.end());
    EXPECT_EQ(covered.size(), kParts);
    EXPECT_EQ(std::unique(covered.begin(), covered.end()), covered.end());
    // The servers' rows, weights only (the shared rows are not in DumpAll).
    std::map<std::pair<uint32_t, uint64_t>, std::vector<float>> trained;
    for (const auto& [id, payload] : job.DumpAll()) {
      const size_t dim = job.core(0).store()->FindTable(id.first)->dim();
      trained[id] = std::vector<float>(payload.begin(), payload.begin() + dim);
    }
    EXPECT_TRUE(served == trained) << "version " << clock << ": " << served.size()
                                   << " rows served, " << trained.size() << " trained";
  };
  for (uint64_t c = 0; c < 2; ++c) job.Step(c);
  const ckpt::CheckpointManifest full = job.Checkpoint(root, 2, nullptr);
  apply(2, /*full=*/true, 0);
  for (uint64_t c = 2; c < 4; ++c) job.Step(c);
  const ckpt::CheckpointManifest delta4 = job.Checkpoint(root, 4, &full);
  apply(4, /*full=*/false, 2);
  const uint64_t evicted_before = job.evicted();
  for (uint64_t c = 4; c < 7; ++c) job.Step(c);
  ASSERT_GT(job.evicted(), evicted_before);  // The last part deletes rows.
  job.Checkpoint(root, 7, &delta4);
  apply(7, /*full=*/false, 4);
  for (uint32_t s = 0; s < kServers; ++s) {
    EXPECT_EQ(job.core(s).versions()->parts(), 3u);
    // A follower at the newest version waits for the next.
    EXPECT_EQ(job.core(s).versions()->Next(0, 7, absl::Now() + absl::Milliseconds(10)), nullptr);
  }
}

// Versions between checkpoints (Checkpoint phase VERSION): with no
// follower a cut copies and publishes nothing; with one, each cut publishes
// a DELTA part on the last complete checkpoint and writes nothing (no
// directory). A later version is again a delta on that checkpoint, so it
// holds the rows of the earlier one too, and the next checkpoint's delta
// still holds every row changed since its base (its chain restores the
// servers' rows). With hashes asked for, the parts' state_hash add up to
// the hash of every row the servers hold at the cut. Without delta a
// version is refused.
TEST(VersionPartsTest, VersionCutsAreDeltasOnTheCheckpointAndWriteNothing) {
  const std::string root = NewRoot("version_cuts");
  Job job;
  for (uint64_t c = 0; c < 2; ++c) job.Step(c);
  const ckpt::CheckpointManifest full = job.Checkpoint(root, 2, nullptr);
  const auto cut = [&](uint64_t clock, bool delta) { return job.CutVersion(clock, 2, delta); };
  // No follower yet: nothing is published.
  ASSERT_TRUE(cut(3, true).ok());
  for (uint32_t s = 0; s < kServers; ++s) {
    EXPECT_EQ(job.core(s).versions()->parts(), 0u);
    EXPECT_EQ(job.core(s).versions()->Next(0, 0, absl::InfinitePast()), nullptr);
    job.core(s).versions()->WantHashes();
  }
  EXPECT_EQ(cut(3, false).code(), absl::StatusCode::kInvalidArgument);

  // The keys every server's part of version `clock` writes or deletes
  // (published by a thread of the server's: waited for), after checking
  // its header and that its hashes add up to the hash of the servers' rows.
  const auto keys_of = [&](uint64_t clock) {
    std::set<std::pair<uint32_t, uint64_t>> keys;
    uint64_t hashes = 0;
    for (const auto& chunks : job.PartsAt(clock)) {
      if (chunks == nullptr) continue;
      for (const auto& part : *chunks) {
        EXPECT_EQ(part->clock(), clock);
        EXPECT_FALSE(part->full());
        EXPECT_EQ(part->base_clock(), 2u);
        EXPECT_TRUE(part->has_state_hash());
        if (part->chunk() == 0) hashes += part->state_hash();
        for (const VersionRows& t : part->tables()) {
          for (uint64_t key : t.keys()) keys.insert({t.table_id(), key});
          for (uint64_t key : t.deleted()) keys.insert({t.table_id(), key});
        }
      }
    }
    TableHash trained;
    for (const auto& [id, payload] : job.DumpAll()) {
      trained.Add(id.first, id.second, payload.data(),
                  job.core(0).store()->FindTable(id.first)->dim());
    }
    EXPECT_EQ(hashes, trained.value()) << "version " << clock;
    EXPECT_FALSE(ckpt::IsDirectory(ckpt::CheckpointPath(root, clock))) << clock;
    return keys;
  };
  const auto pushed = [](uint64_t from, uint64_t to) {
    std::set<std::pair<uint32_t, uint64_t>> keys;
    for (uint64_t c = from; c < to; ++c) {
      for (uint32_t table : {1u, 2u}) {
        for (uint64_t key : KeysAt(table, c)) keys.insert({table, key});
      }
    }
    return keys;
  };
  for (uint64_t c = 2; c < 4; ++c) job.Step(c);
  ASSERT_TRUE(cut(4, true).ok());
  const auto at4 = keys_of(4);
  // The pushes of clocks 2 and 3, after the base.
  for (const auto& key : pushed(2, 4)) EXPECT_EQ(at4.count(key), 1u) << key.second;
  for (uint64_t c = 4; c < 6; ++c) job.Step(c);
  ASSERT_TRUE(cut(6, true).ok());
  const auto at6 = keys_of(6);
  // Table 1's keys pushed at clocks 2-3 and not since are in version 6 too
  // (as rows, or deletions once evicted): it is a delta on 2, not on 4.
  size_t carried = 0;
  const auto since4 = pushed(4, 6);
  for (const auto& key : pushed(2, 4)) {
    if (key.first != 1 || since4.count(key) > 0) continue;
    EXPECT_EQ(at6.count(key), 1u) << key.second;
    ++carried;
  }
  EXPECT_GT(carried, 0u);
  // The next checkpoint is a delta on 2 that restores the servers' rows.
  job.Step(6);
  job.Checkpoint(root, 7, &full);
  Job restored;
  ASSERT_TRUE(restored.Restore(root, 7).ok());
  EXPECT_TRUE(restored.DumpAll() == job.DumpAll());
}

// Each cut's part carries, in its chunk 0, the age at the cut of every push
// its server applied since the cut before (version or checkpoint), once a
// follower wants versions; a cut with no push between carries none.
TEST(VersionPartsTest, PartsCarryTheAgesOfThePushesSinceTheCutBefore) {
  const std::string root = NewRoot("push_ages");
  Job job;
  job.Step(0);  // No follower yet: not stamped.
  const ckpt::CheckpointManifest full = job.Checkpoint(root, 1, nullptr);
  for (uint32_t s = 0; s < kServers; ++s) {
    EXPECT_EQ(job.core(s).versions()->Next(0, 0, absl::InfinitePast()), nullptr);
  }
  // Per server, the ages its part of `clock` carries (chunk 0 only).
  const auto ages_of = [&](uint64_t clock) {
    std::vector<std::vector<uint32_t>> ages(kServers);
    const auto parts = job.PartsAt(clock);
    for (uint32_t s = 0; s < kServers; ++s) {
      if (parts[s] == nullptr) continue;
      for (const auto& part : *parts[s]) {
        EXPECT_EQ(part->clock(), clock);
        if (part->chunk() != 0) {
          EXPECT_EQ(part->push_ages_micros_size(), 0) << "chunk " << part->chunk();
          continue;
        }
        ages[s].assign(part->push_ages_micros().begin(), part->push_ages_micros().end());
      }
    }
    return ages;
  };
  const absl::Time first = absl::Now();
  job.Step(1);
  job.Step(2);
  absl::SleepFor(absl::Milliseconds(30));
  const absl::Time last = absl::Now();
  job.Step(3);
  ASSERT_TRUE(job.CutVersion(4, 1).ok());
  const absl::Time after = absl::Now();
  for (const std::vector<uint32_t>& ages : ages_of(4)) {
    ASSERT_EQ(ages.size(), 3u);  // Every server took a push at clocks 1, 2 and 3.
    std::vector<uint32_t> sorted = ages;
    std::sort(sorted.begin(), sorted.end());
    // Two pushes applied before the sleep, one after: no age is older than
    // the first push, and two are at least the sleep old.
    EXPECT_LE(sorted[2], absl::ToInt64Microseconds(after - first));
    EXPECT_GE(sorted[1], 30000u);
    EXPECT_LE(sorted[0], absl::ToInt64Microseconds(after - last));
  }
  ASSERT_TRUE(job.CutVersion(5, 1).ok());  // Nothing pushed since 4.
  for (const std::vector<uint32_t>& ages : ages_of(5)) EXPECT_TRUE(ages.empty());
  job.Step(5);
  job.Checkpoint(root, 6, &full);  // A checkpoint cut is a version with its pushes too.
  for (const std::vector<uint32_t>& ages : ages_of(6)) EXPECT_EQ(ages.size(), 1u);
}

// A long period keeps a uniform sample of its stamps, not its first ones,
// and a cut starts the next period empty.
TEST(VersionPartsTest, ApplyStampsKeepAUniformSampleOfALongPeriod) {
  ApplyStamps stamps;
  const absl::Time start = absl::FromUnixSeconds(1700000000);
  constexpr int kStamps = 10000;
  for (int i = 0; i < kStamps; ++i) stamps.Record(start + absl::Microseconds(i));
  EXPECT_EQ(stamps.recorded(), static_cast<uint64_t>(kStamps));
  const std::vector<uint32_t> ages = stamps.TakeAges(start + absl::Microseconds(kStamps));
  ASSERT_EQ(ages.size(), ApplyStamps::kMaxSamples);
  double sum = 0;
  for (uint32_t age : ages) {
    ASSERT_GE(age, 1u);
    ASSERT_LE(age, static_cast<uint32_t>(kStamps));
    sum += age;
  }
  // Uniform over 1..10000: a mean of 5000 (the first 4096 alone: 7952).
  EXPECT_NEAR(sum / ages.size(), 5000, 300);
  EXPECT_EQ(stamps.recorded(), 0u);
  EXPECT_TRUE(stamps.TakeAges(start).empty());
  stamps.Record(start + absl::Seconds(1));  // After the cut: age 0, not negative.
  EXPECT_EQ(stamps.TakeAges(start), std::vector<uint32_t>{0});
}

// A part larger than a message is sent in chunks: each under the limit (a
// row at least), numbered in order, naming the part's partitions; together
// they hold the rows and deletions of the part in one message.
TEST(VersionPartsTest, APartIsChunkedUnderTheMessageLimit) {
  Job job;
  for (uint64_t c = 0; c < 2; ++c) job.Step(c);
  const TableStore& store = *job.core(0).store();
  std::vector<bool> owned(kParts);
  for (uint32_t p = 0; p < kParts; ++p) owned[p] = job.core(0).map()->OwnerOfPartition(p) == 0;
  const std::unique_ptr<StoreSnapshot> snapshot = StoreSnapshot::Take(store, owned);
  const VersionChunks whole =
      MakeVersionPart(*snapshot, store, 2, 1, 0, 0, 0, absl::Now(), size_t{1} << 30);
  ASSERT_EQ(whole.size(), 1u);
  constexpr size_t kLimit = 512;
  const VersionChunks chunks =
      MakeVersionPart(*snapshot, store, 2, 1, 0, 0, 0, absl::Now(), kLimit);
  ASSERT_GT(chunks.size(), 4u);
  std::map<std::pair<uint32_t, uint64_t>, std::string> rows, rows_whole;
  const auto collect = [](const VersionChunks& parts, auto* out) {
    for (const auto& part : parts) {
      for (const VersionRows& t : part->tables()) {
        const size_t bytes = t.dim() * sizeof(float);
        for (int k = 0; k < t.keys_size(); ++k) {
          (*out)[{t.table_id(), t.keys(k)}] = t.weights().substr(k * bytes, bytes);
        }
      }
    }
  };
  for (size_t c = 0; c < chunks.size(); ++c) {
    EXPECT_EQ(chunks[c]->chunk(), c);
    EXPECT_EQ(chunks[c]->num_chunks(), chunks.size());
    EXPECT_EQ(chunks[c]->partitions_size(), whole[0]->partitions_size());
    EXPECT_EQ(chunks[c]->clock(), 2u);
    size_t payload = 0;
    for (const VersionRows& t : chunks[c]->tables()) {
      payload += t.keys_size() * sizeof(uint64_t) + t.weights().size();
    }
    EXPECT_LE(payload, kLimit) << "chunk " << c;
  }
  collect(chunks, &rows);
  collect(whole, &rows_whole);
  EXPECT_EQ(rows.size(), snapshot->rows());
  EXPECT_TRUE(rows == rows_whole);
}

// Without a follower no part is built; the log keeps the newest parts in
// (generation, clock) order, replaces a retried cut, and wakes waiters.
TEST(VersionPartsTest, LogKeepsTheNewestPartsInOrder) {
  {
    const std::string root = NewRoot("no_follower");
    Job job;
    for (uint64_t c = 0; c < 2; ++c) job.Step(c);
    job.Checkpoint(root, 2, nullptr);
    EXPECT_EQ(job.core(0).versions()->parts(), 0u);
  }
  VersionLog log(/*max_bytes=*/1 << 20);
  const auto part = [](uint64_t generation, uint64_t clock, size_t bytes) {
    auto p = std::make_shared<VersionPart>();
    p->set_generation(generation);
    p->set_clock(clock);
    p->add_tables()->mutable_weights()->resize(bytes);
    return VersionChunks{p};
  };
  for (uint64_t c = 1; c <= VersionLog::kMaxParts + 2; ++c) log.Publish(part(1, c, 10));
  EXPECT_EQ(log.parts(), VersionLog::kMaxParts);
  // The oldest kept is handed to a follower further behind.
  EXPECT_EQ(log.Next(1, 0, absl::InfinitePast())->front()->clock(), 3u);
  EXPECT_EQ(log.Next(1, 5, absl::InfinitePast())->front()->clock(), 6u);
  // A new generation (a rollback to an older clock) orders after.
  log.Publish(part(2, 4, 10));
  EXPECT_EQ(log.Next(1, VersionLog::kMaxParts + 2, absl::InfinitePast())->front()->generation(),
            2u);
  // A retried cut replaces its part.
  log.Publish(part(2, 4, 20));
  EXPECT_EQ(log.Next(1, 100, absl::InfinitePast())->front()->tables(0).weights().size(), 20u);
  // Over max_bytes the oldest go; the newest stays even alone.
  log.Publish(part(2, 5, 2 << 20));
  EXPECT_EQ(log.parts(), 1u);
  EXPECT_EQ(log.Next(0, 0, absl::InfinitePast())->front()->clock(), 5u);
  // A waiting follower is woken by a publish, and by Stop.
  std::thread publisher([&] {
    absl::SleepFor(absl::Milliseconds(20));
    log.Publish(part(2, 6, 10));
  });
  const auto next = log.Next(2, 5, absl::InfiniteFuture());
  publisher.join();
  ASSERT_NE(next, nullptr);
  EXPECT_EQ(next->front()->clock(), 6u);
  std::thread stopper([&] {
    absl::SleepFor(absl::Milliseconds(20));
    log.Stop();
  });
  EXPECT_EQ(log.Next(2, 6, absl::InfiniteFuture()), nullptr);
  stopper.join();
  EXPECT_TRUE(log.stopped());
}

}  // namespace
}  // namespace shardps

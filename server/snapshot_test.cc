// Checkpoint and restore of ParameterServerCore (server/snapshot.h): round
// trips, restores onto other server counts, the two phases. Core-level, no
// network.
#include "server/snapshot.h"

#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "gtest/gtest.h"
#include "server/parameter_server_core.h"
#include "server/snapshot_test_util.h"

namespace shardps {
namespace {

namespace ckpt = checkpoint;
using testing::Config;
using testing::Dump;
using testing::Job;
using testing::kJob;
using testing::kParts;
using testing::NewRoot;

TEST(SnapshotTest, RoundTripIsBitIdenticalIncludingOptimizerState) {
  Job original(2);
  for (uint64_t c = 0; c < 5; ++c) original.Step(c);
  const std::string dir = original.Checkpoint(NewRoot("roundtrip"), 5);
  const Dump before = original.DumpAll();
  ASSERT_EQ(before.size(), 500u);

  Job restored(2);
  ASSERT_TRUE(restored.Restore(dir).ok());
  EXPECT_EQ(restored.DumpAll(), before);
  EXPECT_EQ(restored.core(0).applied_clock(), 5u);
  EXPECT_EQ(restored.core(1).applied_clock(), 5u);
  EXPECT_EQ(restored.PullAll(5), original.PullAll(5));

  // The optimizer state came along: the same further steps give the same
  // rows (Adam's moments and step counts, Adagrad's accumulators).
  for (uint64_t c = 5; c < 8; ++c) {
    original.Step(c);
    restored.Step(c);
  }
  EXPECT_EQ(restored.PullAll(8), original.PullAll(8));
  EXPECT_EQ(restored.DumpAll(), original.DumpAll());
  EXPECT_NE(original.DumpAll(), before);
}

TEST(SnapshotTest, RestoresOntoOtherServerCounts) {
  // 3 servers split both partition groups, so some files hold part of a
  // group; 2 servers own one whole group each.
  for (uint32_t from : {2u, 3u}) {
    Job original(from);
    for (uint64_t c = 0; c < 3; ++c) original.Step(c);
    const std::string dir = original.Checkpoint(NewRoot(absl::StrCat("servers", from)), 3);
    const Dump before = original.DumpAll();
    for (uint32_t to : {1u, 2u, 3u}) {
      Job restored(to);
      ASSERT_TRUE(restored.Restore(dir).ok()) << from << " -> " << to;
      EXPECT_EQ(restored.DumpAll(), before) << from << " -> " << to;
      for (uint64_t c = 3; c < 5; ++c) restored.Step(c);
      EXPECT_EQ(restored.core(0).applied_clock(), 5u);
    }
  }
}

// A pace sleeps until the work done is due: Done(1 MB) at 1 MB/s returns
// no sooner than a second after the pace started (less the 2 ms lead it
// may keep), however fast the machine; without a rate it never sleeps.
TEST(SnapshotTest, RestorePaceSleepsUntilTheBytesAreDue) {
  const absl::Time start = absl::Now();
  RestorePace paced(1000000);
  paced.Done(1000000);
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(998));
  RestorePace unpaced(0);
  unpaced.Done(1000000);
  EXPECT_EQ(unpaced.slept(), absl::ZeroDuration());
}

TEST(SnapshotTest, FileNamesFollowPartitionGroups) {
  Job two(2);
  two.Step(0);
  two.SetRoot(NewRoot("names"));
  CheckpointRequest request;
  request.set_clock(1);
  CheckpointResponse r0, r1;
  ASSERT_TRUE(two.core(0).Checkpoint(request, &r0).ok());
  ASSERT_TRUE(two.core(1).Checkpoint(request, &r1).ok());
  ASSERT_EQ(r0.files_size(), 1);
  EXPECT_EQ(r0.files(0), "part-0000.shard");
  EXPECT_EQ(r1.files(0), "part-0001.shard");
  ASSERT_EQ(r0.written(0).partitions_size(), 64);
  EXPECT_EQ(r0.rows() + r1.rows(), 500u);
  EXPECT_GT(r0.bytes(), 0u);

  Job three(3);  // Owns [0,42], [43,85], [86,127].
  three.Step(0);
  three.SetRoot(NewRoot("names3"));
  CheckpointResponse r;
  ASSERT_TRUE(three.core(1).Checkpoint(request, &r).ok());
  ASSERT_EQ(r.files_size(), 2);
  EXPECT_EQ(r.files(0), "part-0000-000043.shard");
  EXPECT_EQ(r.files(1), "part-0001-000064.shard");
}

TEST(SnapshotTest, RestoreByRootFindsTheLatestOrTheNamedClock) {
  Job original(1);
  const std::string root = NewRoot("byroot");
  original.Step(0);
  original.Checkpoint(root, 1);
  const Dump at1 = original.DumpAll();
  original.Step(1);
  original.Checkpoint(root, 2);
  const Dump at2 = original.DumpAll();
  ASSERT_NE(at1, at2);

  Job restored(1);
  restored.SetRoot(root);
  RestoreRequest request;  // No clock: the latest.
  ASSERT_TRUE(restored.Restore(request).ok());
  EXPECT_EQ(restored.DumpAll(), at2);
  request.set_clock(1);
  ASSERT_TRUE(restored.Restore(request).ok());
  EXPECT_EQ(restored.DumpAll(), at1);
  EXPECT_EQ(restored.core(0).applied_clock(), 1u);
}

TEST(SnapshotTest, BspCheckpointNeedsExactlyTheClocksBelowApplied) {
  Job job(1);
  job.Step(0);
  job.Step(1);
  job.SetRoot(NewRoot("clock"));
  CheckpointRequest request;
  request.set_clock(1);
  CheckpointResponse response;
  absl::Status st = job.core(0).Checkpoint(request, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("applied clocks < 2"), std::string::npos) << st;

  // A delta on a checkpoint this server never copied: refused.
  request.set_delta(true);
  request.set_clock(2);
  request.set_base_clock(1);
  st = job.core(0).Checkpoint(request, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("no record of its base ckpt-000000000001"), std::string::npos) << st;
  // Without a checkpoint directory in the server's config: refused, naming
  // the setting (a request cannot name one).
  job.SetRoot("");
  request.set_delta(false);
  st = job.core(0).Checkpoint(request, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  EXPECT_NE(st.message().find("checkpoint.dir"), std::string::npos) << st;
}

TEST(SnapshotTest, CheckpointWithManifestCannotBeOverwritten) {
  Job job(1);
  job.Step(0);
  const std::string root = NewRoot("twice");
  job.Checkpoint(root, 1);
  CheckpointRequest request;
  request.set_clock(1);
  CheckpointResponse response;
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(), absl::StatusCode::kAlreadyExists);
}

TEST(SnapshotTest, CopyPhaseLetsTrainingGoOnWhileFilesAreWritten) {
  Job job(2);
  for (uint64_t c = 0; c < 2; ++c) job.Step(c);
  const Dump at2 = job.DumpAll();
  job.SetRoot(NewRoot("twophase"));
  CheckpointRequest request;
  request.set_clock(2);
  request.set_phase(CheckpointRequest::COPY);
  ckpt::CheckpointManifest manifest;
  for (uint32_t s = 0; s < 2; ++s) {
    CheckpointResponse response;
    ASSERT_TRUE(job.core(s).Checkpoint(request, &response).ok());
    EXPECT_EQ(response.files_size(), 0);
  }
  // Training resumes before the files are collected.
  job.Step(2);
  ASSERT_NE(job.DumpAll(), at2);
  CheckpointRequest collect = request;
  collect.set_phase(CheckpointRequest::COLLECT);
  collect.set_clock(3);
  CheckpointResponse response;
  absl::Status st = job.core(0).Checkpoint(collect, &response);
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition) << st;
  collect.set_clock(2);
  std::string dir;
  for (uint32_t s = 0; s < 2; ++s) {
    response.Clear();
    st = job.core(s).Checkpoint(collect, &response);
    ASSERT_TRUE(st.ok()) << st;
    for (const ckpt::CheckpointFile& f : response.written()) {
      *manifest.add_files() = f;
    }
    dir = response.checkpoint_dir();
  }
  // Collected once only.
  EXPECT_EQ(job.core(0).Checkpoint(collect, &response).code(),
            absl::StatusCode::kFailedPrecondition);
  manifest.set_format_version(ckpt::kManifestFormatVersion);
  manifest.set_checkpoint_id(ckpt::CheckpointId(2));
  manifest.set_clock(2);
  manifest.set_job_name(kJob);
  manifest.set_config_fingerprint(1);
  manifest.set_num_partitions(kParts);
  manifest.set_kind(ckpt::CheckpointManifest::FULL);
  manifest.add_chain(ckpt::CheckpointId(2));
  ASSERT_TRUE(ckpt::WriteManifest(dir, manifest).ok());

  Job restored(1);
  ASSERT_TRUE(restored.Restore(dir).ok());
  EXPECT_EQ(restored.DumpAll(), at2);  // The cut at the copy.
}

TEST(SnapshotTest, UncollectedWriteIsDroppedByTheNextCheckpoint) {
  Job job(1);
  job.Step(0);
  job.SetRoot(NewRoot("uncollected"));
  CheckpointRequest request;
  request.set_clock(1);
  request.set_phase(CheckpointRequest::COPY);
  CheckpointResponse response;
  ASSERT_TRUE(job.core(0).Checkpoint(request, &response).ok());
  job.Step(1);
  request.set_clock(2);
  request.set_phase(CheckpointRequest::COPY_AND_WRITE);
  ASSERT_TRUE(job.core(0).Checkpoint(request, &response).ok());
  EXPECT_EQ(response.files_size(), 2);
  request.set_clock(1);
  request.set_phase(CheckpointRequest::COLLECT);
  EXPECT_EQ(job.core(0).Checkpoint(request, &response).code(),
            absl::StatusCode::kFailedPrecondition);
}

}  // namespace
}  // namespace shardps

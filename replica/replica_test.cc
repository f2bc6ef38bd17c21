// The replica and its service without a job: what they do before any
// version exists, with checkpoints being written or corrupt, and request
// validation. Following real checkpoints (hashes, Predict, evictions) is
// tests/replica/replica_process_test.
#include "replica/replica.h"

#include <grpcpp/grpcpp.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "replica/replica_service.h"
#include "tests/testing/job_util.h"

namespace shardps {
namespace replica {
namespace {

// The small DLRM job of the process tests (tests/testing/job_util.h).
std::string Config() {
  return absl::StrCat(R"pb(name: "replica_unit")pb", testing::kSmallDlrmTables, R"pb(
data { format: CRITEO synthetic_dir: "/nonexistent" }
training { batch_size: 16 intra_op_threads: 1 }
)pb");
}

std::unique_ptr<Replica> MakeReplica(const std::string& dir) {
  auto config = ParseJobConfig(Config(), "replica_test");
  EXPECT_TRUE(config.ok()) << config.status();
  ReplicaOptions options;
  options.config = *config;
  options.checkpoint_dir = dir;
  options.poll_interval = absl::Milliseconds(10);
  auto replica = Replica::Create(std::move(options));
  EXPECT_TRUE(replica.ok()) << replica.status();
  return std::move(*replica);
}

std::string FreshDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir;
}

// Push-to-serve quantiles: within the sketch's 2% of the exact ones, at
// most the maximum, zero when empty.
TEST(LatencySketchTest, QuantilesAreWithinTwoPercentOfTheExactOnes) {
  LatencySketch sketch;
  EXPECT_EQ(sketch.Quantile(0.5), absl::ZeroDuration());
  // 1 ms, 2 ms, ..., 1000 ms: the p50 is 500 ms, the p99 990 ms.
  for (int i = 1000; i >= 1; --i) sketch.Add(absl::Milliseconds(i));
  EXPECT_EQ(sketch.count(), 1000u);
  EXPECT_EQ(sketch.max(), absl::Milliseconds(1000));
  const double p50 = absl::ToDoubleMilliseconds(sketch.Quantile(0.5));
  const double p99 = absl::ToDoubleMilliseconds(sketch.Quantile(0.99));
  EXPECT_GE(p50, 500);
  EXPECT_LE(p50, 500 * LatencySketch::kGrowth);
  EXPECT_GE(p99, 990);
  EXPECT_LE(p99, 990 * LatencySketch::kGrowth);
  EXPECT_EQ(sketch.Quantile(1.0), absl::Milliseconds(1000));
  sketch.Add(absl::ZeroDuration());                 // The first bucket,
  sketch.Add(absl::Hours(5));                       // the last,
  EXPECT_EQ(sketch.Quantile(1.0), absl::Hours(5));  // the maximum kept exact.
}

TEST(ReplicaTest, NeedsACheckpointDirectory) {
  ReplicaOptions options;
  auto replica = Replica::Create(options);
  EXPECT_EQ(replica.status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ReplicaTest, BuildNiceMustBeANiceValue) {
  for (int nice : {-21, 20}) {
    ReplicaOptions options;
    options.checkpoint_dir = FreshDir("nice");
    options.build_nice = nice;
    auto replica = Replica::Create(options);
    EXPECT_EQ(replica.status().code(), absl::StatusCode::kInvalidArgument) << nice;
    EXPECT_NE(replica.status().message().find(std::to_string(nice)), std::string::npos)
        << replica.status();
  }
  ReplicaOptions options;
  options.checkpoint_dir = FreshDir("nice");
  options.build_nice = 19;
  EXPECT_TRUE(Replica::Create(options).ok());
}

TEST(ReplicaTest, WithoutACheckpointServesNothingAndSaysWhatItWaitedFor) {
  const std::string dir = FreshDir("empty");
  std::unique_ptr<Replica> replica = MakeReplica(dir);
  replica->Start();
  EXPECT_FALSE(replica->Status().loaded);
  EXPECT_EQ(replica->Current(), nullptr);
  absl::Status st = replica->WaitForVersion(1, absl::Now() + absl::Milliseconds(50));
  EXPECT_EQ(st.code(), absl::StatusCode::kDeadlineExceeded);
  EXPECT_NE(st.message().find("waited for version >= 1 of " + dir), absl::string_view::npos) << st;
}

TEST(ReplicaTest, ACheckpointBeingWrittenIsLeftAloneACorruptOneIsReported) {
  const std::string dir = FreshDir("corrupt");
  std::unique_ptr<Replica> replica = MakeReplica(dir);
  std::filesystem::create_directories(dir + "/ckpt-000000000010");  // No MANIFEST yet.
  EXPECT_FALSE(replica->PollOnce());
  EXPECT_EQ(replica->Status().last_error, "");
  std::ofstream(dir + "/ckpt-000000000010/MANIFEST") << "not a manifest\n";
  EXPECT_FALSE(replica->PollOnce());
  const ReplicaStatus status = replica->Status();
  EXPECT_FALSE(status.loaded);
  EXPECT_NE(status.last_error.find("ckpt-000000000010"), std::string::npos) << status.last_error;
}

TEST(ReplicaServiceTest, ValidatesBeforeAnswering) {
  std::unique_ptr<Replica> replica = MakeReplica(FreshDir("service"));
  ReplicaService service(replica.get());
  grpc::ServerContext context;

  PredictRequest too_many;
  for (size_t i = 0; i <= kMaxPredictLines; ++i) too_many.add_lines("0");
  PredictResponse predicted;
  EXPECT_EQ(service.Predict(&context, &too_many, &predicted).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  PredictRequest too_long;
  too_long.add_lines("0");
  too_long.add_lines(std::string(kMaxLineBytes + 1, '1'));
  grpc::Status st = service.Predict(&context, &too_long, &predicted);
  EXPECT_EQ(st.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_NE(st.error_message().find("line 1: "), std::string::npos) << st.error_message();

  LookupRequest too_many_keys;
  for (size_t i = 0; i <= kMaxLookupKeys; ++i) too_many_keys.add_keys(i);
  LookupResponse looked_up;
  EXPECT_EQ(service.Lookup(&context, &too_many_keys, &looked_up).error_code(),
            grpc::StatusCode::INVALID_ARGUMENT);

  // Valid, but there is no version yet.
  PredictRequest fine;
  fine.add_lines("0");
  EXPECT_EQ(service.Predict(&context, &fine, &predicted).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  LookupRequest lookup;
  lookup.set_table_id(1);
  lookup.add_keys(7);
  EXPECT_EQ(service.Lookup(&context, &lookup, &looked_up).error_code(),
            grpc::StatusCode::UNAVAILABLE);
  ReplicaStatusRequest status_request;
  ReplicaStatusResponse status;
  ASSERT_TRUE(service.Status(&context, &status_request, &status).ok());
  EXPECT_FALSE(status.loaded());
  EXPECT_EQ(status.version(), 0u);
}

}  // namespace
}  // namespace replica
}  // namespace shardps

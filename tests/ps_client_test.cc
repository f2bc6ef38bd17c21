// The worker's PsClient against two real ps_server processes.
#include "common/client/ps_client.h"

#include <cmath>
#include <fstream>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;

constexpr char kConfig[] = R"pb(
name: "client-test"
tables {
  id: 1 name: "emb" dim: 4 seed: 3
  init { kind: ZEROS }
  optimizer { sgd { learning_rate: 0.5 } }
}
tables {
  id: 2 name: "ada" dim: 4 seed: 3
  init { kind: ZEROS }
  optimizer { adagrad { learning_rate: 0.5 initial_accumulator: 0.25 } }
}
data { train_files: "unused.tsv" }
cluster { num_servers: 2 num_workers: 1 num_partitions: 64 mode: ASP }
)pb";

class PsClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const std::string path = ::testing::TempDir() + "/client.pbtxt";
    std::ofstream(path) << kConfig;
    PartitionMapProto map;
    map.set_version(1);
    map.set_num_partitions(64);
    auto contiguous = PartitionMap::Contiguous(1, 64, 2);
    for (uint32_t o : contiguous->owners()) map.add_owner(o);
    for (int i = 0; i < 2; ++i) {
      ASSERT_TRUE(servers_[i]
                      .Start({RunfilePath("server/ps_server"), "--config=" + path,
                              absl::StrCat("--index=", i)})
                      .ok());
      auto address = servers_[i].WaitForLine("PS_SERVER_LISTENING ", absl::Seconds(30));
      ASSERT_TRUE(address.ok()) << address.status();
      map.add_server_addresses(*address);
    }
    map_ = map;
  }

  std::unique_ptr<PsClient> Client(PsClient::Options options, PartitionMapProto start) {
    auto client = PsClient::Create(options, start, [this](uint64_t) { return map_; });
    EXPECT_TRUE(client.ok()) << client.status();
    return *std::move(client);
  }

  Subprocess servers_[2];
  PartitionMapProto map_;
};

std::vector<uint64_t> Keys(int n) {
  std::vector<uint64_t> keys(n);
  for (int i = 0; i < n; ++i) keys[i] = 1000003ull * i + 7;
  return keys;
}

TEST_F(PsClientTest, PullPushRoundTripAcrossServersWithSplitting) {
  PsClient::Options options;
  options.max_message_bytes = 2000;  // Forces many requests per server.
  auto client = Client(options, map_);
  const std::vector<uint64_t> keys = Keys(500);
  std::vector<float> rows(keys.size() * 4, -1.0f);
  ASSERT_TRUE(
      client->PullAsync({{1, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 0)->Wait().ok());
  for (float v : rows) ASSERT_EQ(v, 0.0f);  // ZEROS init
  std::vector<float> grads(keys.size() * 4);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 7);
  ASSERT_TRUE(client->PushAsync({{1, 4, keys.data(), keys.size(), grads.data()}}, 0, 1.0f, false)
                  ->Wait()
                  .ok());
  ASSERT_TRUE(
      client->PullAsync({{1, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 1)->Wait().ok());
  for (size_t i = 0; i < rows.size(); ++i) {
    ASSERT_EQ(rows[i], -0.5f * grads[i]) << i;  // SGD, lr 0.5, exact
  }
}

TEST_F(PsClientTest, Bf16OnTheWireRoundsValues) {
  PsClient::Options options;
  options.encoding = Encoding::kBf16;
  auto client = Client(options, map_);
  const std::vector<uint64_t> keys = Keys(20);
  std::vector<float> grads(keys.size() * 4, 1.0f / 3.0f);
  ASSERT_TRUE(client->PushAsync({{1, 4, keys.data(), keys.size(), grads.data()}}, 0, 1.0f, false)
                  ->Wait()
                  .ok());
  std::vector<float> rows(keys.size() * 4);
  ASSERT_TRUE(
      client->PullAsync({{1, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 1)->Wait().ok());
  for (float v : rows) EXPECT_NEAR(v, -0.5f / 3.0f, 2e-3f);
}

TEST_F(PsClientTest, StaleMapIsRefreshedAndTheCallSucceeds) {
  // The client starts with a map that sends every key to server 0, at a
  // version the servers do not have: they answer ABORTED, the client fetches
  // map_ and resends.
  PartitionMapProto stale = map_;
  stale.set_version(0);
  for (int p = 0; p < stale.owner_size(); ++p) stale.set_owner(p, 0);
  auto client = Client(PsClient::Options(), stale);
  const std::vector<uint64_t> keys = Keys(100);
  std::vector<float> rows(keys.size() * 4, -1.0f);
  ASSERT_TRUE(
      client->PullAsync({{1, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 0)->Wait().ok());
  EXPECT_EQ(client->map_version(), 1u);
  for (float v : rows) EXPECT_EQ(v, 0.0f);
}

// A mostly-zero push sent as non-zeros only is applied exactly as the full
// push, and costs fewer bytes; a dense one falls back to the full rows.
TEST_F(PsClientTest, SparsePushIsAppliedAsTheFullPushInFewerBytes) {
  auto client = Client(PsClient::Options(), map_);
  const std::vector<uint64_t> keys = Keys(200);
  std::vector<float> grads(keys.size() * 4, 0.0f);
  for (size_t i = 0; i < grads.size(); i += 37) grads[i] = (i % 2 ? -1.0f : 1.0f) * (1 + i);
  TablePush push{1, 4, keys.data(), keys.size(), grads.data()};
  push.sparse = true;
  ASSERT_TRUE(client->PushAsync({push}, 0, 1.0f, false)->Wait().ok());
  const uint64_t sparse_bytes = client->Traffic()[1].push_bytes;
  std::vector<float> rows(keys.size() * 4, -1.0f);
  ASSERT_TRUE(
      client->PullAsync({{1, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 1)->Wait().ok());
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], -0.5f * grads[i]) << i;
  // The same push in full, from a second client: the rows move by as much
  // again, and the bytes are those of every element.
  auto full = Client(PsClient::Options(), map_);
  ASSERT_TRUE(full->PushAsync({{1, 4, keys.data(), keys.size(), grads.data()}}, 1, 1.0f, false)
                  ->Wait()
                  .ok());
  const uint64_t full_bytes = full->Traffic()[1].push_bytes;
  const uint64_t key_bytes = keys.size() * 8;  // Sent either way.
  EXPECT_GE(full_bytes, key_bytes + keys.size() * 16);
  EXPECT_LT((sparse_bytes - key_bytes) * 3, full_bytes - key_bytes)
      << sparse_bytes << " vs " << full_bytes;
  ASSERT_TRUE(
      client->PullAsync({{1, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 2)->Wait().ok());
  for (size_t i = 0; i < rows.size(); ++i) ASSERT_EQ(rows[i], -1.0f * grads[i]) << i;
  // Two pulls, each of every key and row.
  EXPECT_GE(client->Traffic()[1].pull_bytes, 2 * (key_bytes + keys.size() * 16));
  // Nothing zero: the full form is smaller, and is what goes.
  std::vector<float> ones(keys.size() * 4, 1.0f);
  auto third = Client(PsClient::Options(), map_);
  TablePush dense{1, 4, keys.data(), keys.size(), ones.data()};
  dense.sparse = true;
  ASSERT_TRUE(third->PushAsync({dense}, 2, 1.0f, false)->Wait().ok());
  EXPECT_EQ(third->Traffic()[1].push_bytes, full_bytes);
}

// Rows with their optimizer state (what a replaying worker reads), across
// both servers: the weights, then Adagrad's sums. A state width other
// than the server's is data loss; a bf16 client is refused.
TEST_F(PsClientTest, PullWithStateReadsWeightsAndOptimizerState) {
  auto client = Client(PsClient::Options(), map_);
  const std::vector<uint64_t> keys = Keys(300);
  std::vector<float> grads(keys.size() * 4);
  for (size_t i = 0; i < grads.size(); ++i) grads[i] = static_cast<float>(i % 3);  // 0, 1, 2
  ASSERT_TRUE(client->PushAsync({{2, 4, keys.data(), keys.size(), grads.data()}}, 0, 1.0f, false)
                  ->Wait()
                  .ok());
  std::vector<float> rows(keys.size() * 8, -1.0f);
  TablePull pull{2, 4, keys.data(), keys.size(), rows.data()};
  pull.state = 4;
  ASSERT_TRUE(client->PullAsync({pull}, TRAIN, 1)->Wait().ok());
  for (size_t i = 0; i < keys.size(); ++i) {
    for (size_t j = 0; j < 4; ++j) {
      const float g = grads[i * 4 + j];
      const float sum = 0.25f + g * g;  // Exact: small integers and a quarter.
      ASSERT_EQ(rows[i * 8 + 4 + j], sum) << i;
      ASSERT_EQ(rows[i * 8 + j], -0.5f * g / (std::sqrt(sum) + 1e-10f)) << i;
    }
  }
  pull.state = 3;
  EXPECT_EQ(client->PullAsync({pull}, TRAIN, 1)->Wait().code(), absl::StatusCode::kDataLoss);
  PsClient::Options bf16;
  bf16.encoding = Encoding::kBf16;
  pull.state = 4;
  EXPECT_EQ(Client(bf16, map_)->PullAsync({pull}, TRAIN, 1)->Wait().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(PsClientTest, BadRequestIsReportedNotRetried) {
  auto client = Client(PsClient::Options(), map_);
  const std::vector<uint64_t> keys = {1, 2, 3};
  std::vector<float> rows(3 * 4);
  const absl::Status st =
      client->PullAsync({{99, 4, keys.data(), keys.size(), rows.data()}}, TRAIN, 0)->Wait();
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  std::vector<float> grads(3 * 4, NAN);
  EXPECT_EQ(client->PushAsync({{1, 4, keys.data(), keys.size(), grads.data()}}, 0, 1.0f, false)
                ->Wait()
                .code(),
            absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace shardps

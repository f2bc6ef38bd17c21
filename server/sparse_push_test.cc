// ParameterServerCore: pushes in the sparse form (ps.proto SparseGradients,
// a worker's compressed dense gradient) are applied exactly as the full
// push they stand for; malformed ones are refused and change nothing.
#include <string>
#include <vector>

#include "common/codec.h"
#include "gtest/gtest.h"
#include "server/core_test_config.h"
#include "server/parameter_server_core.h"

namespace shardps {
namespace {

constexpr uint32_t kDim = 8;

std::unique_ptr<ParameterServerCore> MakeCore(ConsistencyMode mode, uint64_t max_bytes) {
  CoreOptions options;
  JobConfig& c = options.config;
  TableConfig* t = testing::AddSparseTable(&c, 1, "mlp", kDim);
  t->mutable_optimizer()->mutable_adagrad()->set_learning_rate(0.1f);
  ClusterConfig* k = c.mutable_cluster();
  k->set_num_servers(1);
  k->set_num_workers(1);
  k->set_num_partitions(4);
  k->set_mode(mode);
  k->set_max_message_bytes(max_bytes);
  k->set_server_deadline_ms(60000);
  auto core = ParameterServerCore::Create(options);
  EXPECT_TRUE(core.ok()) << core.status();
  return std::move(*core);
}

const std::vector<uint64_t> kKeys = {3, 4, 5, 6};

// A gradient with most elements zero, of both signs.
std::vector<float> Gradient() {
  std::vector<float> g(kKeys.size() * kDim, 0.0f);
  g[1] = 0.75f;
  g[9] = -0.125f;
  g[10] = 2.5f;
  g[31] = -3.0f;
  return g;
}

PushRequest Push(uint64_t clock, const std::vector<float>& g, bool sparse) {
  PushRequest p;
  p.set_map_version(1);
  p.set_clock(clock);
  TableGradients* tg = p.add_tables();
  tg->set_table_id(1);
  for (uint64_t k : kKeys) tg->add_keys(k);
  if (!sparse) {
    EncodeValues(g.data(), g.size(), Encoding::kFp32, tg->mutable_gradients());
    return p;
  }
  std::vector<uint32_t> gaps;
  uint32_t last = 0;
  AppendNonZeros(g.data(), g.size(), 0, Encoding::kFp32, &gaps, &last,
                 tg->mutable_sparse()->mutable_values());
  for (uint32_t gap : gaps) tg->mutable_sparse()->add_index_gaps(gap);
  return p;
}

std::string Rows(ParameterServerCore& core, uint64_t clock) {
  PullRequest r;
  r.set_map_version(1);
  r.set_purpose(EVAL);
  r.set_clock(clock);
  TableKeys* tk = r.add_tables();
  tk->set_table_id(1);
  for (uint64_t k : kKeys) tk->add_keys(k);
  PullResponse resp;
  EXPECT_TRUE(core.Pull(r, absl::InfiniteFuture(), &resp).ok());
  return resp.tables_size() ? resp.tables(0).values() : "";
}

TEST(SparsePushTest, AppliedExactlyAsTheFullPushInEveryMode) {
  for (ConsistencyMode mode : {ASP, BSP}) {
    auto full = MakeCore(mode, 1 << 20);
    auto sparse = MakeCore(mode, 1 << 20);
    const std::string initial = Rows(*full, 0);
    for (uint64_t clock = 0; clock < 3; ++clock) {
      PushResponse a, b;
      ASSERT_TRUE(full->Push(Push(clock, Gradient(), false), &a).ok());
      ASSERT_TRUE(sparse->Push(Push(clock, Gradient(), true), &b).ok());
      EXPECT_EQ(a.rows_applied(), b.rows_applied());
    }
    const std::string rows = Rows(*sparse, 3);
    EXPECT_EQ(rows, Rows(*full, 3)) << "mode " << mode;
    EXPECT_NE(rows, initial);
  }
}

TEST(SparsePushTest, MalformedSparseFormsAreRefusedAndChangeNothing) {
  auto core = MakeCore(ASP, 4 * kDim * 4);  // Room for exactly 4 rows.
  const std::string before = Rows(*core, 0);
  auto refused = [&](PushRequest p, const std::string& why) {
    PushResponse resp;
    const absl::Status st = core->Push(p, &resp);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << why << ": " << st;
    EXPECT_NE(st.message().find(why), std::string::npos) << st.message();
    EXPECT_EQ(Rows(*core, 0), before) << why;
  };
  PushRequest both = Push(0, Gradient(), true);
  both.mutable_tables(0)->set_gradients(std::string(4 * kDim * 4, '\0'));
  refused(both, "both gradients and sparse");
  PushRequest repeated = Push(0, Gradient(), true);
  repeated.mutable_tables(0)->mutable_sparse()->set_index_gaps(2, 0);
  refused(repeated, "must increase");
  PushRequest outside = Push(0, Gradient(), true);
  outside.mutable_tables(0)->mutable_sparse()->set_index_gaps(3, 100);
  refused(outside, "outside the 32 values");
  PushRequest short_values = Push(0, Gradient(), true);
  short_values.mutable_tables(0)->mutable_sparse()->mutable_values()->pop_back();
  refused(short_values, "4 indices need 16 bytes");
  // A few keys that would expand past what a full push could carry.
  PushRequest big = Push(0, Gradient(), true);
  big.mutable_tables(0)->add_keys(7);
  refused(big, "would expand to 160 bytes, over cluster.max_message_bytes 128");
  PushResponse resp;
  EXPECT_TRUE(core->Push(Push(0, Gradient(), true), &resp).ok());
}

}  // namespace
}  // namespace shardps

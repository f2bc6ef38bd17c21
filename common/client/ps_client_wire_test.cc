// PsClient's wire helpers: a part's rows go into a request and come back
// from an answer at their positions, whether the positions are one run (a
// single server's part), several runs, or scattered (keys split over servers).
#include "common/client/ps_client_wire.h"

#include <cstdint>
#include <string>
#include <vector>

#include "common/codec.h"
#include "gtest/gtest.h"
#include "proto/ps.pb.h"

namespace shardps::ps_client_internal {
namespace {

constexpr uint32_t kDim = 3;
constexpr size_t kRows = 10;

std::vector<uint64_t> Keys() {
  std::vector<uint64_t> keys(kRows);
  for (size_t i = 0; i < kRows; ++i) keys[i] = 1000 + 7 * i;
  return keys;
}

std::vector<float> Values(float base) {
  std::vector<float> v(kRows * kDim);
  for (size_t i = 0; i < v.size(); ++i) v[i] = base + 0.25f * i;
  return v;
}

const std::vector<std::vector<uint32_t>> kPositions = {
    {0, 1, 2, 3, 4, 5, 6, 7, 8, 9},  // One run.
    {2, 3, 4, 7, 8},                 // Two runs.
    {9, 1, 4, 0, 6},                 // No two consecutive.
    {5},
};

TEST(PsClientWireTest, PushTableHoldsTheKeysAndRowsAtThePositions) {
  const std::vector<uint64_t> keys = Keys();
  const std::vector<float> grads = Values(1.0f);
  for (Encoding encoding : {Encoding::kFp32, Encoding::kBf16}) {
    for (const std::vector<uint32_t>& positions : kPositions) {
      const TableRef ref{7, kDim, keys.data(), kRows, nullptr, grads.data(), false};
      PushRequest request;
      AddPushTable(ref, positions, encoding, &request);
      ASSERT_EQ(request.tables_size(), 1);
      const TableGradients& tg = request.tables(0);
      EXPECT_EQ(tg.table_id(), 7u);
      ASSERT_EQ(tg.keys_size(), static_cast<int>(positions.size()));
      std::vector<float> decoded(positions.size() * kDim);
      ASSERT_TRUE(DecodeValues(tg.gradients(), encoding, decoded.size(), decoded.data()).ok());
      for (size_t k = 0; k < positions.size(); ++k) {
        EXPECT_EQ(tg.keys(k), keys[positions[k]]);
        for (uint32_t j = 0; j < kDim; ++j) {
          const float want = grads[positions[k] * kDim + j];
          const float got = decoded[k * kDim + j];
          if (encoding == Encoding::kFp32) {
            EXPECT_EQ(got, want) << k << " " << j;
          } else {
            EXPECT_EQ(got, Bf16ToFloat(FloatToBf16(want))) << k << " " << j;
          }
        }
      }
    }
  }
}

TEST(PsClientWireTest, PullTableHoldsTheKeysAtThePositions) {
  const std::vector<uint64_t> keys = Keys();
  for (const std::vector<uint32_t>& positions : kPositions) {
    const TableRef ref{7, kDim, keys.data(), kRows, nullptr, nullptr, false};
    PullRequest request;
    AddPullTable(ref, positions, &request);
    ASSERT_EQ(request.tables_size(), 1);
    ASSERT_EQ(request.tables(0).keys_size(), static_cast<int>(positions.size()));
    for (size_t k = 0; k < positions.size(); ++k) {
      EXPECT_EQ(request.tables(0).keys(k), keys[positions[k]]);
    }
  }
}

TEST(PsClientWireTest, ScatterPullWritesEachRowAtItsPositionOnly) {
  const std::vector<uint64_t> keys = Keys();
  const std::vector<float> rows = Values(-2.0f);  // What the server holds.
  for (Encoding encoding : {Encoding::kFp32, Encoding::kBf16}) {
    for (const std::vector<uint32_t>& positions : kPositions) {
      PullResponse answer;
      TableValues* tv = answer.add_tables();
      tv->set_dim(kDim);
      for (uint32_t pos : positions) {
        EncodeValues(rows.data() + pos * kDim, kDim, encoding, tv->mutable_values());
      }
      std::vector<float> out(kRows * kDim, 99.0f);
      const std::vector<TableRef> tables = {
          {7, kDim, keys.data(), kRows, out.data(), nullptr, false}};
      Part part{0, {{0, positions}}};
      ASSERT_TRUE(ScatterPull(tables, part, answer, encoding).ok());
      std::vector<bool> pulled(kRows, false);
      for (uint32_t pos : positions) pulled[pos] = true;
      for (size_t i = 0; i < kRows; ++i) {
        for (uint32_t j = 0; j < kDim; ++j) {
          const float want = !pulled[i] ? 99.0f
                             : encoding == Encoding::kFp32
                                 ? rows[i * kDim + j]
                                 : Bf16ToFloat(FloatToBf16(rows[i * kDim + j]));
          EXPECT_EQ(out[i * kDim + j], want) << i << " " << j;
        }
      }
      // Rows of another width (e.g. with optimizer state not asked for):
      // refused, as data loss.
      tv->set_dim(kDim + 1);
      EXPECT_EQ(ScatterPull(tables, part, answer, encoding).code(), absl::StatusCode::kDataLoss);
      tv->set_dim(kDim);
      // One row short: refused, as data loss.
      tv->mutable_values()->resize(tv->values().size() - BytesPerValue(encoding) * kDim);
      EXPECT_EQ(ScatterPull(tables, part, answer, encoding).code(), absl::StatusCode::kDataLoss);
    }
  }
}

}  // namespace
}  // namespace shardps::ps_client_internal

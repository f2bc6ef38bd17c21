#include "common/table_hash.h"

#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

TEST(TableHashTest, OrderDoesNotMatterButEveryBitDoes) {
  const std::vector<float> a = {0.5f, -1.25f}, b = {2.0f, 3.0f};
  TableHash forward, backward;
  forward.Add(1, 10, a.data(), 2);
  forward.Add(1, 11, b.data(), 2);
  backward.Add(1, 11, b.data(), 2);
  backward.Add(1, 10, a.data(), 2);
  EXPECT_EQ(forward.value(), backward.value());
  EXPECT_EQ(forward.rows(), 2u);

  const std::vector<float> a2 = {0.5f, -1.2500001f};
  TableHash changed;
  changed.Add(1, 10, a2.data(), 2);
  changed.Add(1, 11, b.data(), 2);
  EXPECT_NE(changed.value(), forward.value());  // One weight's last bit.

  TableHash other_table;
  other_table.Add(2, 10, a.data(), 2);
  other_table.Add(1, 11, b.data(), 2);
  EXPECT_NE(other_table.value(), forward.value());

  TableHash twice;  // A row counted twice does not cancel (XOR would).
  twice.Add(1, 10, a.data(), 2);
  twice.Add(1, 10, a.data(), 2);
  EXPECT_NE(twice.value(), 0u);
  EXPECT_EQ(TableHash().value(), 0u);
}

}  // namespace
}  // namespace shardps

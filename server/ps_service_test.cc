// PullResponseSlices writes the same wire bytes protobuf does.
#include "server/ps_service.h"

#include <cstring>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace {

std::string Flatten(grpc::ByteBuffer& buffer) {
  std::vector<grpc::Slice> slices;
  EXPECT_TRUE(buffer.Dump(&slices).ok());
  std::string out;
  for (const grpc::Slice& s : slices) {
    out.append(reinterpret_cast<const char*>(s.begin()), s.size());
  }
  return out;
}

TEST(PullResponseSlicesTest, BytesEqualProtobufSerialization) {
  struct Table {
    uint32_t id, dim;
    size_t bytes;
  };
  // Zero ids and dims (left out by proto3), empty values, and lengths whose
  // varints take 1, 2 and 3 bytes.
  const std::vector<Table> tables = {
      {1, 4, 16}, {0, 0, 0}, {300, 64, 200}, {7, 1, 0}, {4000000000u, 128, 1 << 20}};
  PullResponseSlices slices;
  PullResponse expected;
  for (size_t t = 0; t < tables.size(); ++t) {
    std::string values(tables[t].bytes, '\0');
    for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<char>(i * 31 + t);
    char* room = slices.AddTable(tables[t].id, tables[t].dim, values.size());
    if (!values.empty()) {
      ASSERT_NE(room, nullptr);
      EXPECT_EQ(reinterpret_cast<uintptr_t>(room) % alignof(float), 0u);
      std::memcpy(room, values.data(), values.size());
    }
    TableValues* tv = expected.add_tables();
    tv->set_table_id(tables[t].id);
    tv->set_dim(tables[t].dim);
    tv->set_values(values);
  }
  const std::string want = expected.SerializeAsString();
  EXPECT_EQ(slices.bytes(), want.size());
  grpc::ByteBuffer buffer;
  slices.Release(&buffer);
  EXPECT_EQ(slices.bytes(), 0u);
  const std::string got = Flatten(buffer);
  EXPECT_EQ(got.size(), want.size());
  EXPECT_TRUE(got == want) << "wire bytes differ";
  PullResponse parsed;
  ASSERT_TRUE(parsed.ParseFromString(got));
  EXPECT_EQ(parsed.tables(4).values(), expected.tables(4).values());
}

TEST(PullResponseSlicesTest, NoTablesIsAnEmptyMessage) {
  PullResponseSlices slices;
  grpc::ByteBuffer buffer;
  slices.Release(&buffer);
  EXPECT_EQ(Flatten(buffer), "");
}

}  // namespace
}  // namespace shardps

#include "worker/data/fields.h"

#include <cmath>
#include <set>

#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"

namespace shardps {
namespace data {
namespace {

JobConfig Parse(const std::string& text) {
  JobConfig config;
  EXPECT_TRUE(google::protobuf::TextFormat::ParseFromString(text, &config)) << text;
  return config;
}

TEST(FieldsTest, DefaultMapsTheCategoricalColumnsToTheFirstSparseTable) {
  const JobConfig config = Parse(R"pb(
    tables { id: 7 name: "mlp" kind: DENSE }
    tables { id: 3 name: "emb" kind: SPARSE dim: 8 }
    tables { id: 4 name: "other" kind: SPARSE dim: 8 }
  )pb");
  auto fields = ResolveFields(config);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 26u);
  for (int i = 0; i < 26; ++i) {
    EXPECT_EQ((*fields)[i].name, "C" + std::to_string(i + 1));
    EXPECT_EQ((*fields)[i].column, 14 + i);
    EXPECT_EQ((*fields)[i].table, "emb");
    EXPECT_EQ((*fields)[i].table_id, 3u);
  }
  EXPECT_EQ(NumColumns(config.data(), *fields, false), 40);
}

TEST(FieldsTest, AWideTableReadsTheCategoricalColumnsAgainAfterTheEmbeddings) {
  const JobConfig config = Parse(R"pb(
    tables { id: 5 name: "wide" kind: SPARSE dim: 1 }
    tables { id: 3 name: "emb" kind: SPARSE dim: 8 }
    model { wide_table: "wide" }
  )pb");
  auto fields = ResolveFields(config);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 52u);
  for (int i = 0; i < 26; ++i) {
    EXPECT_EQ((*fields)[i].name, "C" + std::to_string(i + 1));
    EXPECT_EQ((*fields)[i].table, "emb");  // The first SPARSE table but the wide one.
    EXPECT_EQ((*fields)[26 + i].name, "W" + std::to_string(i + 1));
    EXPECT_EQ((*fields)[26 + i].column, 14 + i);
    EXPECT_EQ((*fields)[26 + i].table, "wide");
    EXPECT_EQ((*fields)[26 + i].table_id, 5u);
  }
  EXPECT_EQ(NumColumns(config.data(), *fields, false), 40);
}

TEST(FieldsTest, ConfiguredFieldsKeepTheirOrderAndTables) {
  const JobConfig config = Parse(R"pb(
    tables { id: 1 name: "users" dim: 8 }
    tables { id: 2 name: "items" kind: SPARSE dim: 8 }
    fields { name: "user" column: 20 table: "users" }
    fields { name: "item" column: 14 table: "items" pooling: MEAN }
    fields { name: "item2" column: 15 table: "items" }
  )pb");
  auto fields = ResolveFields(config);
  ASSERT_TRUE(fields.ok()) << fields.status();
  ASSERT_EQ(fields->size(), 3u);
  EXPECT_EQ((*fields)[0].name, "user");
  EXPECT_EQ((*fields)[0].column, 20);
  EXPECT_EQ((*fields)[0].table_id, 1u);
  EXPECT_EQ((*fields)[1].pooling, FieldConfig::MEAN);
  EXPECT_EQ((*fields)[2].table, "items");
  // CRITEO lines keep 40 columns whatever the fields use.
  EXPECT_EQ(NumColumns(config.data(), *fields, true), 40);
}

TEST(FieldsTest, MultiHotColumnsEndWithTheLastField) {
  const JobConfig config = Parse(R"pb(
    tables { id: 1 name: "t" dim: 8 }
    data { format: TSV_MULTIHOT num_dense: 2 }
    fields { name: "a" column: 3 table: "t" }
    fields { name: "b" column: 5 table: "t" }
  )pb");
  auto fields = ResolveFields(config);
  ASSERT_TRUE(fields.ok()) << fields.status();
  EXPECT_EQ(NumColumns(config.data(), *fields, true), 6);
}

TEST(FieldsTest, BadFieldsAreRefusedWithTheirIndex) {
  const std::string tables = R"pb(
    tables { id: 1 name: "t" dim: 8 }
    tables { id: 2 name: "d" kind: DENSE }
  )pb";
  struct Case {
    std::string fields;
    std::string message;
  } cases[] = {
      {R"pb(fields { name: "a" column: 14 table: "nope" })pb",
       "fields[0] (\"a\").table: \"nope\" is not a SPARSE table"},
      {R"pb(fields { name: "a" column: 14 table: "d" })pb", "fields[0] (\"a\").table"},
      {R"pb(fields { name: "a" column: 3 table: "t" })pb",
       "fields[0] (\"a\").column: 3 is not a categorical column (14..39)"},
      {R"pb(fields { name: "a" column: 40 table: "t" })pb", "column: 40"},
      {R"pb(fields { name: "a" column: 14 table: "t" }
            fields { name: "a" column: 15 table: "t" })pb",
       "fields[1] (\"a\").name: is used by another field"},
      {R"pb(fields { column: 14 table: "t" })pb", "name: is empty"},
  };
  for (const Case& c : cases) {
    auto fields = ResolveFields(Parse(tables + c.fields));
    ASSERT_FALSE(fields.ok()) << c.fields;
    EXPECT_EQ(fields.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_NE(fields.status().message().find(c.message), std::string::npos) << fields.status();
  }
}

TEST(FieldsTest, NoSparseTableIsAPreconditionFailure) {
  auto fields = ResolveFields(Parse(R"pb(tables { id: 2 name: "d" kind: DENSE })pb"));
  EXPECT_EQ(fields.status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(FieldsTest, KeysFollowTheDocumentedFormula) {
  // The documented formula, spelled out with Mix64.
  EXPECT_EQ(CategoricalKey(3, 0x68fd1e64), Mix64(Mix64(3 + 0x9e3779b97f4a7c15ULL) ^ 0x68fd1e64));
  EXPECT_EQ(MissingKey(5), CategoricalKey(5, 0xffffffffffffffffULL));
  // Same value in different fields -> different keys; missing differs too.
  std::set<uint64_t> keys;
  for (uint32_t f = 0; f < 26; ++f) {
    keys.insert(CategoricalKey(f, 0x1234));
    keys.insert(MissingKey(f));
  }
  EXPECT_EQ(keys.size(), 52u);
}

TEST(FieldsTest, DenseTransform) {
  EXPECT_EQ(DenseTransform(0), 0.0f);
  EXPECT_EQ(DenseTransform(-5), 0.0f);
  EXPECT_FLOAT_EQ(DenseTransform(1), std::log(2.0f));
  EXPECT_FLOAT_EQ(DenseTransform(99), std::log(100.0f));
}

}  // namespace
}  // namespace data
}  // namespace shardps

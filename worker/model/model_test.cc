#include "worker/model/model.h"

#include <string>
#include <vector>

#include "common/config.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

constexpr char kTables[] = R"pb(
  tables { id: 1 name: "emb" kind: SPARSE dim: 8 optimizer { sgd { learning_rate: 0.1 } } }
  tables { id: 2 name: "mlp" kind: DENSE optimizer { sgd { learning_rate: 0.1 } } }
  tables { id: 3 name: "user" kind: SPARSE dim: 8 optimizer { sgd { learning_rate: 0.1 } } }
  model { bottom_mlp: [16, 8] top_mlp: [4] dense_table: "mlp" }
  data { train_files: "x.tsv" }
)pb";

JobConfig Parse(const std::string& text) {
  absl::StatusOr<JobConfig> c = ParseJobConfig(text, "test.pbtxt");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : JobConfig();
}

TEST(ModelSpecTest, NoFieldsMeansTheCriteoColumnsOnTheFirstSparseTable) {
  absl::StatusOr<ModelSpec> s = ModelSpecFromConfig(Parse(kTables));
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->kind, ModelConfig::DLRM);
  EXPECT_EQ(s->num_dense, 13);
  ASSERT_EQ(s->tables.size(), 1u);
  EXPECT_EQ(s->tables[0].name, "emb");
  EXPECT_EQ(s->tables[0].id, 1u);
  EXPECT_EQ(s->tables[0].dim, 8);
  ASSERT_EQ(s->fields.size(), 26u);
  EXPECT_EQ(s->fields[0].name, "C1");
  EXPECT_EQ(s->fields[0].column, 14u);
  EXPECT_EQ(s->fields[25].name, "C26");
  EXPECT_EQ(s->fields[25].column, 39u);
  for (const FieldSpec& f : s->fields) {
    EXPECT_EQ(f.table, 0);
    EXPECT_FALSE(f.mean_pooling);
  }
  EXPECT_EQ(s->bottom_mlp, (std::vector<int64_t>{16, 8}));
  EXPECT_EQ(s->top_mlp, (std::vector<int64_t>{4}));
}

TEST(ModelSpecTest, ExplicitFieldsSharedTablesAndPooling) {
  const std::string text = std::string(kTables) + R"pb(
    fields { name: "u" column: 14 table: "user" }
    fields { name: "a" column: 15 table: "emb" pooling: MEAN }
    fields { name: "b" column: 16 table: "emb" }
  )pb";
  absl::StatusOr<ModelSpec> s = ModelSpecFromConfig(Parse(text));
  ASSERT_TRUE(s.ok()) << s.status();
  // Tables in config order, only those a field uses.
  ASSERT_EQ(s->tables.size(), 2u);
  EXPECT_EQ(s->tables[0].name, "emb");
  EXPECT_EQ(s->tables[1].name, "user");
  ASSERT_EQ(s->fields.size(), 3u);
  EXPECT_EQ(s->fields[0].table, 1);
  EXPECT_EQ(s->fields[1].table, 0);
  EXPECT_TRUE(s->fields[1].mean_pooling);
  EXPECT_EQ(s->fields[2].table, 0);
  EXPECT_EQ(s->fields[2].column, 16u);
}

TEST(ModelSpecTest, FieldOnADenseTableIsRefused) {
  JobConfig c = Parse(kTables);
  FieldConfig* f = c.add_fields();
  f->set_name("x");
  f->set_table("mlp");
  absl::StatusOr<ModelSpec> s = ModelSpecFromConfig(c);
  EXPECT_EQ(s.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.status().message().find("fields[0]"), std::string::npos) << s.status();
}

TEST(ModelSpecTest, NoSparseTableIsRefused) {
  JobConfig c;
  TableConfig* t = c.add_tables();
  t->set_name("mlp");
  t->set_kind(TableConfig::DENSE);
  EXPECT_EQ(ModelSpecFromConfig(c).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(ValidateModelInputsTest, AcceptsAWellFormedBatch) {
  ModelSpec spec;
  spec.num_dense = 2;
  spec.tables = {{"t", 1, 2}};
  spec.fields = {{"f", 3, 0, false}};
  const std::vector<float> labels = {0, 1}, dense = {1, 2, 3, 4}, params(7, 0.0f);
  const std::vector<float> rows = {1, 2, 3, 4};                 // 2 rows of dim 2.
  const std::vector<int64_t> idx = {0, 1, 1}, off = {0, 0, 3};  // Sample 0: empty bag.
  const std::vector<TableRows> tables = {{rows}};
  const std::vector<FieldBag> fields = {{idx, off}};
  ModelInputs in{2, labels, dense, params, tables, fields};
  EXPECT_TRUE(ValidateModelInputs(spec, 7, in).ok());
  EXPECT_EQ(ValidateModelInputs(spec, 8, in).code(), absl::StatusCode::kInvalidArgument);
  const std::vector<int64_t> bad_idx = {0, 2, 1};
  const std::vector<FieldBag> bad_fields = {{bad_idx, off}};
  in.fields = bad_fields;
  absl::Status s = ValidateModelInputs(spec, 7, in);
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(s.message().find("indices[1] = 2"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardps

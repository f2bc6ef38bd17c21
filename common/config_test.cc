#include "common/config.h"

#include <string>

#include "absl/strings/str_cat.h"
#include "gtest/gtest.h"

namespace shardps {
namespace {

// A minimal valid config; the malformed ones below each break one thing.
constexpr char kValid[] = R"pb(
name: "t"
tables {
  id: 1
  name: "emb"
  dim: 8
  optimizer { sgd { learning_rate: 0.1 } }
}
data { train_files: "train.tsv" }
cluster { mode: SSP staleness: 2 }
)pb";

TEST(ConfigTest, ShippedConfigsLoad) {
  for (const char* path : {"configs/default.pbtxt"}) {
    auto config = LoadJobConfig(path);
    ASSERT_TRUE(config.ok()) << path << ": " << config.status();
    EXPECT_GT(config->tables_size(), 0) << path;
  }
}

TEST(ConfigTest, ValidConfigGetsDefaults) {
  auto config = ParseJobConfig(kValid, "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->tables(0).kind(), TableConfig::SPARSE);
  EXPECT_EQ(config->tables(0).init().kind(), InitializerConfig::UNIFORM);
  EXPECT_FLOAT_EQ(config->tables(0).init().scale(), 0.01f);
  EXPECT_EQ(config->cluster().num_partitions(), 4096u);
  EXPECT_EQ(config->cluster().num_servers(), 1u);
  EXPECT_EQ(config->training().batch_size(), 256u);
  EXPECT_EQ(EffectiveStaleness(config->cluster()), 2u);
}

// Expects `text` to be refused with a message containing each of `needles`.
void ExpectRefused(const std::string& text, std::initializer_list<const char*> needles) {
  auto config = ParseJobConfig(text, "bad.pbtxt");
  ASSERT_FALSE(config.ok()) << "accepted:\n" << text;
  EXPECT_EQ(config.status().code(), absl::StatusCode::kInvalidArgument);
  for (const char* needle : needles) {
    EXPECT_NE(config.status().message().find(needle), std::string::npos)
        << "missing \"" << needle << "\" in: " << config.status().message();
  }
}

std::string Replace(std::string text, const std::string& from, const std::string& to) {
  const size_t at = text.find(from);
  EXPECT_NE(at, std::string::npos) << from;
  return text.replace(at, from.size(), to);
}

TEST(ConfigTest, UnknownFieldNamesFieldAndLine) {
  ExpectRefused(Replace(kValid, "dim: 8", "dimm: 8"), {"bad.pbtxt:6:", "dimm"});
}

TEST(ConfigTest, WrongTypeNamesFieldAndLine) {
  ExpectRefused(Replace(kValid, "dim: 8", "dim: \"eight\""), {"bad.pbtxt:6:", "dim"});
}

TEST(ConfigTest, ZeroDimNamesFieldAndLine) {
  ExpectRefused(Replace(kValid, "dim: 8", "dim: 0"),
                {"bad.pbtxt:6:", "tables[0] (\"emb\").dim", "must be > 0"});
}

TEST(ConfigTest, BadGradientBoundNamesFieldAndLine) {
  ExpectRefused(Replace(kValid, "dim: 8", "dim: 8 max_gradient_abs: -1"),
                {"bad.pbtxt:6:", "tables[0] (\"emb\").max_gradient_abs", "must be finite"});
  ExpectRefused(Replace(kValid, "dim: 8", "dim: 8 max_gradient_abs: nan"),
                {"tables[0] (\"emb\").max_gradient_abs", "must be finite"});
}

TEST(ConfigTest, NegativeStalenessNamesFieldAndLine) {
  ExpectRefused(Replace(kValid, "staleness: 2", "staleness: -1"),
                {"bad.pbtxt:10:", "cluster.staleness", "must be >= 0"});
}

TEST(ConfigTest, MissingDataPathNamesField) {
  ExpectRefused(Replace(kValid, "data { train_files: \"train.tsv\" }", ""),
                {"bad.pbtxt", "data.train_files", "no training data"});
}

TEST(ConfigTest, MissingOptimizerAndDuplicateNamesAreRefused) {
  ExpectRefused(Replace(kValid, "optimizer { sgd { learning_rate: 0.1 } }", ""),
                {"bad.pbtxt:3:", "tables[0] (\"emb\").optimizer", "optimizer is required"});
  const std::string twice = std::string(kValid) +
                            "tables { id: 2 name: \"emb\" dim: 4 optimizer { sgd { learning_rate: "
                            "1 } } }\n";
  ExpectRefused(twice, {"bad.pbtxt:11:", "tables[1] (\"emb\").name", "used by another table"});
}

TEST(ConfigTest, RowWiseOptimizerRefusedOnDenseTable) {
  const std::string text = std::string(kValid) +
                           "tables { id: 2 name: \"mlp\" kind: DENSE optimizer { rowwise_adagrad "
                           "{ learning_rate: 1 } } }\n";
  ExpectRefused(text, {"tables[1] (\"mlp\").optimizer", "refused on DENSE"});
}

TEST(ConfigTest, AdmissionIsForSparseTablesAndUnadmittedNeedsIt) {
  ExpectRefused(std::string(kValid) +
                    "tables { id: 2 name: \"mlp\" kind: DENSE admission { min_count: 2 } "
                    "optimizer { adagrad { learning_rate: 1 } } }\n",
                {"tables[1] (\"mlp\").admission", "min_count is for SPARSE tables"});
  ExpectRefused(std::string(kValid) +
                    "tables { id: 2 name: \"u\" dim: 4 admission { unadmitted: INITIAL } "
                    "optimizer { sgd { learning_rate: 1 } } }\n",
                {"tables[1] (\"u\").admission", "needs min_count > 1"});
}

TEST(ConfigTest, FieldMustNameASparseTable) {
  ExpectRefused(std::string(kValid) + "fields { name: \"C1\" column: 14 table: \"nope\" }\n",
                {"bad.pbtxt:11:", "fields[0].table", "names no table"});
}

// Integers narrowed later (to int) are bounded by the check, naming the
// field: 4000000000 used to pass and fail later as -294967296.
TEST(ConfigTest, HugeIntegersAreRefusedByName) {
  ExpectRefused(std::string(kValid) + "training { batch_size: 4000000000 }\n",
                {"bad.pbtxt:11:", "training.batch_size", "must be <= 16777216"});
  ExpectRefused(std::string(kValid) + "training { intra_op_threads: 3000000000 }\n",
                {"training.intra_op_threads", "must be <= 1024"});
  ExpectRefused(Replace(kValid, "data {", "data { shuffle_buffer: 16777217"),
                {"bad.pbtxt:9:", "data.shuffle_buffer", "must be <= 16777216"});
  EXPECT_TRUE(
      ParseJobConfig(Replace(kValid, "data {", "data { shuffle_buffer: 16777216"), "job.pbtxt")
          .ok());
}

TEST(ConfigTest, PeriodicEvaluationAndEarlyStoppingAreCheckedByName) {
  const std::string eval = Replace(kValid, "data { train_files: \"train.tsv\" }",
                                   "data { train_files: \"train.tsv\" eval_files: \"e.tsv\" }");
  ExpectRefused(eval + "training { eval_every_steps: 100 }\n",
                {"training.eval_every_steps", "set checkpoint.dir"});
  ExpectRefused(
      std::string(kValid) + "training { eval_every_steps: 100 }\ncheckpoint { dir: \"/c\" }\n",
      {"training.eval_every_steps", "needs data.eval_files"});
  const std::string with_dir = eval + "checkpoint { dir: \"/c\" }\n";
  ExpectRefused(with_dir + "training { early_stopping { patience: 2 } }\n",
                {"training.early_stopping", "needs training.eval_every_steps"});
  ExpectRefused(with_dir + "training { eval_every_steps: 10 early_stopping { } }\n",
                {"training.early_stopping.patience", "must be >= 1"});
  ExpectRefused(with_dir +
                    "training { eval_every_steps: 10 early_stopping { patience: 1 "
                    "min_delta: -0.1 } }\n",
                {"training.early_stopping.min_delta", "must be in [0, 1]"});
  EXPECT_TRUE(ParseJobConfig(with_dir + "training { eval_every_steps: 10 early_stopping { "
                                        "patience: 3 min_delta: 0.001 } }\n",
                             "job.pbtxt")
                  .ok());
}

TEST(ConfigTest, EvalEveryEpochsIsCheckedLikeEvalEveryStepsAndNotWithIt) {
  const std::string eval = Replace(kValid, "data { train_files: \"train.tsv\" }",
                                   "data { train_files: \"train.tsv\" eval_files: \"e.tsv\" }");
  const std::string with_dir = eval + "checkpoint { dir: \"/c\" }\n";
  ExpectRefused(eval + "training { eval_every_epochs: 0.5 }\n",
                {"training.eval_every_epochs", "set checkpoint.dir"});
  ExpectRefused(
      std::string(kValid) + "training { eval_every_epochs: 0.5 }\ncheckpoint { dir: \"/c\" }\n",
      {"training.eval_every_epochs", "needs data.eval_files"});
  ExpectRefused(with_dir + "training { eval_every_epochs: -0.5 }\n",
                {"training.eval_every_epochs", "must be in [0, 1e+06]", "got -0.5"});
  ExpectRefused(with_dir + "training { eval_every_epochs: nan }\n",
                {"training.eval_every_epochs", "must be in [0, 1e+06]"});
  ExpectRefused(with_dir + "training { eval_every_epochs: 0.5 eval_every_steps: 10 }\n",
                {"training.eval_every_epochs", "not both"});
  auto config = ParseJobConfig(
      with_dir + "training { eval_every_epochs: 0.5 early_stopping { patience: 2 } }\n",
      "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_TRUE(PeriodicEvaluation(config->training()));
  EXPECT_FALSE(PeriodicEvaluation(TrainingConfig()));
}

TEST(ConfigTest, AWideTableIsASparseTableOfDimOne) {
  ExpectRefused(std::string(kValid) + "model { wide_table: \"emb\" }\n",
                {"model.wide_table", "SPARSE table of dim 1"});
  ExpectRefused(std::string(kValid) + "model { wide_table: \"nope\" }\n", {"model.wide_table"});
  EXPECT_TRUE(ParseJobConfig(std::string(kValid) +
                                 "tables { id: 2 name: \"w\" dim: 1 optimizer { sgd { "
                                 "learning_rate: 0.1 } } }\nmodel { wide_table: \"w\" }\n",
                             "job.pbtxt")
                  .ok());
}

TEST(ConfigTest, ATorchScriptModelNeedsItsFileAndADenseTable) {
  const std::string dense = absl::StrCat(
      kValid,
      "tables { id: 2 name: \"mlp\" kind: DENSE optimizer { adagrad { learning_rate: 0.1 "
      "} } }\n");
  auto ok = ParseJobConfig(
      absl::StrCat(dense,
                   "model { kind: TORCHSCRIPT torchscript_file: \"t.pt\" dense_table: \"mlp\" }"),
      "job.pbtxt");
  ASSERT_TRUE(ok.ok()) << ok.status();
  EXPECT_EQ(ok->model().torchscript_file(), "t.pt");
  ExpectRefused(absl::StrCat(dense, "model {\n kind: TORCHSCRIPT dense_table: \"mlp\" }"),
                {"bad.pbtxt:13:2: model.kind: TORCHSCRIPT needs model.torchscript_file"});
  ExpectRefused(absl::StrCat(dense, "model { kind: TORCHSCRIPT torchscript_file: \"t.pt\" }"),
                {"model.kind: TORCHSCRIPT needs model.dense_table"});
  ExpectRefused(absl::StrCat(dense, "model { kind: DLRM torchscript_file: \"t.pt\" }"),
                {"model.torchscript_file: is read only by kind TORCHSCRIPT (the kind is DLRM)"});
  ExpectRefused(absl::StrCat(dense, "model { kind: 7 }"), {"model.kind: must be DLRM or"});
}

TEST(ConfigTest, UnsizedDenseTablesHoldOneMessage) {
  JobConfig c;
  c.mutable_cluster()->set_dense_chunk_size(4096);
  c.mutable_cluster()->set_max_message_bytes(64 << 20);
  EXPECT_EQ(UnsizedDenseTableSize(c), (64u << 20) / 4);
  c.mutable_cluster()->set_max_message_bytes(1000);  // Less than a chunk: one chunk.
  EXPECT_EQ(UnsizedDenseTableSize(c), 4096u);
}

TEST(ConfigTest, LearningRateScheduleIsCheckedByName) {
  ExpectRefused(std::string(kValid) + "training { lr_schedule { decay: COSINE min_scale: 1.5 } }\n",
                {"training.lr_schedule.min_scale", "must be in [0, 1]", "1.5"});
  ExpectRefused(std::string(kValid) +
                    "training { lr_schedule { decay: STEP step_every: 10 "
                    "step_gamma: -1 } }\n",
                {"training.lr_schedule.step_gamma", "must be in [0, 1]"});
  EXPECT_TRUE(ParseJobConfig(std::string(kValid) + "training { lr_schedule { decay: STEP "
                                                   "step_every: 10 step_gamma: 0.5 "
                                                   "min_scale: 0.1 } }\n",
                             "job.pbtxt")
                  .ok());
}

TEST(ConfigTest, OnCorruptDefaultsToFailAndTakesFallBack) {
  auto config = ParseJobConfig(kValid, "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->checkpoint().on_corrupt(), CheckpointConfig::FAIL);
  config = ParseJobConfig(std::string(kValid) + "checkpoint { dir: \"/c\" on_corrupt: FALL_BACK }",
                          "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->checkpoint().on_corrupt(), CheckpointConfig::FALL_BACK);
  ExpectRefused(std::string(kValid) + "checkpoint { on_corrupt: 7 }\n", {"checkpoint.on_corrupt"});
}

TEST(ConfigTest, VersionsBetweenCheckpointsNeedACheckpointDir) {
  ExpectRefused(std::string(kValid) + "checkpoint { version_every_steps: 5 }\n",
                {"checkpoint.version_every_steps", "set checkpoint.dir"});
  EXPECT_TRUE(
      ParseJobConfig(std::string(kValid) + "checkpoint { dir: \"/c\" version_every_steps: 5 }",
                     "job.pbtxt")
          .ok());
}

TEST(ConfigTest, DenseCompressionRatioMustBeAShare) {
  const std::string with =
      Replace(kValid, "data {", "training { dense_compression { ratio: R } }\ndata {");
  for (const char* bad : {"0", "-0.5", "1.5", "nan", "inf"}) {
    ExpectRefused(Replace(with, "R", bad),
                  {"bad.pbtxt:9:", "training.dense_compression.ratio", "must be in (0, 1]"});
  }
  // Present but empty: the ratio is 0, not a silent default.
  ExpectRefused(Replace(kValid, "data {", "training { dense_compression { } }\ndata {"),
                {"training.dense_compression.ratio", "got 0"});
  for (const char* good : {"0.1", "1", "1e-4"}) {
    auto config = ParseJobConfig(Replace(with, "R", good), "good.pbtxt");
    ASSERT_TRUE(config.ok()) << good << ": " << config.status();
    EXPECT_TRUE(config->training().has_dense_compression());
  }
}

TEST(ConfigTest, CacheStalenessIsBoundBySsps) {
  // kValid is SSP(2).
  for (const char* good : {"training { cache { } }", "training { cache { staleness: 2 } }",
                           "training { cache { max_rows: 1000 max_bytes: 1048576 } }"}) {
    auto config =
        ParseJobConfig(Replace(kValid, "data {", absl::StrCat(good, "\ndata {")), "good.pbtxt");
    ASSERT_TRUE(config.ok()) << good << ": " << config.status();
    EXPECT_TRUE(config->training().has_cache());
  }
  ExpectRefused(Replace(kValid, "data {", "training { cache { staleness: 3 } }\ndata {"),
                {"bad.pbtxt:9:", "training.cache.staleness", "must be <= cluster.staleness (2)"});
  // ASP has no bound to keep; BSP keeps the cache inert.
  for (const char* mode : {"mode: ASP", "mode: BSP staleness: 0"}) {
    auto config = ParseJobConfig(Replace(Replace(kValid, "mode: SSP staleness: 2", mode), "data {",
                                         "training { cache { staleness: 5 } }\ndata {"),
                                 "good.pbtxt");
    ASSERT_TRUE(config.ok()) << mode << ": " << config.status();
  }
}

TEST(ConfigTest, MixedPrecisionTakesKnownNamesOnly) {
  for (const char* good : {"FP32", "BF16", "FP16"}) {
    auto config = ParseJobConfig(
        Replace(kValid, "data {", absl::StrCat("training { mixed_precision: ", good, " }\ndata {")),
        "good.pbtxt");
    ASSERT_TRUE(config.ok()) << good << ": " << config.status();
  }
  ExpectRefused(Replace(kValid, "data {", "training { mixed_precision: FP8 }\ndata {"),
                {"bad.pbtxt:9:", "mixed_precision", "FP8"});
  ExpectRefused(Replace(kValid, "data {", "training { mixed_precision: 7 }\ndata {"),
                {"bad.pbtxt:9:", "mixed_precision"});
}

TEST(ConfigTest, EmptyConfigIsRefusedNotCrashed) {
  // Found by tests/fuzz:config_fuzz: locating the error on the empty repeated
  // field used to abort inside protobuf.
  ExpectRefused("", {"bad.pbtxt", "tables: at least one table is required"});
  ExpectRefused("name: \"x\"", {"bad.pbtxt", "at least one table is required"});
}

TEST(ConfigTest, UnreadableFileIsNotFound) {
  auto config = LoadJobConfig("/nonexistent/job.pbtxt");
  EXPECT_EQ(config.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(config.status().message().find("/nonexistent/job.pbtxt"), std::string::npos);
}

TEST(ConfigTest, FingerprintCoversSharedPartsOnly) {
  auto a = ParseJobConfig(kValid, "a");
  ASSERT_TRUE(a.ok());
  JobConfig b = *a;
  b.mutable_data()->add_train_files("more.tsv");  // Not shared: same print.
  EXPECT_EQ(ConfigFingerprint(*a), ConfigFingerprint(b));
  b.mutable_tables(0)->set_dim(9);  // Shared: a different print.
  EXPECT_NE(ConfigFingerprint(*a), ConfigFingerprint(b));
}

TEST(ConfigTest, MaxServersDefaultsToNumServersAndIsBoundByIt) {
  auto config = ParseJobConfig(
      Replace(kValid, "cluster { mode: SSP", "cluster { num_servers: 3 mode: SSP"), "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster().max_servers(), 3u);
  auto grows = ParseJobConfig(
      Replace(kValid, "cluster { mode: SSP", "cluster { num_servers: 2 max_servers: 4 mode: SSP"),
      "job.pbtxt");
  ASSERT_TRUE(grows.ok()) << grows.status();
  EXPECT_EQ(grows->cluster().max_servers(), 4u);
  // A job that may grow is another job to its processes; one that may not
  // keeps its fingerprint.
  JobConfig same = *config;
  same.mutable_cluster()->set_max_servers(0);
  EXPECT_EQ(ConfigFingerprint(*config), ConfigFingerprint(same));
  JobConfig more = *config;
  more.mutable_cluster()->set_max_servers(5);
  EXPECT_NE(ConfigFingerprint(*config), ConfigFingerprint(more));
  ExpectRefused(
      Replace(kValid, "cluster { mode: SSP", "cluster { num_servers: 3 max_servers: 2 mode: SSP"),
      {"cluster.max_servers", "must be >= num_servers and <= num_partitions"});
  ExpectRefused(Replace(kValid, "cluster { mode: SSP",
                        "cluster { num_partitions: 8 max_servers: 9 mode: SSP"),
                {"cluster.max_servers", "<= num_partitions"});
}

// What a peer may hold (docs/security.md): defaults, and bounds that leave
// room for one message of the job.
TEST(ConfigTest, PeerLimitsGetDefaultsAndRoomForOneMessage) {
  auto config = ParseJobConfig(kValid, "job.pbtxt");
  ASSERT_TRUE(config.ok()) << config.status();
  EXPECT_EQ(config->cluster().max_concurrent_streams(), 100u);
  EXPECT_EQ(config->cluster().grpc_memory_bytes(), 1ull << 30);
  EXPECT_EQ(config->cluster().max_unsent_answer_bytes(), 1ull << 30);
  EXPECT_EQ(config->cluster().answer_send_timeout_ms(), 60000u);
  EXPECT_EQ(config->cluster().scheduler_grpc_memory_bytes(), 64ull << 20);
  ExpectRefused(Replace(kValid, "staleness: 2", "staleness: 2 grpc_memory_bytes: 1000"),
                {"bad.pbtxt:10:", "cluster.grpc_memory_bytes", "2 x max_message_bytes"});
  ExpectRefused(Replace(kValid, "staleness: 2",
                        "staleness: 2 max_message_bytes: 2000 max_unsent_answer_bytes: 1999"),
                {"cluster.max_unsent_answer_bytes", "at least max_message_bytes (2000)"});
  ExpectRefused(Replace(kValid, "staleness: 2", "staleness: 2 scheduler_grpc_memory_bytes: 4096"),
                {"cluster.scheduler_grpc_memory_bytes", "8 MiB"});
  auto small =
      ParseJobConfig(Replace(kValid, "staleness: 2",
                             "staleness: 2 max_message_bytes: 1048576 grpc_memory_bytes: 2097152 "
                             "max_unsent_answer_bytes: 1048576 max_concurrent_streams: 4"),
                     "small.pbtxt");
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_EQ(small->cluster().max_concurrent_streams(), 4u);
}

}  // namespace
}  // namespace shardps

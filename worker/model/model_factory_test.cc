#include "worker/model/model_factory.h"

#include <string>
#include <vector>

#include "common/config.h"
#include "gtest/gtest.h"
#include "torch/cuda.h"

namespace shardps {
namespace {

JobConfig DefaultConfig() {
  absl::StatusOr<JobConfig> c = LoadJobConfig("configs/default.pbtxt");
  EXPECT_TRUE(c.ok()) << c.status();
  return c.ok() ? *c : JobConfig();
}

TEST(ModelFactoryTest, DefaultConfigBuildsTheDlrm) {
  absl::StatusOr<std::unique_ptr<Model>> m =
      CreateModel(DefaultConfig(), c10::Device(c10::DeviceType::CPU));
  ASSERT_TRUE(m.ok()) << m.status();
  const Model& model = **m;
  // 26 fields on the embeddings, 26 more on the first-order table (dim 1).
  EXPECT_EQ(model.spec().fields.size(), 52u);
  ASSERT_EQ(model.spec().tables.size(), 2u);
  EXPECT_EQ(model.spec().wide_table, 1);
  EXPECT_EQ(model.spec().tables[1].dim, 1);
  // bottom 13->64->16; top (16 + 27*26/2)->64->32->1: the wide fields are
  // not interaction vectors.
  EXPECT_EQ(model.NumDenseParams(),
            (13 * 64 + 64) + (64 * 16 + 16) + (367 * 64 + 64) + (64 * 32 + 32) + 33);
  EXPECT_TRUE(model.options().device.is_cpu());
  EXPECT_FALSE(model.options().double_precision);
}

TEST(ModelFactoryTest, DenseSizeMustMatchTheModel) {
  JobConfig c = DefaultConfig();
  for (TableConfig& t : *c.mutable_tables()) {
    if (t.name() == "mlp") t.set_dense_size(1000);
  }
  absl::StatusOr<std::unique_ptr<Model>> m = CreateModel(c, c10::Device(c10::DeviceType::CPU));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("dense_size"), std::string::npos) << m.status();
}

TEST(ModelFactoryTest, EmbeddingDimMustMatchTheBottomMlp) {
  JobConfig c = DefaultConfig();
  c.mutable_model()->set_bottom_mlp(1, 8);
  absl::StatusOr<std::unique_ptr<Model>> m = CreateModel(c, c10::Device(c10::DeviceType::CPU));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("categorical"), std::string::npos) << m.status();
}

TEST(ModelFactoryTest, UnknownKindIsUnimplemented) {
  absl::StatusOr<ModelSpec> spec = ModelSpecFromConfig(DefaultConfig());
  ASSERT_TRUE(spec.ok());
  spec->kind = static_cast<ModelConfig::Kind>(77);
  EXPECT_EQ(CreateModel(*spec, ModelOptions()).status().code(), absl::StatusCode::kUnimplemented);
}

TEST(ModelFactoryTest, MixedPrecisionComesFromTheConfigAndFp16NeedsCuda) {
  JobConfig c = DefaultConfig();
  EXPECT_EQ(PrecisionFromConfig(c), ModelOptions::Precision::kFp32);
  c.mutable_training()->set_mixed_precision(TrainingConfig::BF16);
  ModelOptions options;
  options.precision = PrecisionFromConfig(c);
  EXPECT_EQ(options.precision, ModelOptions::Precision::kBf16);
  absl::StatusOr<std::unique_ptr<Model>> m = CreateModel(c, options);
  ASSERT_TRUE(m.ok()) << m.status();
  EXPECT_EQ((*m)->options().precision, ModelOptions::Precision::kBf16);
  c.mutable_training()->set_mixed_precision(TrainingConfig::FP16);
  options.precision = PrecisionFromConfig(c);
  m = CreateModel(c, options);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("FP16 needs a CUDA device"), std::string::npos) << m.status();
}

TEST(ModelFactoryTest, DefaultDeviceIsCpuWithoutAGpu) {
  // CUDA device 0 when LibTorch sees a GPU, else the CPU (ours have none).
  const c10::Device d = DefaultDevice();
  if (torch::cuda::is_available()) {
    EXPECT_EQ(d, c10::Device(c10::DeviceType::CUDA, 0)) << d;
  } else {
    EXPECT_EQ(d, c10::Device(c10::DeviceType::CPU)) << d;
  }
}

}  // namespace
}  // namespace shardps

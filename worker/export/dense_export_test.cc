// DenseTensors against the real DLRM's flat layout, and dense.pt read back
// with LibTorch's own archive reader.
#include "worker/export/dense_export.h"

#include <cmath>
#include <string>
#include <vector>

#include "common/config.h"
#include "gtest/gtest.h"
#include "torch/script.h"
#include "torch/torch.h"
#include "worker/model/model_factory.h"

namespace shardps {
namespace exporter {
namespace {

JobConfig Config() {
  auto config = ParseJobConfig(R"pb(
    name: "dense"
    tables {
      id: 1 name: "categorical" kind: SPARSE dim: 4
      optimizer { sgd { learning_rate: 0.1 } }
    }
    tables { id: 2 name: "mlp" kind: DENSE optimizer { sgd { learning_rate: 0.1 } } }
    model { kind: DLRM bottom_mlp: [8, 4] top_mlp: [6] dense_table: "mlp" }
    data { format: CRITEO synthetic_dir: "/nonexistent" }
  )pb",
                               "test.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  return *config;
}

TEST(DenseExportTest, NamesCoverTheModelsBufferInOrder) {
  auto model = CreateModel(Config(), c10::Device(c10::DeviceType::CPU));
  ASSERT_TRUE(model.ok()) << model.status();
  auto tensors = DenseTensors((*model)->spec(), (*model)->NumDenseParams());
  ASSERT_TRUE(tensors.ok()) << tensors.status();
  std::vector<std::string> names;
  int64_t offset = 0;
  for (const DenseTensor& t : *tensors) {
    names.push_back(t.name);
    EXPECT_EQ(t.offset, offset) << t.name;
    offset += t.size();
  }
  EXPECT_EQ(offset, (*model)->NumDenseParams());
  const std::vector<std::string> expected = {
      "bottom_mlp_0_weight", "bottom_mlp_0_bias", "bottom_mlp_1_weight", "bottom_mlp_1_bias",
      "top_mlp_0_weight",    "top_mlp_0_bias",    "top_mlp_1_weight",    "top_mlp_1_bias"};
  EXPECT_EQ(names, expected);
  // 13 dense features; 27 vectors of dim 4 -> 4 + 351 top inputs.
  EXPECT_EQ((*tensors)[0].shape, (std::vector<int64_t>{8, 13}));
  EXPECT_EQ((*tensors)[4].shape, (std::vector<int64_t>{6, 4 + 27 * 26 / 2}));
  EXPECT_EQ((*tensors)[6].shape, (std::vector<int64_t>{1, 6}));
  EXPECT_FALSE(DenseTensors((*model)->spec(), (*model)->NumDenseParams() + 1).ok());
}

// With every weight zero, the model's output is sigmoid(output bias): the
// tensor named top_mlp_1_bias is the model's output bias.
TEST(DenseExportTest, OutputBiasIsWhereTheNameSays) {
  auto model = CreateModel(Config(), c10::Device(c10::DeviceType::CPU));
  ASSERT_TRUE(model.ok());
  auto tensors = DenseTensors((*model)->spec(), (*model)->NumDenseParams());
  ASSERT_TRUE(tensors.ok());
  std::vector<float> flat((*model)->NumDenseParams(), 0.0f);
  flat[tensors->back().offset] = 2.0f;
  const int64_t batch = 2;
  std::vector<float> labels = {0, 1}, dense(batch * 13, 1.0f), rows(4, 0.5f);
  std::vector<int64_t> indices = {0, 0}, offsets = {0, 1, 2};
  std::vector<TableRows> tables = {{rows}};
  std::vector<FieldBag> fields(26, FieldBag{indices, offsets});
  ModelInputs in;
  in.batch_size = batch;
  in.labels = labels;
  in.dense = dense;
  in.dense_params = flat;
  in.tables = tables;
  in.fields = fields;
  auto result = (*model)->ForwardBackward(in, false);
  ASSERT_TRUE(result.ok()) << result.status();
  for (float p : result->probs) EXPECT_NEAR(p, 1.0 / (1.0 + std::exp(-2.0)), 1e-6);
}

TEST(DenseExportTest, DensePtLoadsWithLibTorch) {
  auto model = CreateModel(Config(), c10::Device(c10::DeviceType::CPU));
  ASSERT_TRUE(model.ok());
  auto tensors = DenseTensors((*model)->spec(), (*model)->NumDenseParams());
  ASSERT_TRUE(tensors.ok());
  std::vector<float> flat((*model)->NumDenseParams());
  for (size_t i = 0; i < flat.size(); ++i) flat[i] = 0.25f * static_cast<float>(i) - 3.0f;
  const std::string path = ::testing::TempDir() + "/dense.pt";
  ASSERT_TRUE(SaveDenseTensors(path, *tensors, flat).ok());

  torch::serialize::InputArchive archive;
  archive.load_from(path);
  for (const DenseTensor& t : *tensors) {
    torch::Tensor loaded;
    ASSERT_TRUE(archive.try_read(t.name, loaded)) << t.name;
    EXPECT_EQ(loaded.sizes().vec(), t.shape) << t.name;
    const torch::Tensor want =
        torch::from_blob(flat.data() + t.offset, {t.size()}, torch::kFloat32).view(t.shape);
    EXPECT_TRUE(torch::equal(loaded, want)) << t.name;
  }
  torch::Tensor all;
  ASSERT_TRUE(archive.try_read("flat", all));
  EXPECT_TRUE(torch::equal(
      all, torch::from_blob(flat.data(), {static_cast<int64_t>(flat.size())}, torch::kFloat32)));
  // And as a TorchScript module (what Python's torch.jit.load sees).
  torch::jit::Module module = torch::jit::load(path);
  int params = 0;
  for (const auto& p : module.named_parameters()) {
    (void)p;
    ++params;
  }
  EXPECT_EQ(params, static_cast<int>(tensors->size()) + 1);
}

TEST(DenseExportTest, TensorOutsideTheBufferIsRefused) {
  std::vector<DenseTensor> tensors = {{"w", {2, 3}, 1}};
  const std::vector<float> flat(6);
  const absl::Status st = SaveDenseTensors(::testing::TempDir() + "/bad.pt", tensors, flat);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace exporter
}  // namespace shardps

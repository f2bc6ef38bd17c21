#include "worker/model/torchscript_model.h"

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "common/config.h"
#include "gtest/gtest.h"
#include "torch/script.h"
#include "worker/model/dlrm.h"
#include "worker/model/model_factory.h"
#include "worker/model/test_batch.h"

namespace shardps {
namespace {

// Written at build time (testdata/test_modules.py, the genrule).
std::string Module(const std::string& name) { return "worker/model/testdata/" + name + ".pt"; }

// The modules' tiny job (test_modules.py SPEC): 3 dense; f0, f1 on A (dim
// 4), f2 on B (dim 4, mean), w0, w1 on the wide table W (dim 1); the DLRM
// sizes bottom [5, 4], top [6].
ModelSpec TinySpec(const std::string& module) {
  ModelSpec s;
  s.kind = ModelConfig::TORCHSCRIPT;
  s.num_dense = 3;
  s.tables = {{"A", 1, 4}, {"B", 2, 4}, {"W", 3, 1}};
  s.fields = {{"f0", 4, 0, false},
              {"f1", 5, 0, false},
              {"f2", 6, 1, true},
              {"w0", 7, 2, false},
              {"w1", 8, 2, false}};
  s.bottom_mlp = {5, 4};
  s.top_mlp = {6};
  s.wide_table = 2;
  s.torchscript_file = module.empty() ? "" : Module(module);
  return s;
}

absl::StatusOr<std::unique_ptr<TorchScriptModel>> Load(const std::string& name,
                                                       ModelOptions options = {}) {
  return TorchScriptModel::Create(TinySpec(name), options);
}

using testing::Batch;

// 0..2 ids per bag from 6 rows a table; parameters uniform in +-0.5.
Batch RandomBatch(const ModelSpec& spec, int64_t num_params, int64_t b, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<float> u(-0.5f, 0.5f);
  Batch batch;
  batch.batch_size = b;
  for (int64_t i = 0; i < b; ++i) batch.labels.push_back(static_cast<float>(rng() % 2));
  for (int64_t i = 0; i < b * spec.num_dense; ++i) batch.dense.push_back(2 * u(rng));
  for (int64_t i = 0; i < num_params; ++i) batch.params.push_back(u(rng));
  for (const TableSpec& t : spec.tables) {
    std::vector<float> r(6 * t.dim);
    for (float& v : r) v = u(rng);
    batch.rows.push_back(std::move(r));
  }
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    std::vector<int64_t> idx, off = {0};
    for (int64_t s = 0; s < b; ++s) {
      for (int h = static_cast<int>(rng() % 3); h > 0; --h) idx.push_back(rng() % 6);
      off.push_back(static_cast<int64_t>(idx.size()));
    }
    batch.indices.push_back(std::move(idx));
    batch.offsets.push_back(std::move(off));
  }
  return batch;
}

void ExpectNear(const std::vector<float>& a, const std::vector<float>& b, float tol,
                const char* what) {
  ASSERT_EQ(a.size(), b.size()) << what;
  for (size_t i = 0; i < a.size(); ++i) EXPECT_NEAR(a[i], b[i], tol) << what << "[" << i << "]";
}

void ExpectSameAsBuiltInDlrm(const std::string& module) {
  auto scripted = Load(module);
  ASSERT_TRUE(scripted.ok()) << scripted.status();
  ModelSpec dlrm_spec = TinySpec("");
  dlrm_spec.kind = ModelConfig::DLRM;
  auto builtin = Dlrm::Create(dlrm_spec, ModelOptions());
  ASSERT_TRUE(builtin.ok()) << builtin.status();
  ASSERT_EQ((*scripted)->NumDenseParams(), (*builtin)->NumDenseParams());
  Batch batch = RandomBatch(TinySpec(""), (*builtin)->NumDenseParams(), 16, 7);
  StepResult a, b;
  ASSERT_TRUE((*scripted)->ForwardBackward(batch.Inputs(), true, &a).ok());
  ASSERT_TRUE((*builtin)->ForwardBackward(batch.Inputs(), true, &b).ok());
  EXPECT_NEAR(a.loss, b.loss, 1e-6);
  ExpectNear(a.probs, b.probs, 1e-6f, "probs");
  ExpectNear(a.dense_grad, b.dense_grad, 1e-6f, "dense_grad");
  ASSERT_EQ(a.table_grads.size(), 3u);
  for (int t = 0; t < 3; ++t) ExpectNear(a.table_grads[t], b.table_grads[t], 1e-6f, "table");
  double norm = 0;
  for (float g : a.dense_grad) norm += std::fabs(g);
  EXPECT_GT(norm, 0.0);
}

// The zoo's DLRM is the built-in network: the same parameters in the same
// flat order give the same predictions and gradients, with the workers'
// fused interaction (shardps::pairwise_dots) or plain torch's bmm.
TEST(TorchScriptModelTest, ScriptedDlrmComputesWhatTheBuiltInDoes) {
  for (const char* module : {"dlrm", "dlrm_bmm"}) {
    SCOPED_TRACE(module);
    ExpectSameAsBuiltInDlrm(module);
  }
}

// The parameters in named_parameters() order are the flat buffer, and their
// values in the file are the initial values.
TEST(TorchScriptModelTest, FlatBufferIsNamedParametersInOrder) {
  auto model = Load("dcn_v2");
  ASSERT_TRUE(model.ok()) << model.status();
  torch::jit::Module file = torch::jit::load(Module("dcn_v2"));
  std::vector<float> init((*model)->NumDenseParams());
  (*model)->InitDenseParams(/*seed=*/12345, init.data());
  int64_t offset = 0;
  size_t i = 0;
  for (const auto& p : file.named_parameters()) {
    ASSERT_LT(i, (*model)->params().size());
    const TorchScriptModel::Param& mine = (*model)->params()[i++];
    EXPECT_EQ(mine.name, p.name);
    EXPECT_EQ(mine.offset, offset);
    torch::Tensor flat = p.value.detach().contiguous().view(-1);
    for (int64_t k = 0; k < flat.numel(); ++k) {
      ASSERT_EQ(init[offset + k], flat[k].item<float>()) << p.name << "[" << k << "]";
    }
    offset += flat.numel();
  }
  EXPECT_EQ(i, (*model)->params().size());
  EXPECT_EQ(offset, (*model)->NumDenseParams());
}

// Every zoo model (one task) learns a fixed batch: plain SGD on the flat
// buffer and the rows lowers the loss.
TEST(TorchScriptModelTest, ZooModelsLearnABatch) {
  for (const char* name : {"dlrm", "dcn_v2", "deepfm", "wide_deep"}) {
    auto model = Load(name);
    ASSERT_TRUE(model.ok()) << name << ": " << model.status();
    Batch batch = RandomBatch(TinySpec(""), (*model)->NumDenseParams(), 32, 3);
    (*model)->InitDenseParams(0, batch.params.data());
    StepResult r;
    ASSERT_TRUE((*model)->ForwardBackward(batch.Inputs(), true, &r).ok()) << name;
    const double first = r.loss;
    for (int step = 0; step < 200; ++step) {
      ASSERT_TRUE((*model)->ForwardBackward(batch.Inputs(), true, &r).ok()) << name;
      for (size_t i = 0; i < batch.params.size(); ++i) batch.params[i] -= 0.3f * r.dense_grad[i];
      for (size_t t = 0; t < batch.rows.size(); ++t) {
        for (size_t i = 0; i < batch.rows[t].size(); ++i) {
          batch.rows[t][i] -= 0.3f * r.table_grads[t][i];
        }
      }
    }
    EXPECT_LT(r.loss, 0.8 * first) << name << ": loss " << first << " -> " << r.loss;
  }
}

void ExpectTrainingModeOnlyForSteps(const std::string& module) {
  auto model = Load(module);
  ASSERT_TRUE(model.ok()) << model.status();
  Batch batch = RandomBatch(TinySpec(""), (*model)->NumDenseParams(), 4, 5);
  StepResult train, eval;
  ASSERT_TRUE((*model)->ForwardBackward(batch.Inputs(), true, &train).ok());
  ASSERT_TRUE((*model)->ForwardBackward(batch.Inputs(), false, &eval).ok());
  for (size_t i = 0; i < train.probs.size(); ++i) {
    const double logit_train = std::log(train.probs[i] / (1 - train.probs[i]));
    const double logit_eval = std::log(eval.probs[i] / (1 - eval.probs[i]));
    EXPECT_NEAR(logit_train - logit_eval, 1.0, 1e-4) << i;
  }
  // The buffer (2.0) scales the logit: the bias's gradient is 2 x the mean
  // of (p - y).
  double mean = 0;
  for (size_t i = 0; i < train.probs.size(); ++i) mean += train.probs[i] - batch.labels[i];
  mean /= train.probs.size();
  EXPECT_NEAR(train.dense_grad.back(), 2 * mean, 1e-5);
}

// Training steps run the module in training mode, evaluation in eval mode,
// whichever mode it was saved in; a constant buffer is used as it is in the
// file.
TEST(TorchScriptModelTest, TrainingModeForStepsEvalModeForEvaluation) {
  for (const char* module : {"mode_probe", "mode_probe_eval"}) {
    SCOPED_TRACE(module);
    ExpectTrainingModeOnlyForSteps(module);
  }
}

// bf16 autocast reaches the module's matrix products: close to fp32, not
// equal; gradients stay fp32.
TEST(TorchScriptModelTest, Bf16AutocastAppliesToTheModule) {
  ModelOptions bf16;
  bf16.precision = ModelOptions::Precision::kBf16;
  auto low = Load("dcn_v2", bf16);
  auto full = Load("dcn_v2");
  ASSERT_TRUE(low.ok() && full.ok());
  Batch batch = RandomBatch(TinySpec(""), (*full)->NumDenseParams(), 16, 9);
  StepResult a, b;
  ASSERT_TRUE((*low)->ForwardBackward(batch.Inputs(), true, &a).ok());
  ASSERT_TRUE((*full)->ForwardBackward(batch.Inputs(), true, &b).ok());
  EXPECT_NE(a.probs, b.probs);
  ExpectNear(a.probs, b.probs, 0.03f, "bf16 probs");
  EXPECT_EQ(a.dense_grad.size(), b.dense_grad.size());
}

// Non-finite logits are computed, not refused: their gradients go to the
// servers, whose table non_finite policy decides.
TEST(TorchScriptModelTest, NonFiniteOutputsReachTheGradients) {
  auto model = Load("not_finite");
  ASSERT_TRUE(model.ok()) << model.status();
  Batch batch = RandomBatch(TinySpec(""), (*model)->NumDenseParams(), 4, 1);
  StepResult r;
  ASSERT_TRUE((*model)->ForwardBackward(batch.Inputs(), true, &r).ok());
  EXPECT_TRUE(std::isnan(r.loss));
  EXPECT_TRUE(std::isnan(r.dense_grad[0]));
}

// The same step twice gives the same bits (one intra-op thread).
TEST(TorchScriptModelTest, StepsAreDeterministic) {
  auto one = Load("deepfm");
  auto two = Load("deepfm");
  ASSERT_TRUE(one.ok() && two.ok());
  Batch batch = RandomBatch(TinySpec(""), (*one)->NumDenseParams(), 16, 2);
  StepResult a, b;
  for (int i = 0; i < 3; ++i) ASSERT_TRUE((*one)->ForwardBackward(batch.Inputs(), true, &a).ok());
  ASSERT_TRUE((*two)->ForwardBackward(batch.Inputs(), true, &b).ok());
  EXPECT_EQ(a.dense_grad, b.dense_grad);
  EXPECT_EQ(a.table_grads, b.table_grads);
  EXPECT_EQ(a.probs, b.probs);
}

struct Refusal {
  const char* module;
  const char* says;
};

// Each bad module is refused at load, naming the file and what was expected.
TEST(TorchScriptModelTest, BadModulesAreRefusedNamingWhatWasExpected) {
  for (const Refusal& c : {
           Refusal{"state_dict", "is not a TorchScript module"},
           Refusal{"wrong_signature", "want forward(self, dense: Tensor, sparse: List[Tensor])"},
           Refusal{"wrong_shape", "forward returns [1, 2] for a batch of 2: want logits [B] or"},
           Refusal{"wrong_dtype", "forward returns double logits, want float"},
           Refusal{"wrong_fields", "forward fails on a batch of this job's shape"},
           Refusal{"double_param", "parameter \"out.weight\" is double: every parameter must be"},
           Refusal{"frozen", "parameter \"out.bias\" does not require grad"},
           Refusal{"tied", "share storage (tied weights are not supported)"},
           Refusal{"batchnorm", "buffer \"norm.running_mean\" changed in a training-mode"},
           Refusal{"no_params", "the module has no parameters"},
           Refusal{"mmoe",
                   "forward returns [B, 2]: 2 tasks; multi-task models need "
                   "data.num_labels"},
       }) {
    auto model = Load(c.module);
    ASSERT_FALSE(model.ok()) << c.module << " was accepted";
    EXPECT_TRUE(absl::IsInvalidArgument(model.status())) << model.status();
    const std::string message(model.status().message());
    EXPECT_TRUE(absl::StrContains(message, "model.torchscript_file \"" + Module(c.module) + "\""))
        << message;
    EXPECT_TRUE(absl::StrContains(message, c.says)) << c.module << ": " << message;
  }
}

TEST(TorchScriptModelTest, MissingFileIsNotFound) {
  ModelSpec spec = TinySpec("");
  spec.torchscript_file = "/nonexistent/tower.pt";
  auto model = TorchScriptModel::Create(spec, ModelOptions());
  ASSERT_TRUE(absl::IsNotFound(model.status())) << model.status();
  EXPECT_TRUE(absl::StrContains(model.status().message(), "\"/nonexistent/tower.pt\": cannot be"))
      << model.status();
}

// The tiny job as a config, its dense table sized by `dense_size_line`.
JobConfig TinyJob(const std::string& module, const std::string& dense_table_extra,
                  const std::string& cluster_extra = "") {
  auto config = ParseJobConfig(
      "tables { id: 1 name: \"A\" dim: 4 optimizer { sgd { learning_rate: 0.1 } } }\n"
      "tables { id: 2 name: \"B\" dim: 4 optimizer { sgd { learning_rate: 0.1 } } }\n"
      "tables { id: 3 name: \"W\" dim: 1 optimizer { sgd { learning_rate: 0.1 } } }\n"
      "tables { id: 4 name: \"mlp\" kind: DENSE " +
          dense_table_extra +
          " optimizer { adagrad { learning_rate: 0.1 } } }\n"
          "fields { name: \"f0\" column: 4 table: \"A\" }\n"
          "fields { name: \"f1\" column: 5 table: \"A\" }\n"
          "fields { name: \"f2\" column: 6 table: \"B\" pooling: MEAN }\n"
          "fields { name: \"w0\" column: 7 table: \"W\" }\n"
          "fields { name: \"w1\" column: 8 table: \"W\" }\n"
          "model { kind: TORCHSCRIPT torchscript_file: \"" +
          Module(module) +
          "\" dense_table: \"mlp\" wide_table: \"W\" }\n"
          "data { num_dense: 3 synthetic_dir: \"/tmp/x\" }\n"
          "cluster { " +
          cluster_extra + " }\n",
      "tiny.pbtxt");
  EXPECT_TRUE(config.ok()) << config.status();
  return config.ok() ? *config : JobConfig();
}

TEST(TorchScriptModelTest, FactoryChecksTheDenseTableSize) {
  const c10::Device cpu(c10::DeviceType::CPU);
  auto model = CreateModel(TinyJob("tower", ""), cpu);
  ASSERT_TRUE(model.ok()) << model.status();
  const int64_t n = (*model)->NumDenseParams();
  EXPECT_EQ(n, (3 + 3 * 4 + 2) + 1);
  EXPECT_TRUE(CreateModel(TinyJob("tower", "dense_size: " + std::to_string(n)), cpu).ok());
  auto wrong = CreateModel(TinyJob("tower", "dense_size: 5"), cpu);
  ASSERT_FALSE(wrong.ok());
  EXPECT_TRUE(absl::StrContains(wrong.status().message(),
                                "table \"mlp\".dense_size is 5 but the model has 18"))
      << wrong.status();
  // Unsized, the servers bound the table at one message (here one chunk of
  // 16 floats): a larger module must say its size.
  auto large = CreateModel(
      TinyJob("dcn_v2", "", "dense_chunk_size: 16 max_message_bytes: 32 grpc_memory_bytes: 64"),
      cpu);
  ASSERT_FALSE(large.ok());
  EXPECT_TRUE(absl::StrContains(large.status().message(), "more than the 16 the servers give"))
      << large.status();
  EXPECT_TRUE(absl::StrContains(large.status().message(), "set table \"mlp\".dense_size: "))
      << large.status();
}

}  // namespace
}  // namespace shardps

#include "worker/model/dlrm.h"

#include <ATen/autocast_mode.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <memory>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "torch/torch.h"
#include "worker/model/model.h"
#include "worker/model/test_batch.h"

namespace shardps {
namespace {

using testing::Batch;

// Tiny DLRM: 3 dense features, tables A (fields f0, f1, sum) and B (field
// f2, mean), dim 4, bottom [5, 4], top [6].
ModelSpec TinySpec() {
  ModelSpec s;
  s.num_dense = 3;
  s.tables = {{"A", 1, 4}, {"B", 2, 4}};
  s.fields = {{"f0", 4, 0, false}, {"f1", 5, 0, false}, {"f2", 6, 1, true}};
  s.bottom_mlp = {5, 4};
  s.top_mlp = {6};
  return s;
}

// The default job's shapes: 13 dense, 26 fields on one table of dim 16.
ModelSpec DefaultSpec() {
  ModelSpec s;
  s.num_dense = 13;
  s.tables = {{"categorical", 1, 16}};
  for (int i = 0; i < 26; ++i) s.fields.push_back({"C" + std::to_string(i + 1), 14u + i, 0, false});
  s.bottom_mlp = {64, 16};
  s.top_mlp = {64, 32};
  return s;
}

// Random multi-hot batch (0..max_hot ids per bag, so some bags are empty).
Batch RandomBatch(const Model& model, int64_t b, int64_t unique_per_table, int max_hot,
                  uint64_t seed) {
  const ModelSpec& spec = model.spec();
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Batch batch;
  batch.batch_size = b;
  for (int64_t i = 0; i < b; ++i) batch.labels.push_back(static_cast<float>(rng() % 2));
  for (int64_t i = 0; i < b * spec.num_dense; ++i) batch.dense.push_back(normal(rng));
  batch.params.resize(model.NumDenseParams());
  model.InitDenseParams(seed, batch.params.data());
  for (const TableSpec& t : spec.tables) {
    std::vector<float> r(unique_per_table * t.dim);
    for (float& v : r) v = 0.5f * normal(rng);
    batch.rows.push_back(std::move(r));
  }
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    std::vector<int64_t> idx, off = {0};
    for (int64_t s = 0; s < b; ++s) {
      const int hot = static_cast<int>(rng() % (max_hot + 1));
      for (int h = 0; h < hot; ++h) idx.push_back(static_cast<int64_t>(rng() % unique_per_table));
      off.push_back(static_cast<int64_t>(idx.size()));
    }
    batch.indices.push_back(std::move(idx));
    batch.offsets.push_back(std::move(off));
  }
  return batch;
}

std::unique_ptr<Dlrm> MakeModel(const ModelSpec& spec, bool double_precision) {
  ModelOptions options;
  options.double_precision = double_precision;
  absl::StatusOr<std::unique_ptr<Dlrm>> m = Dlrm::Create(spec, options);
  EXPECT_TRUE(m.ok()) << m.status();
  return m.ok() ? std::move(*m) : nullptr;
}

double Loss(Model* model, Batch* batch) {
  StepResult r;
  absl::Status s = model->ForwardBackward(batch->Inputs(), /*backward=*/false, &r);
  EXPECT_TRUE(s.ok()) << s;
  return r.loss;
}

// Central difference of the loss w.r.t. *x, with the step rounded to float
// (the inputs are float) and divided by the step actually taken.
double FiniteDifference(Model* model, Batch* batch, float* x) {
  const float saved = *x;
  const float h = 1e-3f * std::max(1.0f, std::fabs(saved));
  const float plus = saved + h, minus = saved - h;
  *x = plus;
  const double lp = Loss(model, batch);
  *x = minus;
  const double lm = Loss(model, batch);
  *x = saved;
  return (lp - lm) / (static_cast<double>(plus) - static_cast<double>(minus));
}

// Checks every coordinate of `grad` against finite differences of `values`.
void ExpectMatchesFiniteDifferences(Model* model, Batch* batch, std::vector<float>* values,
                                    const std::vector<float>& grad, const char* what) {
  ASSERT_EQ(values->size(), grad.size()) << what;
  double err2 = 0, norm2 = 0;
  for (size_t i = 0; i < values->size(); ++i) {
    const double fd = FiniteDifference(model, batch, &(*values)[i]);
    EXPECT_NEAR(grad[i], fd, 1e-5 + 1e-3 * std::fabs(fd)) << what << "[" << i << "]";
    err2 += (grad[i] - fd) * (grad[i] - fd);
    norm2 += fd * fd;
  }
  EXPECT_GT(norm2, 0.0) << what << ": the check needs a non-zero gradient";
  EXPECT_LT(std::sqrt(err2 / norm2), 1e-5) << what << ": relative error";
}

TEST(DlrmTest, GradientsMatchFiniteDifferences) {
  torch::set_num_threads(1);
  std::unique_ptr<Dlrm> model = MakeModel(TinySpec(), /*double_precision=*/true);
  ASSERT_NE(model, nullptr);
  Batch batch = RandomBatch(*model, /*b=*/5, /*unique_per_table=*/6, /*max_hot=*/3, 11);
  // Scale the weights up so the logits (and gradients) are far from zero.
  for (float& p : batch.params) p *= 2.0f;
  StepResult r;
  ASSERT_TRUE(model->ForwardBackward(batch.Inputs(), /*backward=*/true, &r).ok());
  ASSERT_EQ(r.dense_grad.size(), static_cast<size_t>(model->NumDenseParams()));
  ASSERT_EQ(r.table_grads.size(), 2u);
  ExpectMatchesFiniteDifferences(model.get(), &batch, &batch.params, r.dense_grad, "dense");
  ExpectMatchesFiniteDifferences(model.get(), &batch, &batch.rows[0], r.table_grads[0], "A");
  ExpectMatchesFiniteDifferences(model.get(), &batch, &batch.rows[1], r.table_grads[1], "B");
}

// A plain-C++ DLRM forward pass in double over the documented parameter
// layout, for TinySpec-like specs with one table. Returns the mean loss.
double ReferenceLoss(const ModelSpec& spec, const Batch& batch, std::vector<double>* logits) {
  const std::vector<float>& p = batch.params;
  int64_t offset = 0;
  auto linear = [&](const std::vector<double>& x, int64_t out, bool relu) {
    const int64_t in = static_cast<int64_t>(x.size());
    std::vector<double> y(out);
    for (int64_t o = 0; o < out; ++o) {
      double acc = p[offset + in * out + o];
      for (int64_t i = 0; i < in; ++i) acc += p[offset + o * in + i] * x[i];
      y[o] = relu ? std::max(acc, 0.0) : acc;
    }
    offset += in * out + out;
    return y;
  };
  double loss = 0;
  logits->clear();
  for (int64_t s = 0; s < batch.batch_size; ++s) {
    offset = 0;
    std::vector<double> x(batch.dense.begin() + s * spec.num_dense,
                          batch.dense.begin() + (s + 1) * spec.num_dense);
    for (int64_t h : spec.bottom_mlp) x = linear(x, h, true);
    std::vector<std::vector<double>> vecs = {x};
    for (size_t f = 0; f < spec.fields.size(); ++f) {
      const int64_t dim = spec.tables[0].dim;
      std::vector<double> e(dim, 0.0);
      const int64_t begin = batch.offsets[f][s], end = batch.offsets[f][s + 1];
      for (int64_t k = begin; k < end; ++k) {
        for (int64_t d = 0; d < dim; ++d) e[d] += batch.rows[0][batch.indices[f][k] * dim + d];
      }
      if (spec.fields[f].mean_pooling && end - begin > 1) {
        for (double& v : e) v /= static_cast<double>(end - begin);
      }
      vecs.push_back(e);
    }
    std::vector<double> top_in = x;
    for (size_t i = 0; i < vecs.size(); ++i) {
      for (size_t j = i + 1; j < vecs.size(); ++j) {
        double dot = 0;
        for (size_t d = 0; d < x.size(); ++d) dot += vecs[i][d] * vecs[j][d];
        top_in.push_back(dot);
      }
    }
    for (int64_t h : spec.top_mlp) top_in = linear(top_in, h, true);
    const double z = linear(top_in, 1, false)[0];
    logits->push_back(z);
    const double y = batch.labels[s];
    loss += std::max(z, 0.0) - z * y + std::log1p(std::exp(-std::fabs(z)));
  }
  return loss / static_cast<double>(batch.batch_size);
}

TEST(DlrmTest, ForwardMatchesPlainReference) {
  ModelSpec spec = TinySpec();
  spec.tables.resize(1);
  for (FieldSpec& f : spec.fields) f.table = 0;
  spec.fields[1].mean_pooling = true;
  std::unique_ptr<Dlrm> model = MakeModel(spec, /*double_precision=*/true);
  ASSERT_NE(model, nullptr);
  Batch batch = RandomBatch(*model, 7, 5, 3, 3);
  for (float& p : batch.params) p *= 2.0f;
  StepResult r;
  ASSERT_TRUE(model->ForwardBackward(batch.Inputs(), false, &r).ok());
  std::vector<double> logits;
  EXPECT_NEAR(r.loss, ReferenceLoss(spec, batch, &logits), 1e-9);
  ASSERT_EQ(r.probs.size(), logits.size());
  for (size_t i = 0; i < logits.size(); ++i) {
    EXPECT_NEAR(r.probs[i], 1.0 / (1.0 + std::exp(-logits[i])), 1e-6) << i;
  }
}

// A key used by several fields and samples gets the sum of its
// contributions: compare with the same batch where every occurrence has its
// own (identical) row.
// TinySpec with a first-order table W (dim 1) read by two more fields.
ModelSpec WideSpec() {
  ModelSpec s = TinySpec();
  s.tables.push_back({"W", 3, 1});
  s.fields.push_back({"w0", 4, 2, false});
  s.fields.push_back({"w1", 6, 2, false});
  s.wide_table = 2;
  return s;
}

TEST(DlrmTest, AWideTableAddsItsRowsToTheLogitAndLearnsByTheirGradients) {
  std::unique_ptr<Dlrm> wide = MakeModel(WideSpec(), /*double_precision=*/true);
  std::unique_ptr<Dlrm> deep = MakeModel(TinySpec(), /*double_precision=*/true);
  ASSERT_NE(wide, nullptr);
  ASSERT_NE(deep, nullptr);
  // The wide fields are not interaction vectors: the MLPs are the same.
  ASSERT_EQ(wide->NumDenseParams(), deep->NumDenseParams());
  Batch batch = RandomBatch(*wide, 8, 4, 2, 11);
  Batch without = batch;
  without.rows.resize(2);
  without.indices.resize(3);
  without.offsets.resize(3);
  StepResult w, d;
  ASSERT_TRUE(wide->ForwardBackward(batch.Inputs(), true, &w).ok());
  ASSERT_TRUE(deep->ForwardBackward(without.Inputs(), true, &d).ok());
  auto logit = [](double p) { return std::log(p / (1 - p)); };
  for (int64_t s = 0; s < batch.batch_size; ++s) {
    double first_order = 0;
    for (int f = 3; f < 5; ++f) {
      for (int64_t k = batch.offsets[f][s]; k < batch.offsets[f][s + 1]; ++k) {
        first_order += batch.rows[2][batch.indices[f][k]];
      }
    }
    EXPECT_NEAR(logit(w.probs[s]), logit(d.probs[s]) + first_order, 1e-4) << "sample " << s;
  }
  ExpectMatchesFiniteDifferences(wide.get(), &batch, &batch.rows[2], w.table_grads[2], "wide rows");
  ExpectMatchesFiniteDifferences(wide.get(), &batch, &batch.rows[0], w.table_grads[0],
                                 "table A beside the wide rows");
  EXPECT_NE(wide->DebugString().find("first-order term"), std::string::npos);
  // A wide table must have dim 1.
  ModelSpec bad = WideSpec();
  bad.tables[2].dim = 4;
  EXPECT_FALSE(Dlrm::Create(bad, ModelOptions()).ok());
}

TEST(DlrmTest, RepeatedKeyGradientIsSumOfContributions) {
  std::unique_ptr<Dlrm> model = MakeModel(TinySpec(), /*double_precision=*/true);
  ASSERT_NE(model, nullptr);
  Batch dedup = RandomBatch(*model, 6, 3, 3, 5);  // 3 rows: heavy reuse.
  Batch expanded = dedup;
  std::vector<std::vector<int64_t>> owner(2);  // Per table: occurrence -> unique row.
  for (size_t f = 0; f < dedup.indices.size(); ++f) {
    const int t = model->spec().fields[f].table;
    const int64_t dim = model->spec().tables[t].dim;
    if (f == 0 || (f == 2)) expanded.rows[t].clear();
    for (size_t k = 0; k < dedup.indices[f].size(); ++k) {
      const int64_t u = dedup.indices[f][k];
      expanded.indices[f][k] = static_cast<int64_t>(owner[t].size());
      owner[t].push_back(u);
      expanded.rows[t].insert(expanded.rows[t].end(), dedup.rows[t].begin() + u * dim,
                              dedup.rows[t].begin() + (u + 1) * dim);
    }
  }
  StepResult a, b;
  ASSERT_TRUE(model->ForwardBackward(dedup.Inputs(), true, &a).ok());
  ASSERT_TRUE(model->ForwardBackward(expanded.Inputs(), true, &b).ok());
  EXPECT_NEAR(a.loss, b.loss, 1e-12);
  for (int t = 0; t < 2; ++t) {
    const int64_t dim = model->spec().tables[t].dim;
    std::vector<double> summed(dedup.rows[t].size(), 0.0);
    for (size_t occ = 0; occ < owner[t].size(); ++occ) {
      for (int64_t d = 0; d < dim; ++d)
        summed[owner[t][occ] * dim + d] += b.table_grads[t][occ * dim + d];
    }
    ASSERT_EQ(a.table_grads[t].size(), summed.size());
    int reused = 0;
    for (int64_t u = 0; u < 3; ++u) {
      reused += std::count(owner[t].begin(), owner[t].end(), u) > 1;
    }
    EXPECT_GT(reused, 0) << "the batch must reuse keys";
    for (size_t i = 0; i < summed.size(); ++i) {
      EXPECT_NEAR(a.table_grads[t][i], summed[i], 1e-6 + 1e-5 * std::fabs(summed[i]))
          << "table " << t << " element " << i;
    }
  }
}

TEST(DlrmTest, BitIdenticalAcrossRunsAndInstances) {
  torch::set_num_threads(1);
  std::unique_ptr<Dlrm> m1 = MakeModel(DefaultSpec(), false);
  std::unique_ptr<Dlrm> m2 = MakeModel(DefaultSpec(), false);
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m2, nullptr);
  Batch batch = RandomBatch(*m1, 256, 2000, 2, 9);
  StepResult r1, r2, r3;
  ASSERT_TRUE(m1->ForwardBackward(batch.Inputs(), true, &r1).ok());
  ASSERT_TRUE(m1->ForwardBackward(batch.Inputs(), true, &r2).ok());
  ASSERT_TRUE(m2->ForwardBackward(batch.Inputs(), true, &r3).ok());
  for (const StepResult* r : {&r2, &r3}) {
    EXPECT_EQ(std::memcmp(&r1.loss, &r->loss, sizeof(double)), 0);
    EXPECT_EQ(r1.probs, r->probs);
    EXPECT_EQ(r1.dense_grad, r->dense_grad);
    EXPECT_EQ(r1.table_grads, r->table_grads);
  }
}

// Local mode and PS mode hold their buffers at different addresses: the bits
// must not depend on the alignment of the caller's memory.
TEST(DlrmTest, BitIdenticalWhateverTheInputAlignment) {
  torch::set_num_threads(1);
  std::unique_ptr<Dlrm> model = MakeModel(DefaultSpec(), false);
  ASSERT_NE(model, nullptr);
  Batch batch = RandomBatch(*model, 256, 2000, 2, 21);
  StepResult base;
  ASSERT_TRUE(model->ForwardBackward(batch.Inputs(), true, &base).ok());
  for (size_t shift = 1; shift < 8; ++shift) {
    // Copies of every float and index input starting `shift` elements into
    // a larger buffer.
    auto shifted = [shift](const auto& v, auto* storage) {
      storage->assign(shift, {});
      storage->insert(storage->end(), v.begin(), v.end());
      return absl::MakeConstSpan(storage->data() + shift, v.size());
    };
    std::vector<float> labels, dense, params;
    std::vector<std::vector<float>> rows(batch.rows.size());
    std::vector<std::vector<int64_t>> idx(batch.indices.size()), off(batch.offsets.size());
    ModelInputs in = batch.Inputs();
    in.labels = shifted(batch.labels, &labels);
    in.dense = shifted(batch.dense, &dense);
    in.dense_params = shifted(batch.params, &params);
    std::vector<TableRows> tables;
    for (size_t t = 0; t < rows.size(); ++t) tables.push_back({shifted(batch.rows[t], &rows[t])});
    std::vector<FieldBag> fields;
    for (size_t f = 0; f < idx.size(); ++f) {
      fields.push_back({shifted(batch.indices[f], &idx[f]), shifted(batch.offsets[f], &off[f])});
    }
    in.tables = tables;
    in.fields = fields;
    StepResult r;
    ASSERT_TRUE(model->ForwardBackward(in, true, &r).ok());
    EXPECT_EQ(std::memcmp(&base.loss, &r.loss, sizeof(double)), 0) << "shift " << shift;
    EXPECT_EQ(base.probs, r.probs) << "shift " << shift;
    EXPECT_EQ(base.dense_grad, r.dense_grad) << "shift " << shift;
    EXPECT_EQ(base.table_grads, r.table_grads) << "shift " << shift;
  }
}

TEST(DlrmTest, ForwardOnlyGivesTheSameLossAndNoGradients) {
  std::unique_ptr<Dlrm> model = MakeModel(TinySpec(), false);
  ASSERT_NE(model, nullptr);
  Batch batch = RandomBatch(*model, 8, 4, 2, 1);
  StepResult train;
  ASSERT_TRUE(model->ForwardBackward(batch.Inputs(), true, &train).ok());
  absl::StatusOr<StepResult> eval = model->ForwardBackward(batch.Inputs(), false);
  ASSERT_TRUE(eval.ok()) << eval.status();
  EXPECT_EQ(eval->loss, train.loss);
  EXPECT_EQ(eval->probs, train.probs);
  EXPECT_TRUE(eval->dense_grad.empty());
  for (const auto& g : eval->table_grads) EXPECT_TRUE(g.empty());
  // The StepResult is reusable: a forward-only step clears old gradients.
  ASSERT_TRUE(model->ForwardBackward(batch.Inputs(), false, &train).ok());
  EXPECT_TRUE(train.dense_grad.empty());
}

TEST(DlrmTest, UnusedRowsGetZeroGradientAndEmptyTablesWork) {
  std::unique_ptr<Dlrm> model = MakeModel(TinySpec(), false);
  ASSERT_NE(model, nullptr);
  Batch batch = RandomBatch(*model, 4, 3, 1, 2);
  batch.rows[0].resize(batch.rows[0].size() + 4, 1.0f);  // A row no bag uses.
  batch.rows[1].clear();                                 // Table B: no keys at all.
  batch.indices[2].clear();
  std::fill(batch.offsets[2].begin(), batch.offsets[2].end(), 0);
  StepResult r;
  absl::Status s = model->ForwardBackward(batch.Inputs(), true, &r);
  ASSERT_TRUE(s.ok()) << s;
  ASSERT_EQ(r.table_grads[0].size(), batch.rows[0].size());
  for (size_t i = r.table_grads[0].size() - 4; i < r.table_grads[0].size(); ++i) {
    EXPECT_EQ(r.table_grads[0][i], 0.0f);
  }
  EXPECT_TRUE(r.table_grads[1].empty());
  EXPECT_TRUE(std::isfinite(r.loss));
}

TEST(DlrmTest, InitIsDeterministicBoundedAndIndependentOfTorchRng) {
  std::unique_ptr<Dlrm> model = MakeModel(DefaultSpec(), false);
  ASSERT_NE(model, nullptr);
  const int64_t n = model->NumDenseParams();
  // bottom 13->64->16, top (16 + 351)->64->32->1.
  EXPECT_EQ(n, (13 * 64 + 64) + (64 * 16 + 16) + (367 * 64 + 64) + (64 * 32 + 32) + (32 + 1));
  std::vector<float> a(n), b(n), c(n);
  torch::manual_seed(1);
  model->InitDenseParams(18, a.data());
  torch::manual_seed(2);
  model->InitDenseParams(18, b.data());
  model->InitDenseParams(19, c.data());
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  // First layer: fan_in 13, bound 1/sqrt(13); last layer: fan_in 32.
  const float bound0 = 1.0f / std::sqrt(13.0f);
  double sum = 0;
  for (int64_t i = 0; i < 13 * 64 + 64; ++i) {
    EXPECT_LE(std::fabs(a[i]), bound0);
    sum += a[i];
  }
  EXPECT_NEAR(sum / (13 * 64 + 64), 0.0, 0.05);
  for (int64_t i = n - 33; i < n; ++i) EXPECT_LE(std::fabs(a[i]), 1.0f / std::sqrt(32.0f));
}

TEST(DlrmTest, CreateRejectsSpecsThatAreNotDlrm) {
  ModelSpec s = TinySpec();
  s.tables[1].dim = 8;
  absl::StatusOr<std::unique_ptr<Dlrm>> m = Dlrm::Create(s, {});
  EXPECT_EQ(m.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(m.status().message().find("\"B\""), std::string::npos) << m.status();
  s = TinySpec();
  s.bottom_mlp.clear();
  EXPECT_EQ(Dlrm::Create(s, {}).status().code(), absl::StatusCode::kInvalidArgument);
  s = TinySpec();
  s.num_dense = 0;
  EXPECT_EQ(Dlrm::Create(s, {}).status().code(), absl::StatusCode::kInvalidArgument);
  s = TinySpec();
  s.top_mlp = {0};
  EXPECT_EQ(Dlrm::Create(s, {}).status().code(), absl::StatusCode::kInvalidArgument);
}

// Each malformed batch is refused with INVALID_ARGUMENT, nothing crashes.
TEST(DlrmTest, BadInputsAreInvalidArgument) {
  std::unique_ptr<Dlrm> model = MakeModel(TinySpec(), false);
  ASSERT_NE(model, nullptr);
  const Batch good = RandomBatch(*model, 4, 3, 2, 4);
  struct Case {
    const char* name;
    std::function<void(Batch*)> spoil;
  };
  const std::vector<Case> cases = {
      {"offsets not monotone",
       [](Batch* b) {
         b->offsets[0] = {0, 2, 1, 3, b->offsets[0][4]};
       }},
      {"offsets[0] != 0", [](Batch* b) { b->offsets[1][0] = 1; }},
      {"last offset != #indices", [](Batch* b) { b->indices[0].push_back(0); }},
      {"too few offsets", [](Batch* b) { b->offsets[2].pop_back(); }},
      {"index too large",
       [](Batch* b) {
         b->indices[0] = {3};
         b->offsets[0] = {0, 1, 1, 1, 1};
       }},
      {"negative index",
       [](Batch* b) {
         b->indices[2] = {-1};
         b->offsets[2] = {0, 0, 1, 1, 1};
       }},
      {"wrong dense width", [](Batch* b) { b->dense.pop_back(); }},
      {"non-finite dense", [](Batch* b) { b->dense[5] = NAN; }},
      {"wrong label count", [](Batch* b) { b->labels.push_back(1); }},
      {"label outside [0, 1]", [](Batch* b) { b->labels[1] = 2; }},
      {"wrong dense param count", [](Batch* b) { b->params.push_back(0); }},
      {"rows not whole", [](Batch* b) { b->rows[0].push_back(0); }},
      {"non-finite row", [](Batch* b) { b->rows[1][5] = INFINITY; }},
      {"non-finite dense param", [](Batch* b) { b->params[b->params.size() - 1] = NAN; }},
      {"missing table", [](Batch* b) { b->rows.pop_back(); }},
      {"missing field",
       [](Batch* b) {
         b->indices.pop_back();
         b->offsets.pop_back();
       }},
      {"batch size 0", [](Batch* b) { b->batch_size = 0; }},
  };
  for (const Case& c : cases) {
    Batch bad = good;
    c.spoil(&bad);
    StepResult r;
    absl::Status s = model->ForwardBackward(bad.Inputs(), true, &r);
    EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument) << c.name << ": " << s;
  }
  Batch ok = good;
  EXPECT_TRUE(model->ForwardBackward(ok.Inputs(), true).ok());
}

// BF16 autocast: the loss and gradients follow fp32's closely, differ from
// them (the matrix products did run in bf16), stay fp32, and the thread's
// autocast state is restored after the step.
TEST(DlrmTest, Bf16AutocastTracksFp32) {
  std::unique_ptr<Dlrm> fp32 = MakeModel(DefaultSpec(), false);
  ModelOptions options;
  options.precision = ModelOptions::Precision::kBf16;
  auto bf16 = Dlrm::Create(DefaultSpec(), options);
  ASSERT_TRUE(bf16.ok()) << bf16.status();
  Batch batch = RandomBatch(*fp32, 64, 40, 2, 11);
  StepResult a, b;
  ASSERT_TRUE(fp32->ForwardBackward(batch.Inputs(), true, &a).ok());
  ASSERT_TRUE((*bf16)->ForwardBackward(batch.Inputs(), true, &b).ok());
  EXPECT_FALSE(at::autocast::is_cpu_enabled());
  EXPECT_NEAR(b.loss, a.loss, 0.02 * std::fabs(a.loss));
  EXPECT_NE(b.loss, a.loss);
  auto rel_err = [](const std::vector<float>& x, const std::vector<float>& y) {
    double e = 0, n = 0;
    for (size_t i = 0; i < x.size(); ++i) {
      e += (x[i] - y[i]) * double(x[i] - y[i]);
      n += double(y[i]) * y[i];
    }
    return std::sqrt(e / n);
  };
  ASSERT_EQ(b.dense_grad.size(), a.dense_grad.size());
  // bf16 keeps 8 bits of mantissa (0.4% a product); 5.5% after the layers.
  EXPECT_LT(rel_err(b.dense_grad, a.dense_grad), 0.1);
  EXPECT_GT(rel_err(b.dense_grad, a.dense_grad), 0.0);
  ASSERT_EQ(b.table_grads[0].size(), a.table_grads[0].size());
  EXPECT_LT(rel_err(b.table_grads[0], a.table_grads[0]), 0.1);
}

TEST(DlrmTest, DebugStringNamesTheShape) {
  std::unique_ptr<Dlrm> model = MakeModel(DefaultSpec(), false);
  ASSERT_NE(model, nullptr);
  const std::string s = model->DebugString();
  EXPECT_NE(s.find("DLRM"), std::string::npos) << s;
  EXPECT_NE(s.find("351 pairs"), std::string::npos) << s;
}

}  // namespace
}  // namespace shardps

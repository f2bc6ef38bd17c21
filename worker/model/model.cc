#include "worker/model/model.h"

#include <cmath>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/config.h"

namespace shardps {
namespace {

constexpr int kCriteoCategoricals = 26;

// True if every value is finite. Branch-free on the fast path: x * 0 is NaN
// exactly for infinite or NaN x; eight lanes keep the loop short.
bool AllFinite(absl::Span<const float> v) {
  float acc[8] = {};
  size_t i = 0;
  for (; i + 8 <= v.size(); i += 8) {
    for (int k = 0; k < 8; ++k) acc[k] += v[i + k] * 0.0f;
  }
  for (; i < v.size(); ++i) acc[0] += v[i] * 0.0f;
  float sum = 0;
  for (float a : acc) sum += a;
  return sum == 0.0f;
}

int64_t FirstNonFinite(absl::Span<const float> v) {
  for (size_t i = 0; i < v.size(); ++i) {
    if (!std::isfinite(v[i])) return static_cast<int64_t>(i);
  }
  return -1;
}

absl::Status CheckParams(const ModelSpec& spec, const ModelInputs& in) {
  if (!AllFinite(in.dense_params)) {
    const int64_t i = FirstNonFinite(in.dense_params);
    return absl::InvalidArgumentError(
        absl::StrCat("dense parameter ", i, " is not finite (", in.dense_params[i], ")"));
  }
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    if (AllFinite(in.tables[t].rows)) continue;
    const int64_t i = FirstNonFinite(in.tables[t].rows);
    return absl::InvalidArgumentError(absl::StrCat(
        "table \"", spec.tables[t].name, "\": row ", i / spec.tables[t].dim, " element ",
        i % spec.tables[t].dim, " is not finite (", in.tables[t].rows[i], ")"));
  }
  return absl::OkStatus();
}

absl::Status CheckFieldBag(const ModelSpec& spec, const ModelInputs& in, int f) {
  const FieldSpec& field = spec.fields[f];
  const FieldBag& bag = in.fields[f];
  const std::string what = absl::StrCat("fields[", f, "] (\"", field.name, "\")");
  if (bag.offsets.size() != static_cast<size_t>(in.batch_size) + 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        what, ": ", bag.offsets.size(), " offsets, want batch_size + 1 = ", in.batch_size + 1));
  }
  if (bag.offsets[0] != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat(what, ": offsets[0] is ", bag.offsets[0], ", want 0"));
  }
  for (int64_t b = 0; b < in.batch_size; ++b) {
    if (bag.offsets[b + 1] < bag.offsets[b]) {
      return absl::InvalidArgumentError(absl::StrCat(what, ": offsets decrease at sample ", b, " (",
                                                     bag.offsets[b], " then ", bag.offsets[b + 1],
                                                     ")"));
    }
  }
  if (bag.offsets[in.batch_size] != static_cast<int64_t>(bag.indices.size())) {
    return absl::InvalidArgumentError(absl::StrCat(what, ": last offset is ",
                                                   bag.offsets[in.batch_size], " but there are ",
                                                   bag.indices.size(), " indices"));
  }
  const int64_t num_rows =
      static_cast<int64_t>(in.tables[field.table].rows.size()) / spec.tables[field.table].dim;
  for (size_t i = 0; i < bag.indices.size(); ++i) {
    if (bag.indices[i] < 0 || bag.indices[i] >= num_rows) {
      return absl::InvalidArgumentError(
          absl::StrCat(what, ": indices[", i, "] = ", bag.indices[i], " is outside the ", num_rows,
                       " rows of table \"", spec.tables[field.table].name, "\""));
    }
  }
  return absl::OkStatus();
}

absl::Status CheckFeatures(const ModelSpec& spec, const ModelInputs& in) {
  const size_t b = static_cast<size_t>(in.batch_size);
  if (in.labels.size() != b) {
    return absl::InvalidArgumentError(absl::StrCat(in.labels.size(), " labels for a batch of ", b));
  }
  for (size_t i = 0; i < b; ++i) {
    if (!(in.labels[i] >= 0.0f && in.labels[i] <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("labels[", i, "] = ", in.labels[i], " is outside [0, 1]"));
    }
  }
  if (in.dense.size() != b * spec.num_dense) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.dense.size(), " dense features for a batch of ", b, " with ",
                     spec.num_dense, " per sample (want ", b * spec.num_dense, ")"));
  }
  for (size_t i = 0; i < in.dense.size(); ++i) {
    if (!std::isfinite(in.dense[i])) {
      return absl::InvalidArgumentError(absl::StrCat("dense feature ", i % spec.num_dense,
                                                     " of sample ", i / spec.num_dense,
                                                     " is not finite (", in.dense[i], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ModelSpec> ModelSpecFromConfig(const JobConfig& config) {
  ModelSpec spec;
  spec.kind = config.model().kind() == ModelConfig::KIND_UNSPECIFIED ? ModelConfig::DLRM
                                                                     : config.model().kind();
  spec.num_dense = config.data().num_dense() == 0 ? 13 : config.data().num_dense();
  for (uint32_t h : config.model().bottom_mlp()) spec.bottom_mlp.push_back(h);
  for (uint32_t h : config.model().top_mlp()) spec.top_mlp.push_back(h);
  spec.torchscript_file = config.model().torchscript_file();

  const std::string& wide = config.model().wide_table();
  std::vector<FieldConfig> fields(config.fields().begin(), config.fields().end());
  if (fields.empty()) {
    const TableConfig* first = nullptr;
    for (const TableConfig& t : config.tables()) {
      if ((t.kind() == TableConfig::SPARSE || t.kind() == TableConfig::KIND_UNSPECIFIED) &&
          t.name() != wide) {
        first = &t;
        break;
      }
    }
    if (first == nullptr) {
      return absl::InvalidArgumentError(
          "model: no fields and no SPARSE table to map the "
          "26 categorical columns to");
    }
    for (int i = 0; i < kCriteoCategoricals; ++i) {
      FieldConfig f;
      f.set_name(absl::StrCat("C", i + 1));
      f.set_column(static_cast<uint32_t>(spec.num_dense + 1 + i));
      f.set_table(first->name());
      fields.push_back(std::move(f));
    }
    for (int i = 0; !wide.empty() && i < kCriteoCategoricals; ++i) {  // As data::ResolveFields.
      FieldConfig f;
      f.set_name(absl::StrCat("W", i + 1));
      f.set_column(static_cast<uint32_t>(spec.num_dense + 1 + i));
      f.set_table(wide);
      fields.push_back(std::move(f));
    }
  }
  // Tables in config order, keeping only those some field uses.
  std::vector<int> table_index(config.tables_size(), -1);
  for (size_t i = 0; i < fields.size(); ++i) {
    int ti = -1;
    for (int t = 0; t < config.tables_size(); ++t) {
      if (config.tables(t).name() == fields[i].table()) ti = t;
    }
    if (ti < 0 || config.tables(ti).kind() == TableConfig::DENSE) {
      return absl::InvalidArgumentError(absl::StrCat("fields[", i, "] (\"", fields[i].name(),
                                                     "\").table: \"", fields[i].table(),
                                                     "\" is not a SPARSE table"));
    }
    table_index[ti] = 0;
  }
  for (int t = 0; t < config.tables_size(); ++t) {
    if (table_index[t] < 0) continue;
    table_index[t] = static_cast<int>(spec.tables.size());
    const TableConfig& tc = config.tables(t);
    if (tc.dim() == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("tables[", t, "] (\"", tc.name(), "\").dim: must be > 0"));
    }
    if (tc.name() == wide) spec.wide_table = table_index[t];
    spec.tables.push_back({tc.name(), tc.id(), static_cast<int64_t>(tc.dim())});
  }
  for (const FieldConfig& f : fields) {
    int ti = -1;
    for (int t = 0; t < config.tables_size(); ++t) {
      if (config.tables(t).name() == f.table()) ti = t;
    }
    spec.fields.push_back(
        {f.name(), f.column(), table_index[ti], f.pooling() == FieldConfig::MEAN});
  }
  return spec;
}

absl::Status ValidateModelInputs(const ModelSpec& spec, int64_t num_dense_params,
                                 const ModelInputs& in) {
  if (in.batch_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("batch_size is ", in.batch_size, ", want > 0"));
  }
  if (absl::Status s = CheckFeatures(spec, in); !s.ok()) return s;
  if (static_cast<int64_t>(in.dense_params.size()) != num_dense_params) {
    return absl::InvalidArgumentError(absl::StrCat(
        in.dense_params.size(), " dense parameters, the model has ", num_dense_params));
  }
  if (in.tables.size() != spec.tables.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(in.tables.size(), " tables of rows, the model reads ", spec.tables.size()));
  }
  for (size_t t = 0; t < spec.tables.size(); ++t) {
    if (in.tables[t].rows.size() % spec.tables[t].dim != 0) {
      return absl::InvalidArgumentError(
          absl::StrCat("table \"", spec.tables[t].name, "\": ", in.tables[t].rows.size(),
                       " floats is not a whole number of rows of dim ", spec.tables[t].dim));
    }
  }
  if (in.fields.size() != spec.fields.size()) {
    return absl::InvalidArgumentError(absl::StrCat(in.fields.size(), " field bags, the model has ",
                                                   spec.fields.size(), " fields"));
  }
  for (size_t f = 0; f < spec.fields.size(); ++f) {
    if (absl::Status s = CheckFieldBag(spec, in, static_cast<int>(f)); !s.ok()) return s;
  }
  return CheckParams(spec, in);
}

absl::StatusOr<StepResult> Model::ForwardBackward(const ModelInputs& in, bool backward) {
  StepResult result;
  absl::Status s = ForwardBackward(in, backward, &result);
  if (!s.ok()) return s;
  return result;
}

}  // namespace shardps

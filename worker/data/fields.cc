#include "worker/data/fields.h"

#include <algorithm>
#include <set>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardps {
namespace data {
namespace {

const TableConfig* FindSparseTable(const JobConfig& config, const std::string& name) {
  for (const TableConfig& t : config.tables()) {
    if (t.name() == name) {
      const bool sparse =
          t.kind() == TableConfig::SPARSE || t.kind() == TableConfig::KIND_UNSPECIFIED;
      return sparse ? &t : nullptr;
    }
  }
  return nullptr;
}

absl::StatusOr<std::vector<FieldSpec>> DefaultFields(const JobConfig& config) {
  const std::string& wide = config.model().wide_table();
  const TableConfig* table = nullptr;
  for (const TableConfig& t : config.tables()) {
    if ((t.kind() == TableConfig::SPARSE || t.kind() == TableConfig::KIND_UNSPECIFIED) &&
        t.name() != wide) {
      table = &t;
      break;
    }
  }
  if (table == nullptr) {
    return absl::FailedPreconditionError(
        "fields: none configured and the job has no SPARSE table to map the "
        "26 categorical columns to");
  }
  const int first = 1 + NumDense(config.data());
  std::vector<FieldSpec> fields(kCriteoNumCategorical);
  for (int i = 0; i < kCriteoNumCategorical; ++i) {
    fields[i].name = absl::StrCat("C", i + 1);
    fields[i].column = first + i;
    fields[i].table = table->name();
    fields[i].table_id = table->id();
  }
  // The first-order term (model.wide_table): the same columns again.
  if (const TableConfig* w = wide.empty() ? nullptr : FindSparseTable(config, wide)) {
    for (int i = 0; i < kCriteoNumCategorical; ++i) {
      FieldSpec f;
      f.name = absl::StrCat("W", i + 1);
      f.column = first + i;
      f.table = w->name();
      f.table_id = w->id();
      fields.push_back(std::move(f));
    }
  }
  return fields;
}

}  // namespace

int NumDense(const DataConfig& data) {
  return data.num_dense() == 0 ? kCriteoNumDense : static_cast<int>(data.num_dense());
}

int NumColumns(const DataConfig& data, const std::vector<FieldSpec>& fields,
               bool fields_configured) {
  const int criteo = 1 + NumDense(data) + kCriteoNumCategorical;
  if (data.format() != DataConfig::TSV_MULTIHOT || !fields_configured) {
    return criteo;
  }
  int last = NumDense(data);
  for (const FieldSpec& f : fields) last = std::max(last, f.column);
  return last + 1;
}

absl::StatusOr<std::vector<FieldSpec>> ResolveFields(const JobConfig& config) {
  if (config.fields_size() == 0) return DefaultFields(config);
  const DataConfig& data = config.data();
  const int first = 1 + NumDense(data);
  const int last =
      data.format() == DataConfig::TSV_MULTIHOT ? (1 << 20) : first + kCriteoNumCategorical - 1;
  std::vector<FieldSpec> fields;
  std::set<std::string> names;
  for (int i = 0; i < config.fields_size(); ++i) {
    const FieldConfig& f = config.fields(i);
    const std::string where = absl::StrCat("fields[", i, "] (\"", f.name(), "\")");
    if (f.name().empty()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".name: is empty"));
    }
    if (!names.insert(f.name()).second) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".name: is used by another field"));
    }
    if (static_cast<int>(f.column()) < first || static_cast<int>(f.column()) > last) {
      return absl::InvalidArgumentError(absl::StrCat(where, ".column: ", f.column(),
                                                     " is not a categorical column (", first, "..",
                                                     last, ")"));
    }
    const TableConfig* t = FindSparseTable(config, f.table());
    if (t == nullptr) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ".table: \"", f.table(), "\" is not a SPARSE table of the job"));
    }
    FieldSpec spec;
    spec.name = f.name();
    spec.column = static_cast<int>(f.column());
    spec.table = t->name();
    spec.table_id = t->id();
    spec.pooling = f.pooling();
    fields.push_back(std::move(spec));
  }
  return fields;
}

}  // namespace data
}  // namespace shardps

// Which TSV columns feed which embedding table, and how a categorical value
// becomes a uint64 key (docs/design.md, "Worker data and models").
//
// Columns of a line: 0 is the label, 1..num_dense are integer features, and
// the categorical columns follow (Criteo: 26 of them, columns 14..39).
//
// Keys. A categorical value is 1 to 16 hex digits (Criteo writes 8), read as
// an unsigned integer v. Field f (its 0-based index in the ResolveFields list,
// not its column) maps v to
//
//   CategoricalKey(f, v) = Mix64(Mix64(f + 0x9e3779b97f4a7c15) ^ v)
//
// with shardps::Mix64 (common/partition.h): a bijection of v for a fixed
// field, so ids of one field never collide, and fields sharing a table get
// unrelated key streams. An empty (missing) value maps to the per-field key
//
//   MissingKey(f) = CategoricalKey(f, 0xffffffffffffffff)
//
// i.e. the 16-digit value ffffffffffffffff reads as "missing" (Criteo ids have
// 8 digits, so this never happens there). These functions are frozen: trained
// embeddings are keyed by them.
//
// Thread-safety: pure functions.
#ifndef SHARDPS_WORKER_DATA_FIELDS_H_
#define SHARDPS_WORKER_DATA_FIELDS_H_

#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partition.h"
#include "proto/config.pb.h"

namespace shardps {
namespace data {

inline constexpr int kCriteoNumDense = 13;
inline constexpr int kCriteoNumCategorical = 26;
inline constexpr uint64_t kMissingValue = ~uint64_t{0};

// CategoricalKey split in two, for callers that hoist the per-field part.
inline uint64_t CategoricalKeySalt(uint32_t field) {
  return Mix64(uint64_t{field} + 0x9e3779b97f4a7c15ULL);
}
inline uint64_t SaltedKey(uint64_t salt, uint64_t value) { return Mix64(salt ^ value); }
inline uint64_t CategoricalKey(uint32_t field, uint64_t value) {
  return SaltedKey(CategoricalKeySalt(field), value);
}
inline uint64_t MissingKey(uint32_t field) { return CategoricalKey(field, kMissingValue); }

// The dense transform: log(1 + max(x, 0)). A missing integer reads as 0.
inline float DenseTransform(int64_t x) {
  return x > 0 ? static_cast<float>(std::log1p(static_cast<double>(x))) : 0.0f;
}

// One categorical field after resolving the config.
struct FieldSpec {
  std::string name;   // "C1".."C26" by default.
  int column = 0;     // 0-based TSV column.
  std::string table;  // A SPARSE table of the job.
  uint32_t table_id = 0;
  FieldConfig::Pooling pooling = FieldConfig::SUM;
};

// num_dense of a data config (0 means the default, 13).
int NumDense(const DataConfig& data);

// The number of TSV columns a line of `data`'s format must have, given the
// resolved fields: CRITEO lines have 1 + num_dense + 26 columns; TSV_MULTIHOT
// lines have 1 + num_dense + 26 columns when the config has no fields, and
// otherwise end with the highest configured column.
int NumColumns(const DataConfig& data, const std::vector<FieldSpec>& fields,
               bool fields_configured);

// Resolves `config.fields` into the field list the reader delivers, in order
// (the index in this list is the field index of CategoricalKey). With no
// fields, the 26 categorical columns map to the first SPARSE table, named
// C1..C26 (with model.wide_table: the first other one, and the columns map
// to the wide table as well, as W1..W26). INVALID_ARGUMENT (naming fields[i]) if a field names no
// SPARSE table, has an empty or duplicate name, or a column outside the categorical columns
// (CRITEO: 1 + num_dense .. num_dense + 26); FAILED_PRECONDITION if there are no fields and no
// SPARSE table.
absl::StatusOr<std::vector<FieldSpec>> ResolveFields(const JobConfig& config);

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_FIELDS_H_

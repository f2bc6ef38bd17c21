// Parses one TSV line of the Criteo format (or its multi-hot variant) and
// appends the example to a Batch.
//
// Accepted syntax, per column:
//   label        "0" or "1" (anything else, including empty, is malformed)
//   integer      empty (missing -> 0), or -?[0-9]+ fitting in int64
//   categorical  empty (missing -> MissingKey), or 1..16 hex digits, either
//                case; TSV_MULTIHOT also accepts a comma-separated list of
//                them ("a1,b2,c3", no empty items), delivered as one bag.
// The line must have exactly `num_columns` tab-separated columns; one
// trailing '\r' (CRLF files) is ignored. Categorical columns that feed no
// field are counted but not parsed.
//
// Thread-compatible: Parse uses scratch space of the parser, so give each
// thread its own parser. Cheap to copy.
#ifndef SHARDPS_WORKER_DATA_LINE_PARSER_H_
#define SHARDPS_WORKER_DATA_LINE_PARSER_H_

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"
#include "worker/data/fields.h"

namespace shardps {
namespace data {

class LineParser {
 public:
  // `fields` are the resolved fields (their columns must be in
  // [1 + num_dense, num_columns)); the parser keeps what it needs of them.
  LineParser(DataConfig::Format format, int num_dense, int num_columns,
             const std::vector<FieldSpec>& fields);

  // Appends the example of `line` (without its '\n') to `batch`, whose
  // Reset() must have been called with this parser's num_dense() and
  // num_fields(). On a malformed line returns INVALID_ARGUMENT saying which
  // column is wrong and why, and leaves `batch` as it was.
  absl::Status Parse(absl::string_view line, Batch* batch);

  int num_dense() const { return num_dense_; }
  int num_fields() const { return num_fields_; }
  int num_columns() const { return num_columns_; }

 private:
  absl::Status ParseColumns(Batch* batch);
  absl::Status ParseCategorical(int column, absl::string_view text, Batch* batch);

  bool multi_hot_;
  int num_dense_;
  int num_columns_;
  int num_fields_;
  // For each column >= 1 + num_dense: the fields it feeds.
  std::vector<std::vector<uint32_t>> column_fields_;
  std::vector<uint64_t> field_salt_;  // CategoricalKeySalt(f).
  const float* transform_table_;      // Shared, immutable.
  // Scratch: the columns of the line being parsed.
  std::vector<absl::string_view> columns_;
};

// Parses -?[0-9]+ into int64. False on anything else or on overflow.
bool ParseInt64(absl::string_view text, int64_t* out);
// Parses 1..16 hex digits. False on anything else.
bool ParseHex64(absl::string_view text, uint64_t* out);

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_LINE_PARSER_H_

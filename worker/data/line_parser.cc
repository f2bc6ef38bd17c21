#include "worker/data/line_parser.h"

#include <cstring>
#include <limits>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {
namespace data {
namespace {

// Up to 20 bytes of `text`, quoted and escaped, for error messages.
std::string Quote(absl::string_view text) {
  const bool long_text = text.size() > 20;
  return absl::StrCat("'", absl::CHexEscape(text.substr(0, 20)), long_text ? "...'" : "'");
}

// Hex digit values by byte; 0xff for non-digits.
struct HexTable {
  uint8_t value[256];
  constexpr HexTable() : value() {
    for (int c = 0; c < 256; ++c) {
      value[c] = c >= '0' && c <= '9'   ? c - '0'
                 : c >= 'a' && c <= 'f' ? c - 'a' + 10
                 : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                        : 0xff;
    }
  }
};
constexpr HexTable kHex;

// DenseTransform of 0..kTableSize-1, precomputed: counts are mostly small, and
// log1p dominates parsing otherwise. Same values as DenseTransform.
constexpr int64_t kTableSize = 4096;
const float* TransformTable() {
  static const float* const table = [] {
    float* t = new float[kTableSize];
    for (int64_t x = 0; x < kTableSize; ++x) t[x] = DenseTransform(x);
    return t;
  }();
  return table;
}

}  // namespace

bool ParseInt64(absl::string_view text, int64_t* out) {
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (negative) i = 1;
  if (i == text.size()) return false;
  // Accumulate as a negative number: its range holds INT64_MIN.
  constexpr int64_t kMin = std::numeric_limits<int64_t>::min();
  int64_t value = 0;
  for (; i < text.size(); ++i) {
    const unsigned d = static_cast<unsigned char>(text[i]) - '0';
    if (d > 9) return false;
    if (value < (kMin + static_cast<int64_t>(d)) / 10) return false;
    value = value * 10 - static_cast<int64_t>(d);
  }
  if (!negative) {
    if (value == kMin) return false;
    value = -value;
  }
  *out = value;
  return true;
}

bool ParseHex64(absl::string_view text, uint64_t* out) {
  if (text.empty() || text.size() > 16) return false;
  uint64_t value = 0;
  uint8_t bad = 0;
  for (char c : text) {
    const uint8_t d = kHex.value[static_cast<unsigned char>(c)];
    bad |= d;
    value = (value << 4) | (d & 15);
  }
  if (bad & 0xf0) return false;
  *out = value;
  return true;
}

LineParser::LineParser(DataConfig::Format format, int num_dense, int num_columns,
                       const std::vector<FieldSpec>& fields)
    : multi_hot_(format == DataConfig::TSV_MULTIHOT),
      num_dense_(num_dense),
      num_columns_(num_columns),
      num_fields_(static_cast<int>(fields.size())),
      column_fields_(num_columns),
      transform_table_(TransformTable()) {
  for (size_t f = 0; f < fields.size(); ++f) {
    CHECK_GE(fields[f].column, 1 + num_dense) << fields[f].name;
    CHECK_LT(fields[f].column, num_columns) << fields[f].name;
    column_fields_[fields[f].column].push_back(static_cast<uint32_t>(f));
    field_salt_.push_back(CategoricalKeySalt(static_cast<uint32_t>(f)));
  }
  columns_.reserve(num_columns);
}

absl::Status LineParser::Parse(absl::string_view line, Batch* batch) {
  if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
  columns_.clear();
  const char* p = line.data();
  const char* end = p + line.size();
  while (true) {
    const char* tab = static_cast<const char*>(std::memchr(p, '\t', end - p));
    if (tab == nullptr) {
      columns_.emplace_back(p, end - p);
      break;
    }
    columns_.emplace_back(p, tab - p);
    p = tab + 1;
    if (static_cast<int>(columns_.size()) > num_columns_) break;
  }
  if (static_cast<int>(columns_.size()) != num_columns_) {
    const bool more = static_cast<int>(columns_.size()) > num_columns_;
    return absl::InvalidArgumentError(
        absl::StrCat("has ", more ? "more than " : "", more ? num_columns_ : columns_.size(),
                     " tab-separated columns, expected ", num_columns_));
  }
  absl::Status status = ParseColumns(batch);
  if (!status.ok()) {
    batch->Truncate();
    return status;
  }
  ++batch->size;
  return absl::OkStatus();
}

absl::Status LineParser::ParseColumns(Batch* batch) {
  const absl::string_view label = columns_[0];
  if (label.size() != 1 || (label[0] != '0' && label[0] != '1')) {
    return absl::InvalidArgumentError(absl::StrCat(
        "column 1 (label): ", label.empty() ? "is empty" : Quote(label) + " is not 0 or 1"));
  }
  batch->labels.push_back(label[0] == '1' ? 1.0f : 0.0f);
  for (int j = 1; j <= num_dense_; ++j) {
    int64_t x = 0;
    if (!columns_[j].empty() && !ParseInt64(columns_[j], &x)) {
      return absl::InvalidArgumentError(absl::StrCat(
          "column ", j + 1, " (I", j, "): ", Quote(columns_[j]), " is not an integer"));
    }
    batch->dense.push_back(x >= 0 && x < kTableSize ? transform_table_[x] : DenseTransform(x));
  }
  for (int c = 1 + num_dense_; c < num_columns_; ++c) {
    if (column_fields_[c].empty()) continue;
    absl::Status status = ParseCategorical(c, columns_[c], batch);
    if (!status.ok()) return status;
  }
  return absl::OkStatus();
}

absl::Status LineParser::ParseCategorical(int column, absl::string_view text, Batch* batch) {
  for (uint32_t f : column_fields_[column]) {
    SparseBag& bag = batch->fields[f];
    if (text.empty()) {
      bag.keys.push_back(SaltedKey(field_salt_[f], kMissingValue));
    } else {
      absl::string_view rest = text;
      while (true) {
        const size_t comma = multi_hot_ ? rest.find(',') : rest.npos;
        const absl::string_view item = rest.substr(0, comma);
        uint64_t value = 0;
        if (!ParseHex64(item, &value)) {
          return absl::InvalidArgumentError(
              absl::StrCat("column ", column + 1, ": ", Quote(text),
                           multi_hot_ ? " is not a comma-separated list of hex ids"
                                      : " is not a hex id (1-16 hex digits)"));
        }
        bag.keys.push_back(SaltedKey(field_salt_[f], value));
        if (comma == rest.npos) break;
        rest.remove_prefix(comma + 1);
      }
    }
    bag.offsets.push_back(static_cast<int64_t>(bag.keys.size()));
  }
  return absl::OkStatus();
}

}  // namespace data
}  // namespace shardps

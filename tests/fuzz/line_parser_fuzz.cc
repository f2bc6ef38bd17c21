// Fuzz target: arbitrary text into the TSV line parser
// (worker/data/line_parser.h), both formats, and its number parsers.
//
// Input: the first byte picks a parser (mod 3); the rest is split at '\n'
// into lines, each parsed into one Batch:
//   0  CRITEO, 13 dense, 40 columns, the 26 default fields;
//   1  TSV_MULTIHOT, 2 dense, 6 columns, 4 fields (column 4 feeds two);
//   2  CRITEO with 2 fields (the other categorical columns are not parsed).
// Checked: a refused line is INVALID_ARGUMENT with a message and leaves the
// batch as it was; an accepted line adds exactly one example with a 0/1
// label, finite non-negative dense values and consistent bags. ParseInt64 and
// ParseHex64 agree with strtoll/strtoull on every line and column.
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "tests/fuzz/fuzz_target.h"
#include "worker/data/batch.h"
#include "worker/data/line_parser.h"

namespace shardps {
namespace fuzz {
namespace {

using data::Batch;
using data::FieldSpec;
using data::LineParser;

constexpr int kMaxLinesPerBatch = 64;

std::vector<FieldSpec> Fields(std::vector<int> columns) {
  std::vector<FieldSpec> fields(columns.size());
  for (size_t i = 0; i < columns.size(); ++i) fields[i].column = columns[i];
  return fields;
}

LineParser MakeParser(int which) {
  if (which == 1) {
    return LineParser(DataConfig::TSV_MULTIHOT, 2, 6, Fields({3, 4, 5, 4}));
  }
  if (which == 2) return LineParser(DataConfig::CRITEO, 13, 40, Fields({14, 39}));
  std::vector<int> columns;
  for (int c = 14; c < 40; ++c) columns.push_back(c);
  return LineParser(DataConfig::CRITEO, 13, 40, Fields(columns));
}

// Sizes of a batch, to compare before and after a refused line.
struct Shape {
  int size;
  size_t labels, dense;
  std::vector<size_t> offsets, keys;
  bool operator==(const Shape& o) const {
    return size == o.size && labels == o.labels && dense == o.dense && offsets == o.offsets &&
           keys == o.keys;
  }
};

Shape ShapeOf(const Batch& b) {
  Shape s{b.size, b.labels.size(), b.dense.size(), {}, {}};
  for (const data::SparseBag& bag : b.fields) {
    s.offsets.push_back(bag.offsets.size());
    s.keys.push_back(bag.keys.size());
  }
  return s;
}

void CheckAccepted(const Shape& before, const Batch& b) {
  FuzzCheck(b.size == before.size + 1, "accepted line adds one example");
  FuzzCheck(b.labels.size() == static_cast<size_t>(b.size), "labels size");
  FuzzCheck(b.labels.back() == 0.0f || b.labels.back() == 1.0f, "label 0/1");
  FuzzCheck(b.dense.size() == static_cast<size_t>(b.size) * b.num_dense, "dense size");
  for (int j = 0; j < b.num_dense; ++j) {
    const float x = b.dense[b.dense.size() - 1 - j];
    FuzzCheck(std::isfinite(x) && x >= 0, "dense finite and >= 0");
  }
  for (const data::SparseBag& bag : b.fields) {
    FuzzCheck(bag.offsets.size() == static_cast<size_t>(b.size) + 1, "offsets size");
    const int64_t n = bag.offsets[b.size] - bag.offsets[b.size - 1];
    FuzzCheck(n >= 1, "every bag has a key (missing -> MissingKey)");
    FuzzCheck(bag.offsets.back() == static_cast<int64_t>(bag.keys.size()), "offsets end at keys");
  }
}

bool MatchesInt64Syntax(absl::string_view s) {
  if (!s.empty() && s[0] == '-') s.remove_prefix(1);
  if (s.empty()) return false;
  for (char c : s) {
    if (!absl::ascii_isdigit(c)) return false;
  }
  return true;
}

bool MatchesHexSyntax(absl::string_view s) {
  if (s.empty() || s.size() > 16) return false;
  for (char c : s) {
    if (!absl::ascii_isxdigit(c)) return false;
  }
  return true;
}

// Differential check of the number parsers against the C library.
void CheckNumberParsers(absl::string_view text) {
  const std::string copy(text);
  int64_t i = 0;
  const bool int_ok = data::ParseInt64(text, &i);
  if (MatchesInt64Syntax(text)) {
    errno = 0;
    const long long want = std::strtoll(copy.c_str(), nullptr, 10);
    const bool fits = errno != ERANGE;
    FuzzCheck(int_ok == fits, "ParseInt64 accepts exactly what fits int64");
    FuzzCheck(!int_ok || i == want, "ParseInt64 value");
  } else {
    FuzzCheck(!int_ok, "ParseInt64 refuses non -?[0-9]+");
  }
  uint64_t h = 0;
  const bool hex_ok = data::ParseHex64(text, &h);
  FuzzCheck(hex_ok == MatchesHexSyntax(text), "ParseHex64 accepts 1..16 hex");
  FuzzCheck(!hex_ok || h == std::strtoull(copy.c_str(), nullptr, 16), "ParseHex64 value");
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  std::vector<std::string> criteo_cols = {"1"};
  for (int j = 0; j < 13; ++j) criteo_cols.push_back(std::to_string(j * 7 - 3));
  for (int f = 0; f < 26; ++f) {
    criteo_cols.push_back(f % 5 == 0 ? "" : (f % 2 ? "68fd1e64" : "A0B1"));
  }
  const std::string criteo = absl::StrJoin(criteo_cols, "\t");
  const std::string empty = "0" + std::string(39, '\t');
  return {
      std::string("\x00", 1) + criteo + "\n" + empty + "\r\n" + criteo,
      std::string("\x01", 1) + "1\t3\t\ta,b,c\t\tff\n0\t-1\t7\t1\t2,2\t3,4",
      std::string("\x02", 1) + criteo + "\n" + empty,
      std::string("\x00", 1) + "0\t9223372036854775807\t\t\t\t\t\t\t\t\t\t\t\t" +
          "\tffffffffffffffff" + std::string(25, '\t'),
  };
}

}  // namespace fuzz
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardps::fuzz;  // NOLINT
  if (size == 0) return 0;
  const int which = data[0] % 3;
  static LineParser parsers[3] = {MakeParser(0), MakeParser(1), MakeParser(2)};
  LineParser& parser = parsers[which];
  shardps::data::Batch batch;
  batch.Reset(parser.num_dense(), parser.num_fields());
  const absl::string_view text(reinterpret_cast<const char*>(data) + 1, size - 1);
  bool accepted = false;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    if (batch.size == kMaxLinesPerBatch) {
      batch.Reset(parser.num_dense(), parser.num_fields());
    }
    const Shape before = ShapeOf(batch);
    const absl::Status status = parser.Parse(line, &batch);
    if (status.ok()) {
      CheckAccepted(before, batch);
      accepted = true;
    } else {
      FuzzCheck(status.code() == absl::StatusCode::kInvalidArgument, "refusal is INVALID_ARGUMENT");
      FuzzCheck(!status.message().empty(), "refusal has a message");
      FuzzCheck(ShapeOf(batch) == before, "refused line leaves the batch");
    }
    CheckNumberParsers(line);
    for (absl::string_view column : absl::StrSplit(line, absl::ByAnyChar("\t,"))) {
      CheckNumberParsers(column);
    }
  }
  CountOutcome(accepted);
  return 0;
}

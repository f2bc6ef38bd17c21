#include "worker/data/line_parser.h"

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "gtest/gtest.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

std::vector<FieldSpec> DefaultFields() {
  std::vector<FieldSpec> fields(26);
  for (int i = 0; i < 26; ++i) fields[i].column = 14 + i;
  return fields;
}

class CriteoParserTest : public ::testing::Test {
 protected:
  CriteoParserTest() : parser_(DataConfig::CRITEO, 13, 40, DefaultFields()) {
    batch_.Reset(13, 26);
  }
  absl::Status Parse(const std::string& line) { return parser_.Parse(line, &batch_); }
  // A line with column `col` replaced by `value`.
  static std::string With(int col, const std::string& value) {
    std::vector<std::string> cols = absl::StrSplit(testing::CriteoLine(1, 5), '\t');
    cols[col] = value;
    return absl::StrJoin(cols, "\t");
  }
  void ExpectError(const std::string& line, const std::string& message) {
    const absl::Status status = Parse(line);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << line;
    EXPECT_NE(status.message().find(message), std::string::npos) << status;
    EXPECT_EQ(batch_.size, 0);
    EXPECT_TRUE(batch_.labels.empty());
    EXPECT_TRUE(batch_.dense.empty());
    for (const SparseBag& bag : batch_.fields) {
      EXPECT_EQ(bag.offsets.size(), 1u);
      EXPECT_TRUE(bag.keys.empty());
    }
  }

  LineParser parser_;
  Batch batch_;
};

TEST_F(CriteoParserTest, ParsesAFullLine) {
  ASSERT_TRUE(Parse(testing::CriteoLine(1, 5)).ok());
  ASSERT_EQ(batch_.size, 1);
  EXPECT_EQ(batch_.labels[0], 1.0f);
  ASSERT_EQ(batch_.dense.size(), 13u);
  for (int j = 0; j < 13; ++j) EXPECT_FLOAT_EQ(batch_.dense[j], std::log1p(5.0 + j));
  for (int f = 0; f < 26; ++f) {
    EXPECT_EQ(batch_.fields[f].offsets, (std::vector<int64_t>{0, 1}));
    EXPECT_EQ(batch_.fields[f].keys[0], CategoricalKey(f, 5 * 32 + f));
  }
}

TEST_F(CriteoParserTest, EmptyFieldsAreMissingValues) {
  const std::string line = "0" + std::string(39, '\t');
  ASSERT_TRUE(Parse(line).ok());
  EXPECT_EQ(batch_.labels[0], 0.0f);
  for (float x : batch_.dense) EXPECT_EQ(x, 0.0f);
  for (int f = 0; f < 26; ++f) EXPECT_EQ(batch_.fields[f].keys[0], MissingKey(f));
}

TEST_F(CriteoParserTest, NegativeIntegersBecomeZero) {
  ASSERT_TRUE(Parse(With(2, "-3")).ok());
  EXPECT_EQ(batch_.dense[1], 0.0f);
  ASSERT_TRUE(Parse(With(2, "-9223372036854775808")).ok());
  ASSERT_TRUE(Parse(With(2, "9223372036854775807")).ok());
  EXPECT_FLOAT_EQ(batch_.dense[2 * 13 + 1], std::log1p(9223372036854775807.0));
}

TEST_F(CriteoParserTest, HexIsCaseInsensitiveAndUpTo16Digits) {
  ASSERT_TRUE(Parse(With(14, "68FD1e64")).ok());
  EXPECT_EQ(batch_.fields[0].keys[0], CategoricalKey(0, 0x68fd1e64));
  ASSERT_TRUE(Parse(With(14, "a")).ok());
  EXPECT_EQ(batch_.fields[0].keys[1], CategoricalKey(0, 0xa));
  ASSERT_TRUE(Parse(With(14, "0123456789abcdef")).ok());
  EXPECT_EQ(batch_.fields[0].keys[2], CategoricalKey(0, 0x0123456789abcdefULL));
}

TEST_F(CriteoParserTest, CrlfIsAccepted) {
  ASSERT_TRUE(Parse(testing::CriteoLine(0, 1) + "\r").ok());
  EXPECT_EQ(batch_.fields[25].keys[0], CategoricalKey(25, 32 + 25));
  // The \r goes with the last column, also when it is empty.
  ASSERT_TRUE(Parse(With(39, "") + "\r").ok());
  EXPECT_EQ(batch_.fields[25].keys[1], MissingKey(25));
}

TEST_F(CriteoParserTest, MissingOrBadLabelIsAnError) {
  ExpectError(With(0, ""), "column 1 (label): is empty");
  ExpectError(With(0, "2"), "column 1 (label): '2' is not 0 or 1");
  ExpectError(With(0, "0.5"), "is not 0 or 1");
  ExpectError(With(0, " 1"), "is not 0 or 1");
}

TEST_F(CriteoParserTest, WrongFieldCountIsAnError) {
  const std::string line = testing::CriteoLine(1, 5);
  ExpectError(line.substr(0, line.rfind('\t')), "has 39 tab-separated columns, expected 40");
  ExpectError(line + "\tabc", "has more than 40 tab-separated columns, expected 40");
  ExpectError("", "has 1 tab-separated columns");
  ExpectError("1 2 3", "has 1 tab-separated columns");
}

TEST_F(CriteoParserTest, BadIntegersAreErrors) {
  ExpectError(With(3, "abc"), "column 4 (I3): 'abc' is not an integer");
  ExpectError(With(3, "1.5"), "is not an integer");
  ExpectError(With(3, "-"), "is not an integer");
  ExpectError(With(3, "+4"), "is not an integer");
  ExpectError(With(3, " 4"), "is not an integer");
  ExpectError(With(3, "9223372036854775808"), "is not an integer");
}

TEST_F(CriteoParserTest, BadHexIsAnError) {
  ExpectError(With(20, "68fd1e6g"), "column 21: '68fd1e6g' is not a hex id");
  ExpectError(With(20, "0123456789abcdef0"), "is not a hex id");
  ExpectError(With(20, "a,b"), "is not a hex id");  // Multi-hot is not Criteo.
  ExpectError(With(39, "zz\r"), "column 40");
}

TEST_F(CriteoParserTest, ABadLineLeavesEarlierExamplesIntact) {
  ASSERT_TRUE(Parse(testing::CriteoLine(1, 1)).ok());
  EXPECT_FALSE(Parse(With(39, "xyz")).ok());  // Fails after 25 fields filled.
  ASSERT_TRUE(Parse(testing::CriteoLine(0, 2)).ok());
  EXPECT_EQ(batch_.size, 2);
  EXPECT_EQ(batch_.labels, (std::vector<float>{1, 0}));
  EXPECT_EQ(batch_.dense.size(), 26u);
  for (int f = 0; f < 26; ++f) {
    EXPECT_EQ(batch_.fields[f].offsets, (std::vector<int64_t>{0, 1, 2}));
    EXPECT_EQ(batch_.fields[f].keys[1], CategoricalKey(f, 2 * 32 + f));
  }
}

TEST(LineParserTest, UnusedColumnsAreNotParsed) {
  std::vector<FieldSpec> fields(1);
  fields[0].column = 14;
  LineParser parser(DataConfig::CRITEO, 13, 40, fields);
  Batch batch;
  batch.Reset(13, 1);
  std::vector<std::string> cols = absl::StrSplit(testing::CriteoLine(1, 5), '\t');
  cols[30] = "not hex";
  ASSERT_TRUE(parser.Parse(absl::StrJoin(cols, "\t"), &batch).ok());
  EXPECT_EQ(batch.fields[0].keys[0], CategoricalKey(0, 5 * 32));
}

TEST(LineParserTest, MultiHotFieldsBecomeBags) {
  // label, 2 dense, 3 categorical columns; column 4 feeds two fields.
  std::vector<FieldSpec> fields(4);
  fields[0].column = 3;
  fields[1].column = 4;
  fields[2].column = 5;
  fields[3].column = 4;
  LineParser parser(DataConfig::TSV_MULTIHOT, 2, 6, fields);
  Batch batch;
  batch.Reset(2, 4);
  ASSERT_TRUE(parser.Parse("1\t3\t\ta,b,c\t\tff", &batch).ok());
  ASSERT_TRUE(parser.Parse("0\t-1\t7\t1\t2,2\t3,4", &batch).ok());
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(batch.fields[0].offsets, (std::vector<int64_t>{0, 3, 4}));
  EXPECT_EQ(batch.fields[0].keys,
            (std::vector<uint64_t>{CategoricalKey(0, 0xa), CategoricalKey(0, 0xb),
                                   CategoricalKey(0, 0xc), CategoricalKey(0, 1)}));
  EXPECT_EQ(batch.fields[1].offsets, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(batch.fields[1].keys,
            (std::vector<uint64_t>{MissingKey(1), CategoricalKey(1, 2), CategoricalKey(1, 2)}));
  EXPECT_EQ(batch.fields[3].keys,
            (std::vector<uint64_t>{MissingKey(3), CategoricalKey(3, 2), CategoricalKey(3, 2)}));
  EXPECT_EQ(batch.fields[2].offsets, (std::vector<int64_t>{0, 1, 3}));
  EXPECT_EQ(batch.dense, (std::vector<float>{std::log1p(3.0f), 0, 0, std::log1p(7.0f)}));
  for (const char* bad : {"1\t\t\ta,,b\t\t", "1\t\t\ta,\t\t", "1\t\t\t,a\t\t", "1\t\t\ta,x\t\t"}) {
    const absl::Status status = parser.Parse(bad, &batch);
    EXPECT_NE(status.message().find("is not a comma-separated list of hex ids"), std::string::npos)
        << bad << ": " << status;
  }
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(batch.fields[0].keys.size(), 4u);
}

TEST(LineParserTest, NumberParsers) {
  int64_t x;
  EXPECT_TRUE(ParseInt64("0", &x));
  EXPECT_EQ(x, 0);
  EXPECT_TRUE(ParseInt64("-17", &x));
  EXPECT_EQ(x, -17);
  EXPECT_FALSE(ParseInt64("", &x));
  EXPECT_FALSE(ParseInt64("1e3", &x));
  uint64_t h;
  EXPECT_TRUE(ParseHex64("ffffffffffffffff", &h));
  EXPECT_EQ(h, ~uint64_t{0});
  EXPECT_FALSE(ParseHex64("", &h));
  EXPECT_FALSE(ParseHex64("-1", &h));
}

}  // namespace
}  // namespace data
}  // namespace shardps

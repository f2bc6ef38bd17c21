#include "worker/data/criteo_reader.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "google/protobuf/text_format.h"
#include "gtest/gtest.h"
#include "worker/data/reader_test_util.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::CriteoLine;
using testing::CriteoLines;
using testing::MakeReader;
using testing::Options;
using testing::ReadIds;
using testing::WarningSink;
using testing::WriteFile;
using testing::WriteGzip;

TEST(CriteoReaderTest, ReadsPlainAndGzipInOrder) {
  ReaderOptions o =
      Options({WriteFile("r1.tsv", CriteoLines(0, 10)), WriteGzip("r2.gz", {CriteoLines(10, 5)})});
  auto reader = MakeReader(o);
  std::vector<int> expected(15);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(ReadIds(reader.get(), 4), expected);
  Batch batch;
  EXPECT_FALSE(*reader->NextBatch(4, &batch));
  EXPECT_EQ(batch.size, 0);
}

TEST(CriteoReaderTest, BatchesAreFullExceptTheLast) {
  auto reader = MakeReader(Options({WriteFile("b1.tsv", CriteoLines(0, 3)), WriteFile("b2.tsv", ""),
                                    WriteFile("b3.tsv", CriteoLines(3, 8))}));
  Batch batch;
  std::vector<int> sizes;
  while (*reader->NextBatch(4, &batch)) {
    sizes.push_back(batch.size);
    EXPECT_EQ(batch.labels.size(), static_cast<size_t>(batch.size));
    EXPECT_EQ(batch.dense.size(), static_cast<size_t>(batch.size) * 13);
    for (const SparseBag& bag : batch.fields) {
      EXPECT_EQ(bag.offsets.size(), static_cast<size_t>(batch.size) + 1);
    }
  }
  EXPECT_EQ(sizes, (std::vector<int>{4, 4, 3}));
  EXPECT_EQ(reader->NextBatch(0, &batch).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(CriteoReaderTest, BadLinesAreReportedAndTheBudgetEnforced) {
  std::string content;
  for (int i = 0; i < 12; ++i) {
    std::string line = CriteoLine(i % 2, i);
    if (i == 2) line = line.substr(0, line.rfind('\t'));     // 39 columns
    if (i == 6) line[0] = 'x';                               // bad label
    if (i == 9) line.replace(line.rfind('\t') + 1, 1, "g");  // bad hex
    absl::StrAppend(&content, line, "\n");
  }
  const std::string path = WriteFile("bad.tsv", content);
  WarningSink sink;
  google::AddLogSink(&sink);
  ReaderOptions o = Options({path});
  o.error_budget = 3;
  auto reader = MakeReader(o);
  EXPECT_EQ(ReadIds(reader.get(), 4), (std::vector<int>{0, 1, 3, 4, 5, 7, 8, 10, 11}));
  EXPECT_EQ(reader->bad_lines(), 3u);
  google::RemoveLogSink(&sink);
  ASSERT_EQ(sink.lines.size(), 3u);
  EXPECT_NE(sink.lines[0].find(path + ":3: has 39 tab-separated columns"), std::string::npos)
      << sink.lines[0];
  EXPECT_NE(sink.lines[1].find(path + ":7: column 1 (label)"), std::string::npos);
  EXPECT_NE(sink.lines[2].find(path + ":10: column 40"), std::string::npos);

  o.error_budget = 2;
  reader = MakeReader(o);
  Batch batch;
  absl::StatusOr<bool> more = true;
  while (more.ok() && *more) more = reader->NextBatch(4, &batch);
  ASSERT_EQ(more.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(more.status().message().find(path + ":10: column 40"), std::string::npos)
      << more.status();
  EXPECT_NE(more.status().message().find("3 malformed lines exceed the error budget (2"),
            std::string::npos)
      << more.status();
  // It stays failed.
  EXPECT_EQ(reader->NextBatch(4, &batch).status(), more.status());
}

TEST(CriteoReaderTest, BadPositionsAreRefused) {
  const std::string path = WriteFile("seek.tsv", CriteoLines(0, 3));
  ReaderOptions o = Options({path});
  o.shuffle_buffer = 2;
  auto reader = MakeReader(o);
  ReaderPosition p;
  p.epoch = 2;
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.epoch = 1;  // The end: legal.
  EXPECT_TRUE(reader->Seek(p).ok());
  Batch batch;
  EXPECT_FALSE(*reader->NextBatch(4, &batch));
  p.taken = 1;  // Nothing to take from at the end.
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p = ReaderPosition();
  p.unit = 1;  // The epoch's end (one unit): legal.
  EXPECT_TRUE(reader->Seek(p).ok());
  p.unit = 2;
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.unit = 0;
  p.line = 1;
  p.offset = 5;  // Not a line start.
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.offset = 0;  // line without offset
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.line = 0;
  p.taken = 2;  // The window from line 0 holds 2 lines: taking both is its end.
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.taken = 1;
  EXPECT_TRUE(reader->Seek(p).ok());
  EXPECT_EQ(reader->position(), p);
  EXPECT_EQ(DecodePosition("v2 epoch=1").status().code(), absl::StatusCode::kInvalidArgument);
  // The line-stripe reader's positions are refused, saying so.
  const auto v1 = DecodePosition("v1 epoch=1 file=0 line=0 offset=0 bad=0");
  EXPECT_EQ(v1.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(v1.status().message().find("older line-stripe reader"), std::string::npos);
  p = ReaderPosition{3, 1, 4, 100, 5, 9, 77};
  EXPECT_EQ(EncodePosition(p), "v2 epoch=3 unit=1 line=4 offset=100 taken=5 bad=9 samples=77");
  EXPECT_EQ(*DecodePosition(EncodePosition(p)), p);
  // A position written before samples were recorded decodes with 0.
  p.samples = 0;
  EXPECT_EQ(*DecodePosition("v2 epoch=3 unit=1 line=4 offset=100 taken=5 bad=9"), p);
  EXPECT_EQ(
      DecodePosition("v2 epoch=3 unit=1 line=4 offset=100 taken=5 bad=9 taken=3").status().code(),
      absl::StatusCode::kInvalidArgument);
}

// A reader counts the samples it returned, and a reader moved to a batch's
// end position goes on counting from there.
TEST(CriteoReaderTest, PositionsCountTheSamplesReturnedSoFar) {
  const std::string path = WriteFile("count.tsv", CriteoLines(0, 10));
  auto reader = MakeReader(Options({path}));
  Batch batch;
  ASSERT_TRUE(*reader->NextBatch(4, &batch));
  EXPECT_EQ(batch.end_position.samples, 4u);
  ASSERT_TRUE(*reader->NextBatch(4, &batch));
  const ReaderPosition after8 = batch.end_position;
  EXPECT_EQ(after8.samples, 8u);
  auto resumed = MakeReader(Options({path}));
  ASSERT_TRUE(resumed->Seek(after8).ok());
  ASSERT_TRUE(*resumed->NextBatch(4, &batch));
  EXPECT_EQ(batch.size, 2);
  EXPECT_EQ(batch.end_position.samples, 10u);
}

TEST(CriteoReaderTest, CreateValidatesOptions) {
  const std::string path = WriteFile("valid.tsv", CriteoLines(0, 3));
  ReaderOptions o = Options({path});
  o.rank = 3;
  o.num_workers = 3;
  EXPECT_EQ(CriteoReader::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options({path, testing::TempPath("missing.tsv")});
  auto reader = CriteoReader::Create(o);
  EXPECT_EQ(reader.status().code(), absl::StatusCode::kNotFound);
  EXPECT_NE(reader.status().message().find("missing.tsv"), std::string::npos);
  o = Options({});
  EXPECT_EQ(CriteoReader::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options({path});
  o.num_columns = 13;
  o.fields.clear();
  EXPECT_EQ(CriteoReader::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options({path});
  o.fields[3].column = 5;  // A dense column.
  EXPECT_EQ(CriteoReader::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options({path});
  o.shuffle_buffer = kMaxShuffleBuffer + 1;
  EXPECT_EQ(CriteoReader::Create(o).status().code(), absl::StatusCode::kInvalidArgument);
  o = Options({path, testing::TempPath("")});  // A directory.
  EXPECT_EQ(CriteoReader::Create(o).status().code(), absl::StatusCode::kFailedPrecondition);
}

TEST(CriteoReaderTest, MultiHotFromAJobConfig) {
  JobConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    tables { id: 1 name: "tags" dim: 4 }
    tables { id: 2 name: "users" dim: 4 }
    fields { name: "user" column: 3 table: "users" }
    fields { name: "tags" column: 4 table: "tags" pooling: MEAN }
    data { format: TSV_MULTIHOT num_dense: 2 error_budget: 5 shuffle_buffer: 1 }
    training { epochs: 2 shuffle_seed: 9 }
  )pb",
                                                            &config));
  const std::string path =
      WriteFile("multi.tsv", "1\t4\t-2\tab\t1,2,3\n0\t\t\t\t\n1\t1\t1\tcd\tff\n");
  auto options = ReaderOptionsFromConfig(config, {path}, 0, 1, /*training=*/true);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->num_columns, 5);
  EXPECT_EQ(options->epochs, 2u);
  EXPECT_TRUE(options->shuffle);
  EXPECT_EQ(options->error_budget, 5u);
  EXPECT_EQ(options->shuffle_buffer, 1u);
  auto reader = MakeReader(*options);
  Batch batch;
  ASSERT_TRUE(*reader->NextBatch(3, &batch));
  ASSERT_EQ(batch.size, 3);
  EXPECT_EQ(batch.fields[0].offsets, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batch.fields[0].keys[0], CategoricalKey(0, 0xab));
  EXPECT_EQ(batch.fields[1].offsets, (std::vector<int64_t>{0, 3, 4, 5}));
  EXPECT_EQ(batch.fields[1].keys,
            (std::vector<uint64_t>{CategoricalKey(1, 1), CategoricalKey(1, 2), CategoricalKey(1, 3),
                                   MissingKey(1), CategoricalKey(1, 0xff)}));
  EXPECT_EQ(batch.dense,
            (std::vector<float>{std::log1p(4.0f), 0, 0, 0, std::log1p(1.0f), std::log1p(1.0f)}));
  ASSERT_TRUE(*reader->NextBatch(3, &batch));  // The second epoch (1).
  EXPECT_EQ(batch.end_position.epoch, 1u);
  EXPECT_FALSE(*reader->NextBatch(3, &batch));
  auto eval = ReaderOptionsFromConfig(config, {path}, 0, 1, /*training=*/false);
  EXPECT_EQ(eval->epochs, 1u);
  EXPECT_FALSE(eval->shuffle);
  EXPECT_EQ(eval->shuffle_buffer, 0u);
}

TEST(CriteoReaderTest, MovesToAnotherThread) {
  std::vector<std::string> files;
  for (int i = 0; i < 6; ++i) {
    files.push_back(WriteFile(absl::StrCat("six", i), CriteoLines(i * 10, 10)));
  }
  ReaderOptions o = Options(files);
  o.shuffle_buffer = 8;
  o.shuffle = true;
  o.epochs = 2;
  const std::vector<int> here = ReadIds(MakeReader(o).get());
  std::unique_ptr<CriteoReader> reader = MakeReader(o);
  Batch batch;
  ASSERT_TRUE(*reader->NextBatch(5, &batch));  // Started on this thread.
  std::vector<int> there;
  std::thread worker([r = std::move(reader), &there]() mutable { there = ReadIds(r.get()); });
  worker.join();
  EXPECT_EQ(there, std::vector<int>(here.begin() + 5, here.end()));
}

}  // namespace
}  // namespace data
}  // namespace shardps

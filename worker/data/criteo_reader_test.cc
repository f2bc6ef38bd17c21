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
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::CriteoLine;
using testing::CriteoLines;
using testing::WriteFile;
using testing::WriteGzip;

ReaderOptions Options(std::vector<std::string> files) {
  ReaderOptions o;
  o.files = std::move(files);
  for (int i = 0; i < 26; ++i) {
    FieldSpec f;
    f.name = absl::StrCat("C", i + 1);
    f.column = 14 + i;
    o.fields.push_back(f);
  }
  return o;
}

// The line id (the `id` of CriteoLine) of every example, in reading order.
std::vector<int> ReadIds(CriteoReader* reader, int batch_size = 7) {
  std::vector<int> ids;
  Batch batch;
  while (true) {
    auto more = reader->NextBatch(batch_size, &batch);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    for (int i = 0; i < batch.size; ++i) {
      // Field 0's value of line `id` is id * 32; dense[0] is log1p(id).
      ids.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i * 13]))));
      EXPECT_EQ(batch.fields[0].keys[i], CategoricalKey(0, ids.back() * 32));
    }
  }
  return ids;
}

std::unique_ptr<CriteoReader> MakeReader(ReaderOptions o) {
  auto reader = CriteoReader::Create(std::move(o));
  EXPECT_TRUE(reader.ok()) << reader.status();
  return std::move(*reader);
}

TEST(CriteoReaderTest, ReadsPlainAndGzipInOrder) {
  ReaderOptions o = Options({WriteFile("r1.tsv", CriteoLines(0, 10)),
                             WriteGzip("r2.gz", {CriteoLines(10, 5)})});
  auto reader = MakeReader(o);
  std::vector<int> expected(15);
  std::iota(expected.begin(), expected.end(), 0);
  EXPECT_EQ(ReadIds(reader.get(), 4), expected);
  Batch batch;
  EXPECT_FALSE(*reader->NextBatch(4, &batch));
  EXPECT_EQ(batch.size, 0);
}

TEST(CriteoReaderTest, BatchesAreFullExceptTheLast) {
  auto reader = MakeReader(Options({WriteFile("b1.tsv", CriteoLines(0, 3)),
                                    WriteFile("b2.tsv", ""),
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
  EXPECT_EQ(reader->NextBatch(0, &batch).status().code(),
            absl::StatusCode::kInvalidArgument);
}

// Reads with `workers` readers; every line id must come out exactly once.
void ExpectSplitCoversEveryLineOnce(const std::vector<std::string>& files,
                                    int total_lines, int workers, int stripe,
                                    bool all_busy = true) {
  std::multiset<int> seen;
  for (int rank = 0; rank < workers; ++rank) {
    ReaderOptions o = Options(files);
    o.rank = rank;
    o.num_workers = workers;
    o.stripe_lines = stripe;
    auto reader = MakeReader(o);
    const std::vector<int> ids = ReadIds(reader.get());
    if (all_busy) {
      EXPECT_GT(ids.size(), 0u) << "rank " << rank;
    }
    seen.insert(ids.begin(), ids.end());
  }
  ASSERT_EQ(seen.size(), static_cast<size_t>(total_lines));
  for (int id = 0; id < total_lines; ++id) EXPECT_EQ(seen.count(id), 1u) << id;
}

TEST(CriteoReaderTest, SplitByRankOverOneFile) {
  const std::string file = WriteFile("one.tsv", CriteoLines(0, 1000));
  ExpectSplitCoversEveryLineOnce({file}, 1000, 3, 7);
  // One stripe: one busy worker, the others get nothing.
  ExpectSplitCoversEveryLineOnce({file}, 1000, 3, 1024, /*all_busy=*/false);
  ExpectSplitCoversEveryLineOnce({WriteGzip("one.gz", {CriteoLines(0, 1000)})}, 1000,
                                 3, 10);
}

TEST(CriteoReaderTest, SplitByRankOverFiveFiles) {
  const int sizes[] = {100, 3, 0, 250, 47};
  std::vector<std::string> files;
  int first = 0;
  for (int i = 0; i < 5; ++i) {
    const std::string content = CriteoLines(first, sizes[i]);
    files.push_back(i % 2 ? WriteGzip(absl::StrCat("five", i), {content})
                          : WriteFile(absl::StrCat("five", i), content));
    first += sizes[i];
  }
  ExpectSplitCoversEveryLineOnce(files, first, 3, 1);
  ExpectSplitCoversEveryLineOnce(files, first, 3, 16);
  ExpectSplitCoversEveryLineOnce(files, first, 7, 1024, /*all_busy=*/false);
}

std::vector<std::string> SixFiles() {
  std::vector<std::string> files;
  for (int i = 0; i < 6; ++i) {
    files.push_back(WriteFile(absl::StrCat("six", i), CriteoLines(i * 10, 10)));
  }
  return files;
}

TEST(CriteoReaderTest, ShuffleIsDeterministicPerSeedAndDiffersAcrossEpochs) {
  ReaderOptions o = Options(SixFiles());
  o.shuffle = true;
  o.shuffle_seed = 7;
  o.epochs = 3;
  auto a = MakeReader(o);
  auto b = MakeReader(o);
  o.shuffle_seed = 8;
  auto c = MakeReader(o);
  std::set<std::vector<size_t>> orders;
  for (int e = 0; e < 3; ++e) {
    EXPECT_EQ(a->FileOrder(e), b->FileOrder(e));
    std::vector<size_t> sorted = a->FileOrder(e);
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(sorted, (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
    orders.insert(a->FileOrder(e));
  }
  EXPECT_EQ(orders.size(), 3u);  // Each epoch has its own order.
  EXPECT_NE(a->FileOrder(0), c->FileOrder(0));
  // What is read follows the orders: files in order, lines in file order.
  std::vector<int> expected;
  for (int e = 0; e < 3; ++e) {
    for (size_t f : a->FileOrder(e)) {
      for (int i = 0; i < 10; ++i) expected.push_back(static_cast<int>(f) * 10 + i);
    }
  }
  EXPECT_EQ(ReadIds(a.get()), expected);
  EXPECT_EQ(ReadIds(b.get()), expected);
  // Without shuffling, list order every epoch.
  o.shuffle = false;
  EXPECT_EQ(MakeReader(o)->FileOrder(2), (std::vector<size_t>{0, 1, 2, 3, 4, 5}));
}

// Captures glog warnings.
class WarningSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char*, const char*, int,
            const struct ::tm*, const char* message, size_t length) override {
    if (severity == google::GLOG_WARNING) lines.emplace_back(message, length);
  }
  std::vector<std::string> lines;
};

TEST(CriteoReaderTest, BadLinesAreReportedAndTheBudgetEnforced) {
  std::string content;
  for (int i = 0; i < 12; ++i) {
    std::string line = CriteoLine(i % 2, i);
    if (i == 2) line = line.substr(0, line.rfind('\t'));  // 39 columns
    if (i == 6) line[0] = 'x';                             // bad label
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
  EXPECT_NE(sink.lines[0].find(path + ":3: has 39 tab-separated columns"),
            std::string::npos)
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

TEST(CriteoReaderTest, OnlyTheOwnerCountsABadLine) {
  std::string content = CriteoLines(0, 4) + "garbage\n" + CriteoLines(5, 4);
  const std::string path = WriteFile("owner.tsv", content);
  uint64_t total = 0;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    ReaderOptions o = Options({path});
    o.rank = rank;
    o.num_workers = 3;
    o.stripe_lines = 2;
    auto reader = MakeReader(o);
    ReadIds(reader.get());
    total += reader->bad_lines();
    EXPECT_EQ(reader->bad_lines(), reader->Owns(0, 4) ? 1u : 0u);
  }
  EXPECT_EQ(total, 1u);
}

TEST(CriteoReaderTest, PositionRestoreResumesExactly) {
  std::vector<std::string> files = SixFiles();
  files.push_back(WriteGzip("pos.gz", {CriteoLines(60, 23)}));
  files.push_back(WriteFile("pos_bad.tsv", "bad\n" + CriteoLines(83, 9) + "bad"));
  ReaderOptions o = Options(files);
  o.shuffle = true;
  o.shuffle_seed = 3;
  o.epochs = 2;
  o.rank = 1;
  o.num_workers = 2;
  o.stripe_lines = 3;
  // The uninterrupted run: every batch and the position after it.
  auto full = MakeReader(o);
  std::vector<std::vector<int>> batches;
  std::vector<ReaderPosition> ends;
  Batch batch;
  while (*full->NextBatch(5, &batch)) {
    std::vector<int> ids;
    for (int i = 0; i < batch.size; ++i) {
      ids.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i * 13]))));
    }
    batches.push_back(ids);
    ends.push_back(batch.end_position);
    EXPECT_EQ(batch.end_position, full->position());
  }
  ASSERT_GT(batches.size(), 10u);
  for (size_t k = 0; k < batches.size(); ++k) {
    auto restored = MakeReader(o);
    auto position = DecodePosition(EncodePosition(ends[k]));
    ASSERT_TRUE(position.ok()) << position.status();
    ASSERT_TRUE(restored->Seek(*position).ok()) << EncodePosition(ends[k]);
    EXPECT_EQ(restored->bad_lines(), ends[k].bad_lines);
    for (size_t j = k + 1; j < batches.size(); ++j) {
      ASSERT_TRUE(*restored->NextBatch(5, &batch)) << k << " " << j;
      std::vector<int> ids;
      for (int i = 0; i < batch.size; ++i) {
        ids.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i * 13]))));
      }
      EXPECT_EQ(ids, batches[j]) << "restored after batch " << k;
      EXPECT_EQ(batch.end_position, ends[j]);
    }
    EXPECT_FALSE(*restored->NextBatch(5, &batch));
  }
  // pos_bad.tsv (file 7) has bad lines 0 and 10; ours are counted each epoch.
  EXPECT_EQ(full->bad_lines(), 2u * (full->Owns(7, 0) + full->Owns(7, 10)));
  EXPECT_GT(full->bad_lines(), 0u);
}

TEST(CriteoReaderTest, BadPositionsAreRefused) {
  const std::string path = WriteFile("seek.tsv", CriteoLines(0, 3));
  auto reader = MakeReader(Options({path}));
  ReaderPosition p;
  p.epoch = 2;
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.epoch = 1;  // The end: legal.
  EXPECT_TRUE(reader->Seek(p).ok());
  Batch batch;
  EXPECT_FALSE(*reader->NextBatch(4, &batch));
  p = ReaderPosition();
  p.file_ordinal = 2;
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.file_ordinal = 0;
  p.line = 1;
  p.offset = 5;  // Not a line start.
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  p.offset = 0;  // line without offset
  EXPECT_EQ(reader->Seek(p).code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePosition("v1 epoch=1").status().code(),
            absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(DecodePosition("v2 epoch=1 file=0 line=0 offset=0 bad=0").status().code(),
            absl::StatusCode::kInvalidArgument);
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
}

TEST(CriteoReaderTest, MultiHotFromAJobConfig) {
  JobConfig config;
  ASSERT_TRUE(google::protobuf::TextFormat::ParseFromString(R"pb(
    tables { id: 1 name: "tags" dim: 4 }
    tables { id: 2 name: "users" dim: 4 }
    fields { name: "user" column: 3 table: "users" }
    fields { name: "tags" column: 4 table: "tags" pooling: MEAN }
    data { format: TSV_MULTIHOT num_dense: 2 error_budget: 5 }
    training { epochs: 2 shuffle_seed: 9 }
  )pb", &config));
  const std::string path =
      WriteFile("multi.tsv", "1\t4\t-2\tab\t1,2,3\n0\t\t\t\t\n1\t1\t1\tcd\tff\n");
  auto options = ReaderOptionsFromConfig(config, {path}, 0, 1, /*training=*/true);
  ASSERT_TRUE(options.ok()) << options.status();
  EXPECT_EQ(options->num_columns, 5);
  EXPECT_EQ(options->epochs, 2u);
  EXPECT_TRUE(options->shuffle);
  EXPECT_EQ(options->error_budget, 5u);
  auto reader = MakeReader(*options);
  Batch batch;
  ASSERT_TRUE(*reader->NextBatch(3, &batch));
  ASSERT_EQ(batch.size, 3);
  EXPECT_EQ(batch.fields[0].offsets, (std::vector<int64_t>{0, 1, 2, 3}));
  EXPECT_EQ(batch.fields[0].keys[0], CategoricalKey(0, 0xab));
  EXPECT_EQ(batch.fields[1].offsets, (std::vector<int64_t>{0, 3, 4, 5}));
  EXPECT_EQ(batch.fields[1].keys,
            (std::vector<uint64_t>{CategoricalKey(1, 1), CategoricalKey(1, 2),
                                   CategoricalKey(1, 3), MissingKey(1),
                                   CategoricalKey(1, 0xff)}));
  EXPECT_EQ(batch.dense, (std::vector<float>{std::log1p(4.0f), 0, 0, 0, std::log1p(1.0f),
                                             std::log1p(1.0f)}));
  ASSERT_TRUE(*reader->NextBatch(3, &batch));  // The second epoch (1).
  EXPECT_EQ(batch.end_position.epoch, 1u);
  EXPECT_FALSE(*reader->NextBatch(3, &batch));
  auto eval = ReaderOptionsFromConfig(config, {path}, 0, 1, /*training=*/false);
  EXPECT_EQ(eval->epochs, 1u);
  EXPECT_FALSE(eval->shuffle);
}

TEST(CriteoReaderTest, MovesToAnotherThread) {
  ReaderOptions o = Options(SixFiles());
  o.shuffle = true;
  o.epochs = 2;
  const std::vector<int> here = ReadIds(MakeReader(o).get());
  std::unique_ptr<CriteoReader> reader = MakeReader(o);
  Batch batch;
  ASSERT_TRUE(*reader->NextBatch(5, &batch));  // Started on this thread.
  std::vector<int> there;
  std::thread worker([r = std::move(reader), &there]() mutable {
    there = ReadIds(r.get());
  });
  worker.join();
  EXPECT_EQ(there, std::vector<int>(here.begin() + 5, here.end()));
}

}  // namespace
}  // namespace data
}  // namespace shardps

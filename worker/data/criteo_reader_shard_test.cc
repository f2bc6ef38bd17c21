// CriteoReader across workers and epochs: each worker reads only its share
// (every line exactly once per epoch over all workers, gzip files
// decompressed once), the shuffle window, and exact resumption from any
// position.
#include <algorithm>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/reader_test_util.h"
#include "worker/data/test_util.h"

namespace shardps {
namespace data {
namespace {

using testing::CriteoLines;
using testing::MakeReader;
using testing::Options;
using testing::ReadIds;
using testing::ReadIdsPerEpoch;
using testing::WarningSink;
using testing::WriteFile;
using testing::WriteGzip;

struct ShareRun {
  std::vector<std::vector<int>> ids;       // [rank] all ids read, in order.
  std::vector<CriteoReader::Stats> stats;  // [rank]
};

// Reads `o` with `workers` readers; checks that in every epoch every line id
// in [0, total_lines) comes out exactly once over all workers.
ShareRun ExpectEveryLineOncePerEpoch(ReaderOptions o, int total_lines, int workers) {
  ShareRun run;
  std::vector<std::multiset<int>> per_epoch(o.epochs);
  for (int rank = 0; rank < workers; ++rank) {
    o.rank = rank;
    o.num_workers = workers;
    auto reader = MakeReader(o);
    const std::vector<std::vector<int>> epochs = ReadIdsPerEpoch(reader.get());
    run.ids.emplace_back();
    for (size_t e = 0; e < epochs.size(); ++e) {
      per_epoch[e].insert(epochs[e].begin(), epochs[e].end());
      run.ids.back().insert(run.ids.back().end(), epochs[e].begin(), epochs[e].end());
    }
    run.stats.push_back(reader->stats());
  }
  for (size_t e = 0; e < per_epoch.size(); ++e) {
    EXPECT_EQ(per_epoch[e].size(), static_cast<size_t>(total_lines)) << "epoch " << e;
    for (int id = 0; id < total_lines; ++id) {
      EXPECT_EQ(per_epoch[e].count(id), 1u) << "epoch " << e << " line " << id;
    }
  }
  return run;
}

TEST(CriteoReaderShardTest, TwoWorkersSplitOnePlainFileByByteRange) {
  const std::string content = CriteoLines(0, 1000);
  ReaderOptions o = Options({WriteFile("one.tsv", content)});
  o.epochs = 2;
  o.shuffle = true;
  o.shuffle_buffer = 64;
  o.max_line_bytes = 4096;  // Bounds the read-ahead past a range's end.
  const ShareRun run = ExpectEveryLineOncePerEpoch(o, 1000, 2);
  for (int rank = 0; rank < 2; ++rank) {
    // Disjoint halves: about 500 lines each, and about half the bytes read.
    EXPECT_GT(run.ids[rank].size(), 2u * 400) << rank;
    EXPECT_LE(run.stats[rank].bytes_read_plain, 2 * (content.size() / 2 + 2 * 4096)) << rank;
    EXPECT_EQ(run.stats[rank].bytes_decompressed, 0u);
  }
  // Rank 0 holds the first half of the file, rank 1 the second.
  EXPECT_LT(*std::max_element(run.ids[0].begin(), run.ids[0].end()),
            *std::min_element(run.ids[1].begin(), run.ids[1].end()));
  // Three workers, a gzip copy of the file too: fewer files than workers.
  o.files.push_back(WriteGzip("one_more.gz", {CriteoLines(1000, 50)}));
  o.epochs = 3;
  const ShareRun three = ExpectEveryLineOncePerEpoch(o, 1050, 3);
  uint64_t decompressed = 0;
  for (const auto& s : three.stats) decompressed += s.bytes_decompressed;
  EXPECT_EQ(decompressed, 3 * CriteoLines(1000, 50).size());  // Once per epoch.
}

TEST(CriteoReaderShardTest, TwoWorkersShareAGzipSetEachFileDecompressedOnce) {
  const int sizes[] = {100, 3, 0, 250, 47, 60};
  std::vector<std::string> files;
  uint64_t bytes = 0;
  int first = 0;
  for (int i = 0; i < 6; ++i) {
    const std::string content = CriteoLines(first, sizes[i]);
    files.push_back(WriteGzip(absl::StrCat("set", i, ".gz"), {content}));
    bytes += content.size();
    first += sizes[i];
  }
  ReaderOptions o = Options(files);
  o.epochs = 3;
  o.shuffle = true;
  o.shuffle_seed = 11;
  o.shuffle_buffer = 16;
  const ShareRun run = ExpectEveryLineOncePerEpoch(o, first, 2);
  uint64_t decompressed = 0;
  for (int rank = 0; rank < 2; ++rank) {
    EXPECT_GT(run.ids[rank].size(), 0u);
    EXPECT_EQ(run.stats[rank].bytes_read_plain, 0u);
    decompressed += run.stats[rank].bytes_decompressed;
  }
  EXPECT_EQ(decompressed, 3 * bytes);  // Each file once per epoch in the job.
  // Seven workers over five of them (fewer files than workers): still once.
  files.pop_back();
  o.files = files;
  ExpectEveryLineOncePerEpoch(o, first - 60, 7);
}

TEST(CriteoReaderShardTest, ShuffleChangesOrderPerEpochAndIsReproducibleForASeed) {
  ReaderOptions o = Options({WriteFile("shuffle.tsv", CriteoLines(0, 200))});
  o.epochs = 3;
  o.shuffle = true;
  o.shuffle_seed = 7;
  o.shuffle_buffer = 50;
  const std::vector<std::vector<int>> a = ReadIdsPerEpoch(MakeReader(o).get());
  const std::vector<std::vector<int>> b = ReadIdsPerEpoch(MakeReader(o).get());
  EXPECT_EQ(a, b);  // Same seed, same order.
  std::set<std::vector<int>> orders(a.begin(), a.end());
  EXPECT_EQ(orders.size(), 3u);  // Each epoch its own order.
  std::vector<int> file_order(200);
  std::iota(file_order.begin(), file_order.end(), 0);
  for (const std::vector<int>& epoch : a) {
    ASSERT_EQ(epoch.size(), 200u);
    EXPECT_NE(epoch, file_order);
    // A window holds 50 consecutive lines: each run of 50 is one of them.
    for (int w = 0; w < 4; ++w) {
      std::vector<int> window(epoch.begin() + 50 * w, epoch.begin() + 50 * (w + 1));
      std::sort(window.begin(), window.end());
      EXPECT_EQ(window.front(), 50 * w);
      EXPECT_EQ(window.back(), 50 * w + 49);
    }
  }
  o.shuffle_seed = 8;
  EXPECT_NE(ReadIdsPerEpoch(MakeReader(o).get()), a);
  o.shuffle_buffer = 0;  // Off: file order every epoch.
  for (const std::vector<int>& epoch : ReadIdsPerEpoch(MakeReader(o).get())) {
    EXPECT_EQ(epoch, file_order);
  }
}

TEST(CriteoReaderShardTest, WindowsSpanFilesAndFileOrderFollowsTheEpoch) {
  std::vector<std::string> files;
  for (int i = 0; i < 6; ++i) {
    files.push_back(WriteFile(absl::StrCat("six", i), CriteoLines(i * 10, 10)));
  }
  ReaderOptions o = Options(files);
  o.epochs = 2;
  o.shuffle = true;
  o.shuffle_seed = 3;
  o.shuffle_buffer = 25;
  auto reader = MakeReader(o);
  const std::vector<std::vector<int>> epochs = ReadIdsPerEpoch(reader.get());
  for (uint64_t e = 0; e < 2; ++e) {
    // The window of the first 25 lines: files 1, 2 and half of 3 in the order.
    const std::vector<size_t> order = reader->FileOrder(e);
    std::vector<int> expected;
    for (int k = 0; k < 25; ++k) expected.push_back(order[k / 10] * 10 + k % 10);
    std::vector<int> got(epochs[e].begin(), epochs[e].begin() + 25);
    std::sort(got.begin(), got.end());
    std::sort(expected.begin(), expected.end());
    EXPECT_EQ(got, expected) << "epoch " << e;
  }
}

TEST(CriteoReaderShardTest, OnlyTheOwnerCountsABadLineAndNamesItsByte) {
  const std::string head = CriteoLines(0, 40);
  const std::string path = WriteFile("owner.tsv", head + "garbage\n" + CriteoLines(41, 4));
  WarningSink sink;
  google::AddLogSink(&sink);
  uint64_t total = 0;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    ReaderOptions o = Options({path});
    o.rank = rank;
    o.num_workers = 3;
    o.epochs = 2;
    o.shuffle_buffer = 5;
    auto reader = MakeReader(o);
    ReadIds(reader.get());
    total += reader->bad_lines();
  }
  google::RemoveLogSink(&sink);
  EXPECT_EQ(total, 2u);  // Once per epoch.
  ASSERT_EQ(sink.lines.size(), 2u);
  // In the last third of the file, where line numbers are not known.
  EXPECT_NE(sink.lines[0].find(absl::StrCat(path, ": line at byte ", head.size(), ": ")),
            std::string::npos)
      << sink.lines[0];
}

// Every batch of an uninterrupted run, and a reader restored at each batch's
// end position reading exactly the batches after it.
void ExpectExactResume(const ReaderOptions& o, int batch_size) {
  auto full = MakeReader(o);
  std::vector<std::vector<int>> batches;
  std::vector<ReaderPosition> ends;
  Batch batch;
  while (*full->NextBatch(batch_size, &batch)) {
    batches.push_back(testing::BatchIds(batch));
    ends.push_back(batch.end_position);
    EXPECT_EQ(batch.end_position, full->position());
  }
  ASSERT_GT(batches.size(), 10u);
  bool mid_window = false;
  for (size_t k = 0; k < batches.size(); ++k) {
    mid_window = mid_window || ends[k].taken > 0;
    auto restored = MakeReader(o);
    auto position = DecodePosition(EncodePosition(ends[k]));
    ASSERT_TRUE(position.ok()) << position.status();
    ASSERT_TRUE(restored->Seek(*position).ok()) << EncodePosition(ends[k]);
    EXPECT_EQ(restored->bad_lines(), ends[k].bad_lines);
    EXPECT_EQ(restored->position(), ends[k]);
    for (size_t j = k + 1; j < batches.size(); ++j) {
      ASSERT_TRUE(*restored->NextBatch(batch_size, &batch)) << k << " " << j;
      EXPECT_EQ(testing::BatchIds(batch), batches[j]) << "restored after batch " << k;
      EXPECT_EQ(batch.end_position, ends[j]);
    }
    EXPECT_FALSE(*restored->NextBatch(batch_size, &batch));
    EXPECT_EQ(restored->bad_lines(), full->bad_lines());
  }
  EXPECT_EQ(mid_window, o.shuffle_buffer > 1);
}

TEST(CriteoReaderShardTest, PositionRestoreResumesExactly) {
  std::vector<std::string> files;
  for (int i = 0; i < 6; ++i) {
    files.push_back(WriteFile(absl::StrCat("pos", i), CriteoLines(i * 10, 10)));
  }
  files.push_back(WriteGzip("pos.gz", {CriteoLines(60, 23)}));
  files.push_back(WriteFile("pos_bad.tsv", "bad\n" + CriteoLines(83, 9) + "bad"));
  ReaderOptions o = Options(files);
  o.shuffle = true;
  o.shuffle_seed = 3;
  o.epochs = 2;
  o.rank = 1;
  o.num_workers = 2;  // Whole files.
  for (uint64_t window : {0, 1, 7, 40}) {
    SCOPED_TRACE(window);
    o.shuffle_buffer = window;
    ExpectExactResume(o, 5);
  }
  // Fewer files than workers: byte ranges of the plain ones, mid-file.
  o.files = {WriteFile("pos_big.tsv", CriteoLines(0, 120) + "bad\n" + CriteoLines(121, 80)),
             WriteGzip("pos_big.gz", {CriteoLines(201, 30)})};
  o.num_workers = 3;
  for (uint32_t rank = 0; rank < 3; ++rank) {
    SCOPED_TRACE(rank);
    o.rank = rank;
    o.shuffle_buffer = 9;
    ExpectExactResume(o, 4);
  }
}

}  // namespace
}  // namespace data
}  // namespace shardps

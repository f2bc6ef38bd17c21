// Helpers for the CriteoReader tests: options over Criteo files whose lines
// come from testing::CriteoLines, and reading back the ids of those lines.
#ifndef SHARDPS_WORKER_DATA_READER_TEST_UTIL_H_
#define SHARDPS_WORKER_DATA_READER_TEST_UTIL_H_

#include <cmath>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"
#include "gtest/gtest.h"
#include "worker/data/criteo_reader.h"

namespace shardps {
namespace data {
namespace testing {

// Reader options for Criteo files: the 26 categoricals as fields C1..C26.
inline ReaderOptions Options(std::vector<std::string> files) {
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

inline std::unique_ptr<CriteoReader> MakeReader(ReaderOptions o) {
  auto reader = CriteoReader::Create(std::move(o));
  EXPECT_TRUE(reader.ok()) << reader.status();
  return reader.ok() ? std::move(*reader) : nullptr;
}

// The line ids (the `id` of CriteoLine) of a batch, checking field 0 too.
inline std::vector<int> BatchIds(const Batch& batch) {
  std::vector<int> ids;
  for (int i = 0; i < batch.size; ++i) {
    // Field 0's value of line `id` is id * 32; dense[0] is log1p(id).
    ids.push_back(static_cast<int>(std::lround(std::expm1(batch.dense[i * 13]))));
    EXPECT_EQ(batch.fields[0].keys[i], CategoricalKey(0, ids.back() * 32));
  }
  return ids;
}

// The line id of every example, in reading order, to the end of the data.
inline std::vector<int> ReadIds(CriteoReader* reader, int batch_size = 7) {
  std::vector<int> ids;
  Batch batch;
  while (true) {
    auto more = reader->NextBatch(batch_size, &batch);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    const std::vector<int> got = BatchIds(batch);
    ids.insert(ids.end(), got.begin(), got.end());
  }
  return ids;
}

// The line ids of each epoch, in reading order (read one line at a time: a
// position after a line still names that line's epoch).
inline std::vector<std::vector<int>> ReadIdsPerEpoch(CriteoReader* reader) {
  std::vector<std::vector<int>> epochs(reader->options().epochs);
  Batch batch;
  while (true) {
    auto more = reader->NextBatch(1, &batch);
    EXPECT_TRUE(more.ok()) << more.status();
    if (!more.ok() || !*more) break;
    EXPECT_LT(batch.end_position.epoch, epochs.size());
    if (batch.end_position.epoch >= epochs.size()) break;
    epochs[batch.end_position.epoch].push_back(BatchIds(batch)[0]);
  }
  return epochs;
}

// Captures glog warnings while registered (google::AddLogSink).
class WarningSink : public google::LogSink {
 public:
  void send(google::LogSeverity severity, const char*, const char*, int, const struct ::tm*,
            const char* message, size_t length) override {
    if (severity == google::GLOG_WARNING) lines.emplace_back(message, length);
  }
  std::vector<std::string> lines;
};

}  // namespace testing
}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_READER_TEST_UTIL_H_

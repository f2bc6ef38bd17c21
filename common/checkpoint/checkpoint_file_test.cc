#include "common/checkpoint/checkpoint_file.h"

#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/test_util.h"
#include "common/partition.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace checkpoint {
namespace {

using ::testing::HasSubstr;

// (partition, table, deleted, key, payload): one record as read back.
using Record = std::tuple<uint32_t, uint32_t, bool, uint64_t, std::string>;

FileHeader TestHeader() {
  FileHeader h;
  h.job_name = "ctr";
  h.clock = 123;
  h.num_partitions = 16;
  h.tables = {{1, "user", 1, 4, 4 * 4 * 2 + 8, 0x1111222233334444ull},
              {7, "dense", 2, 3, 3 * 4, 0xabcdefull}};
  h.partitions = {2, 5, 11};
  return h;
}

std::string Payload(std::mt19937_64* rng, size_t n, bool compressible) {
  std::string s(n, '\0');
  for (size_t i = 0; i < n; ++i) {
    s[i] = compressible ? static_cast<char>(i % 3) : static_cast<char>((*rng)());
  }
  return s;
}

// Writes groups of records (several blocks per group, groups revisited,
// deletions) and returns them in write order.
std::vector<Record> WriteSample(const std::string& path, const WriterOptions& options,
                                bool compressible, WrittenFile* written) {
  auto writer = CheckpointFileWriter::Create(path, TestHeader(), options);
  EXPECT_TRUE(writer.ok()) << writer.status();
  std::mt19937_64 rng(42);
  std::vector<Record> records;
  const FileHeader h = TestHeader();
  for (int round = 0; round < 2; ++round) {
    for (uint32_t part : h.partitions) {
      for (const TableSchema& t : h.tables) {
        for (int i = 0; i < 37 + round; ++i) {
          const uint64_t key = rng();
          if (i % 10 == 9) {
            EXPECT_TRUE((*writer)->AddDeleted(part, t.id, key).ok());
            records.emplace_back(part, t.id, true, key, "");
            continue;
          }
          std::string p = Payload(&rng, t.payload_bytes, compressible);
          EXPECT_TRUE((*writer)->Add(part, t.id, key, p).ok());
          records.emplace_back(part, t.id, false, key, p);
        }
      }
    }
  }
  auto done = (*writer)->Finish();
  EXPECT_TRUE(done.ok()) << done.status();
  *written = *done;
  return records;
}

std::vector<Record> ReadBack(const CheckpointFileReader& reader) {
  std::vector<Record> out;
  for (const RecordBlock& b : reader.blocks()) {
    for (size_t i = 0; i < b.size(); ++i) {
      out.emplace_back(b.partition(), b.table_id(), b.deleted(), b.key(i),
                       std::string(b.payload(i)));
    }
  }
  return out;
}

class CheckpointFileTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = testing::NewTempDir("ckpt_file");
    path_ = JoinPath(dir_, PartitionGroupFileName(3));
  }
  // A small valid file at path_ (blocks of at most 256 raw bytes).
  std::vector<Record> WriteSmall(Compression c = Compression::kNone) {
    WriterOptions options;
    options.block_bytes = 256;
    options.compression = c;
    return WriteSample(path_, options, false, &written_);
  }
  absl::Status OpenStatus(const Expectations& e = Expectations()) {
    return CheckpointFileReader::Open(path_, e).status();
  }

  std::string dir_, path_;
  WrittenFile written_;
};

TEST_F(CheckpointFileTest, RoundTripIsBitIdentical) {
  WriterOptions options;
  options.block_bytes = 512;
  const std::vector<Record> records = WriteSample(path_, options, false, &written_);
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(ReadBack(**reader), records);
  EXPECT_EQ((*reader)->num_records(), records.size());
  EXPECT_EQ(written_.num_records, records.size());
  EXPECT_GT(written_.num_blocks, 2 * 3 * 2);  // Groups span several blocks.
  EXPECT_EQ((*reader)->blocks().size(), written_.num_blocks);
  const FileHeader& h = (*reader)->header();
  EXPECT_EQ(h.job_name, "ctr");
  EXPECT_EQ(h.clock, 123u);
  EXPECT_EQ(h.num_partitions, 16u);
  EXPECT_EQ(h.partitions, TestHeader().partitions);
  ASSERT_EQ(h.tables.size(), 2u);
  EXPECT_EQ(h.tables[0].name, "user");
  EXPECT_EQ(h.tables[0].fingerprint, 0x1111222233334444ull);
  EXPECT_EQ(h.tables[1].kind, 2u);
  EXPECT_EQ(h.tables[1].dim, 3u);
  // The manifest's digest of the file is what is on disk.
  auto digest = DigestFile(path_);
  ASSERT_TRUE(digest.ok());
  EXPECT_EQ(digest->size, written_.size);
  EXPECT_EQ(digest->crc32c, written_.crc32c);
  EXPECT_EQ(written_.path, path_);
}

TEST_F(CheckpointFileTest, ZstdRoundTripIsBitIdenticalAndSmaller) {
  WriterOptions plain;
  WrittenFile plain_file;
  WriteSample(path_ + ".plain", plain, true, &plain_file);
  WriterOptions zstd;
  zstd.compression = Compression::kZstd;
  zstd.block_bytes = 4096;
  const std::vector<Record> records = WriteSample(path_, zstd, true, &written_);
  EXPECT_LT(written_.size * 2, plain_file.size);  // Keys are random.
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(ReadBack(**reader), records);
}

TEST_F(CheckpointFileTest, ZstdStoresIncompressibleBlocksRaw) {
  const std::vector<Record> records = WriteSmall(Compression::kZstd);
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ(ReadBack(**reader), records);
}

TEST_F(CheckpointFileTest, EmptyFileRoundTrips) {
  auto writer = CheckpointFileWriter::Create(path_, TestHeader());
  ASSERT_TRUE(writer.ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)->blocks().empty());
}

TEST_F(CheckpointFileTest, ManyTablesWithShortNamesAndNoPartitions) {
  FileHeader h = TestHeader();
  h.tables.clear();
  for (uint32_t i = 0; i < 20; ++i) {
    h.tables.push_back({i, std::string(1, static_cast<char>('a' + i)), 1, 1, 4, i});
  }
  h.tables[0].name = "";
  h.partitions.clear();
  auto writer = CheckpointFileWriter::Create(path_, h);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->Finish().ok());
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_EQ((*reader)->header().tables.size(), 20u);
  EXPECT_EQ((*reader)->header().tables[19].name, "t");
  EXPECT_NE((*reader)->FindTable(19), nullptr);
  EXPECT_EQ((*reader)->FindTable(20), nullptr);
}

TEST_F(CheckpointFileTest, AbandonedWriterLeavesNothing) {
  {
    auto writer = CheckpointFileWriter::Create(path_, TestHeader());
    ASSERT_TRUE(writer.ok());
    ASSERT_TRUE((*writer)->Add(2, 7, 1, std::string(12, 'x')).ok());
    auto names = ListDir(dir_);
    ASSERT_EQ(names->size(), 1u);
    EXPECT_TRUE(IsTempFileName((*names)[0])) << (*names)[0];
  }
  EXPECT_TRUE(ListDir(dir_)->empty());
}

TEST_F(CheckpointFileTest, WriterRefusesBadInput) {
  auto writer = CheckpointFileWriter::Create(path_, TestHeader());
  ASSERT_TRUE(writer.ok());
  absl::Status s = (*writer)->Add(3, 1, 1, std::string(40, 'x'));
  EXPECT_EQ(s.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(s.message(), HasSubstr("partition 3 is not in the file's header"));
  s = (*writer)->Add(2, 9, 1, std::string(40, 'x'));
  EXPECT_THAT(s.message(), HasSubstr("table 9 is not in the file's schema"));
  s = (*writer)->Add(2, 1, 1, std::string(39, 'x'));
  EXPECT_THAT(s.message(), HasSubstr("payload of 39 bytes, the schema says 40"));

  FileHeader dup = TestHeader();
  dup.tables[1].id = 1;
  EXPECT_EQ(CheckpointFileWriter::Create(path_, dup).status().code(),
            absl::StatusCode::kInvalidArgument);
  FileHeader unsorted = TestHeader();
  unsorted.partitions = {5, 2};
  EXPECT_EQ(CheckpointFileWriter::Create(path_, unsorted).status().code(),
            absl::StatusCode::kInvalidArgument);
  FileHeader out_of_range = TestHeader();
  out_of_range.partitions = {16};
  EXPECT_EQ(CheckpointFileWriter::Create(path_, out_of_range).status().code(),
            absl::StatusCode::kInvalidArgument);
}

TEST_F(CheckpointFileTest, FlippedByteInBlockNamesTheBlock) {
  WriteSmall();
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok());
  // A byte in the middle of the file is inside a block's stored bytes.
  testing::FlipByte(path_, written_.size / 2);
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path_ + ": block "));
  EXPECT_THAT(s.message(), HasSubstr("CRC mismatch"));
}

TEST_F(CheckpointFileTest, FlippedByteInHeaderIsRefused) {
  WriteSmall();
  testing::FlipByte(path_, 20);  // Inside the job name.
  absl::Status s = OpenStatus();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(path_ + ": header CRC mismatch"));
}

TEST_F(CheckpointFileTest, EverySingleByteFlipIsRefused) {
  WriteSmall();
  const std::string good = testing::ReadAll(path_);
  for (size_t i = 0; i < good.size(); ++i) {
    std::string bad = good;
    bad[i] ^= 0x01;
    auto reader = CheckpointFileReader::Parse(bad, "f");
    ASSERT_FALSE(reader.ok()) << "flip at " << i << " was accepted";
    EXPECT_THAT(reader.status().message(), HasSubstr("f: "));
  }
}

TEST_F(CheckpointFileTest, EveryTruncationIsRefused) {
  WriteSmall();
  const std::string good = testing::ReadAll(path_);
  for (size_t n = 0; n < good.size(); ++n) {
    auto reader = CheckpointFileReader::Parse(good.substr(0, n), "f");
    ASSERT_FALSE(reader.ok()) << "truncation to " << n << " was accepted";
    EXPECT_EQ(reader.status().code(), absl::StatusCode::kDataLoss);
    EXPECT_THAT(reader.status().message(),
                HasSubstr(absl::StrCat("truncated after ", n, " bytes")));
  }
  testing::Truncate(path_, 4096);
  EXPECT_THAT(OpenStatus().message(), HasSubstr(path_ + ": truncated after 4096 bytes"));
}

TEST_F(CheckpointFileTest, TrailingBytesAreRefused) {
  WriteSmall();
  testing::WriteAll(path_, testing::ReadAll(path_) + "x");
  EXPECT_THAT(OpenStatus().message(), HasSubstr("1 unexpected bytes after the footer"));
}

TEST_F(CheckpointFileTest, WrongMagicAndVersionAreRefused) {
  WriteSmall();
  const std::string good = testing::ReadAll(path_);
  std::string bad = good;
  bad[0] = 'X';
  absl::Status s = CheckpointFileReader::Parse(bad, "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_EQ(s.message(), "f: bad magic: not a shardps checkpoint file");
  bad = good;
  bad[8] = 4;  // Version 4.
  s = CheckpointFileReader::Parse(bad, "f").status();
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_EQ(s.message(),
            "f: format version 4 is not supported (this build reads versions 1 to "
            "3)");
  bad[8] = 0;
  EXPECT_EQ(CheckpointFileReader::Parse(bad, "f").status().code(),
            absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(CheckpointFileReader::Parse("", "f").status().message(),
              HasSubstr("f: truncated after 0 bytes"));
}

TEST_F(CheckpointFileTest, DeltaFilesAreVersion2AndFullFilesStayVersion1) {
  // A full file is written as version 1, as before delta support.
  WriteSmall();
  std::string full = testing::ReadAll(path_);
  EXPECT_EQ(full[8], 1);
  auto reader = CheckpointFileReader::Open(path_);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_FALSE((*reader)->header().delta);

  FileHeader h = TestHeader();
  h.delta = true;
  h.base_clock = 100;
  const std::string delta_path = JoinPath(dir_, "delta.shard");
  auto writer = CheckpointFileWriter::Create(delta_path, h);
  ASSERT_TRUE(writer.ok()) << writer.status();
  ASSERT_TRUE((*writer)->AddDeleted(5, 1, 77).ok());
  ASSERT_TRUE((*writer)->Add(5, 7, 78, std::string(12, 'x')).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_EQ(testing::ReadAll(delta_path)[8], 2);
  Expectations e;
  e.delta = true;
  e.base_clock = 100;
  reader = CheckpointFileReader::Open(delta_path, e);
  ASSERT_TRUE(reader.ok()) << reader.status();
  EXPECT_TRUE((*reader)->header().delta);
  EXPECT_EQ((*reader)->header().base_clock, 100u);
  ASSERT_EQ((*reader)->blocks().size(), 2u);
  EXPECT_TRUE((*reader)->blocks()[0].deleted());

  // A delta where a full file is expected, or on another base: refused.
  e.base_clock = 99;
  absl::Status st = CheckpointFileReader::Open(delta_path, e).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("base clock 100 does not match"));
  e.base_clock.reset();
  e.delta = false;
  st = CheckpointFileReader::Open(delta_path, e).status();
  EXPECT_EQ(st.code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(st.message(), HasSubstr("a delta file, the manifest expects a full"));
  e.delta = true;
  st = OpenStatus(e);
  EXPECT_THAT(st.message(), HasSubstr("a full file, the manifest expects a delta"));

  // A delta's base must be older than its clock.
  h.base_clock = h.clock;
  EXPECT_EQ(ValidateHeader(h).code(), absl::StatusCode::kInvalidArgument);
  h.delta = false;
  h.base_clock = 3;
  EXPECT_EQ(ValidateHeader(h).code(), absl::StatusCode::kInvalidArgument);
}

// Admission counts: only in a file whose header says so (version 3, full
// or delta), 16-byte payloads whatever the table's, read back as their own
// kind; the same flag in an older version's file is corruption.
TEST_F(CheckpointFileTest, AdmissionCountsAreVersion3Blocks) {
  FileHeader h = TestHeader();
  auto plain = CheckpointFileWriter::Create(path_, h);
  ASSERT_TRUE(plain.ok()) << plain.status();
  EXPECT_EQ((*plain)->AddAdmissionCount(5, 1, 9, std::string(16, 'c')).code(),
            absl::StatusCode::kFailedPrecondition);
  plain->reset();

  for (const bool delta : {false, true}) {
    SCOPED_TRACE(delta ? "delta" : "full");
    h.delta = delta;
    h.base_clock = delta ? 100 : 0;
    h.admission_counts = true;
    auto writer = CheckpointFileWriter::Create(path_, h);
    ASSERT_TRUE(writer.ok()) << writer.status();
    ASSERT_TRUE((*writer)->Add(5, 1, 8, std::string(40, 'r')).ok());
    EXPECT_EQ((*writer)->AddAdmissionCount(5, 1, 9, std::string(40, 'c')).code(),
              absl::StatusCode::kInvalidArgument);  // Not the table's size: 16 bytes.
    ASSERT_TRUE((*writer)->AddAdmissionCount(5, 1, 9, std::string(16, 'c')).ok());
    ASSERT_TRUE((*writer)->AddAdmissionCount(11, 7, 10, std::string(16, 'd')).ok());
    ASSERT_TRUE((*writer)->Finish().ok());
    const std::string bytes = testing::ReadAll(path_);
    EXPECT_EQ(bytes[8], 3);
    auto reader = CheckpointFileReader::Open(path_);
    ASSERT_TRUE(reader.ok()) << reader.status();
    EXPECT_TRUE((*reader)->header().admission_counts);
    EXPECT_EQ((*reader)->header().delta, delta);
    EXPECT_EQ((*reader)->header().base_clock, h.base_clock);
    EXPECT_EQ((*reader)->num_records(), 3u);
    const std::vector<RecordBlock>& blocks = (*reader)->blocks();
    ASSERT_EQ(blocks.size(), 3u);
    EXPECT_EQ(blocks[0].kind(), BlockKind::kRows);
    EXPECT_TRUE(blocks[0].rows());
    EXPECT_EQ(blocks[1].kind(), BlockKind::kAdmissionCounts);
    EXPECT_FALSE(blocks[1].rows());
    EXPECT_FALSE(blocks[1].deleted());
    EXPECT_EQ(blocks[1].key(0), 9u);
    EXPECT_EQ(blocks[1].payload(0), std::string(16, 'c'));
    EXPECT_EQ(blocks[2].table_id(), 7u);
    EXPECT_EQ(blocks[2].payloads(), std::string(16, 'd'));

    // A block of deletions relabelled as deletions and admission counts
    // (flags 6; lengths still those of deletions), its CRC made right:
    // refused as corrupt.
    {
      const std::string del_path = JoinPath(dir_, "deletions.shard");
      auto del = CheckpointFileWriter::Create(del_path, h);
      ASSERT_TRUE(del.ok()) << del.status();
      ASSERT_TRUE((*del)->AddDeleted(5, 1, 9).ok());
      ASSERT_TRUE((*del)->Finish().ok());
      std::string both = testing::ReadAll(del_path);
      ASSERT_TRUE(CheckpointFileReader::Parse(both, "f").ok());
      uint32_t body_len;
      std::memcpy(&body_len, both.data() + 12, 4);
      const size_t block = 16 + body_len + 4;
      const uint32_t flags = 6;
      std::memcpy(&both[block + 12], &flags, 4);
      const size_t crc_at = block + 28 + 8;
      const uint32_t crc = Crc32c(both.data() + block, crc_at - block);
      std::memcpy(&both[crc_at], &crc, 4);
      absl::Status st = CheckpointFileReader::Parse(both, "f").status();
      EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
      EXPECT_THAT(st.message(), HasSubstr("inconsistent lengths or flags (flags 6"));
    }

    // The same bytes labelled version 2 (a delta) or 1: the flag is unknown
    // there. Version 1 has no file kind either, so its header is malformed.
    std::string old = bytes;
    old[8] = delta ? 2 : 1;
    const uint32_t body_len = [&] {
      uint32_t v;
      std::memcpy(&v, old.data() + 12, 4);
      return v;
    }();
    const uint32_t crc = Crc32c(old.data(), 16 + body_len);
    std::memcpy(&old[16 + body_len], &crc, 4);
    absl::Status st = CheckpointFileReader::Parse(old, "f").status();
    EXPECT_EQ(st.code(), absl::StatusCode::kDataLoss) << st;
    if (delta) EXPECT_THAT(st.message(), HasSubstr("inconsistent lengths or flags (flags 4"));
  }
}

TEST_F(CheckpointFileTest, MissingFileIsNotFound) {
  EXPECT_EQ(OpenStatus().code(), absl::StatusCode::kNotFound);
  EXPECT_THAT(OpenStatus().message(), HasSubstr(path_));
}

TEST_F(CheckpointFileTest, SchemaMismatchesAreRefused) {
  WriteSmall();
  const FileHeader h = TestHeader();
  const auto expect_error = [&](Expectations e, absl::string_view message) {
    absl::Status s = OpenStatus(e);
    EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
    EXPECT_THAT(s.message(), HasSubstr(message));
    EXPECT_THAT(s.message(), HasSubstr(path_ + ": "));
  };
  Expectations ok;
  ok.job_name = "ctr";
  ok.clock = 123;
  ok.num_partitions = 16;
  ok.tables = h.tables;
  ok.partitions = h.partitions;
  ok.check_key_partitions = false;
  EXPECT_TRUE(OpenStatus(ok).ok()) << OpenStatus(ok);

  Expectations e = ok;
  (*e.tables)[0].dim = 8;
  expect_error(e, "table 1 (\"user\") dim 4 does not match the job config's 8");
  e = ok;
  (*e.tables)[1].payload_bytes = 16;
  expect_error(e,
               "table 7 (\"dense\") payload_bytes 12 does not match the "
               "job config's 16");
  e = ok;
  (*e.tables)[0].fingerprint = 5;
  expect_error(e,
               "table 1 (\"user\") fingerprint 1111222233334444 does not "
               "match the job config's 0000000000000005");
  e = ok;
  (*e.tables)[1].kind = 1;
  expect_error(e, "kind 2 does not match the job config's 1");
  e = ok;
  e.tables->pop_back();
  expect_error(e, "table 7 (\"dense\") is not in the job config");
  e = ok;
  e.tables->push_back({9, "new", 1, 2, 8, 0});
  expect_error(e, "table 9 (\"new\") of the job config is missing");
  e = ok;
  e.job_name = "other";
  expect_error(e, "job \"ctr\" does not match the job config's \"other\"");
  e = ok;
  e.num_partitions = 4096;
  expect_error(e, "num_partitions 16 does not match the job config's 4096");
  e = ok;
  e.clock = 5;
  expect_error(e, "clock 123 does not match the manifest's 5");
  e = ok;
  e.partitions = std::vector<uint32_t>{2, 5};
  expect_error(e, "partitions [2,5,11] do not match the expected [2,5]");
}

TEST_F(CheckpointFileTest, KeyPartitionCheck) {
  FileHeader h = TestHeader();
  h.partitions = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15};
  auto writer = CheckpointFileWriter::Create(path_, h);
  ASSERT_TRUE(writer.ok());
  for (uint64_t key = 0; key < 100; ++key) {
    ASSERT_TRUE((*writer)->Add(PartitionOf(7, key, 16), 7, key, std::string(12, 'a')).ok());
  }
  ASSERT_TRUE((*writer)->Add(PartitionOf(7, 5, 16) ^ 1, 7, 5, std::string(12, 'a')).ok());
  ASSERT_TRUE((*writer)->Finish().ok());
  EXPECT_TRUE(OpenStatus().ok());
  Expectations e;
  e.check_key_partitions = true;
  absl::Status s = OpenStatus(e);
  EXPECT_EQ(s.code(), absl::StatusCode::kDataLoss);
  EXPECT_THAT(s.message(), HasSubstr(absl::StrCat("key 5 of table 7 belongs to partition ",
                                                  PartitionOf(7, 5, 16), ", not ")));
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps

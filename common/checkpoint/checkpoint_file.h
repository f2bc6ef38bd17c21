// Checkpoint partition-group files: the rows of some partitions of every
// table, as written by one parameter server for one checkpoint.
//
// The layer knows nothing of tables or optimizers: a record is a uint64 key
// and an opaque payload of a fixed size per table (the caller packs weights,
// optimizer state and row metadata into it). A delta checkpoint can also hold
// deletions (a key and no payload: "this row no longer exists"), and a file of
// version 3 admission counts (a key and a fixed 16-byte payload the caller
// packs: a key seen but not yet given a row).
//
// ## Format (versions 1 to 3; all integers little-endian)
//
//   file    := header block* footer                  (nothing after footer)
//   header  := "SHPSCKPT" u32 version u32 body_len body u32 crc
//              crc = CRC32C of every header byte before it
//   body    := str job_name, u64 clock, u32 num_partitions (the job's P),
//              u32 n_tables, n_tables x { u32 id, str name, u32 kind,
//              u32 dim, u32 payload_bytes, u64 fingerprint },
//              u32 n_parts, n_parts x u32 partition id (strictly increasing)
//              [versions 2 and 3:] u32 file_kind (1 = FULL, 2 = DELTA),
//              u64 base_clock (DELTA: the clock of the checkpoint it is a
//              delta on, < clock; FULL: 0)
//   str     := u32 length, bytes
//   block   := u32 "BLK1", u32 partition, u32 table_id, u32 flags,
//              u32 num_records, u32 raw_len, u32 stored_len,
//              stored_len bytes, u32 crc   (CRC32C of the block's bytes
//              before it, i.e. of its header and stored bytes)
//              flags: bit 0 = stored bytes are one zstd frame of the raw
//              bytes; bit 1 = deletions (keys only); bit 2 (version 3
//              only, not with bit 1) = admission counts. Other bits must
//              be 0.
//              raw = num_records u64 keys, then num_records payloads
//              (payload_bytes each; none for deletions; 16 bytes for
//              admission counts), so raw_len = num_records * (8 + payload
//              size) exactly.
//   footer  := u32 "END1", u64 num_blocks, u64 num_records, u32 crc
//
// Every block belongs to one (partition, table); a group may span several
// blocks (the writer cuts blocks at WriterOptions::block_bytes). CRC32C (see
// crc32c.h) is the checksum throughout. zstd is optional per block: a block
// that does not shrink is stored raw.
//
// ## Guarantees
//
// The writer writes under a temporary name in the target directory and only
// Finish() makes the file appear (fsync, rename, fsync of the directory).
// The reader reads and verifies the WHOLE file (magic, version, header CRC,
// every block's lengths, CRC and decompressed size, the footer's counts,
// truncation, trailing bytes, then the caller's Expectations) before it
// returns; a reader that exists has nothing left to fail, so a restore never
// applies half a file. Errors name the file and the problem:
//
//   /ckpt/ckpt-000000000123/part-0003.shard: block 17 (partition 9, table 2)
//       at offset 40960: CRC mismatch (stored 0x1234abcd, computed ...)
//   ...: truncated after 4096 bytes: no footer
//   ...: table 2 ("user") dim 16 does not match the job config's 8
//
// Status codes: DATA_LOSS for corruption and truncation (including a wrong
// magic), FAILED_PRECONDITION for an unsupported version or a mismatch with
// the Expectations, NOT_FOUND for a missing file, INVALID_ARGUMENT for bad
// arguments to the writer.
//
// Thread-safety: a writer is used by one thread. A reader is immutable after
// Open/Parse: any number of threads may read it concurrently.
#ifndef SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_FILE_H_
#define SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_FILE_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <deque>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {
namespace checkpoint {

inline constexpr char kFileMagic[] = "SHPSCKPT";  // 8 bytes on disk.
// The newest version this build reads and writes. A writer picks the oldest
// version that can hold its file, so older builds read what they can: 1 for
// a full file, 2 for a delta, 3 for a file that may hold admission counts
// (FileHeader::admission_counts).
inline constexpr uint32_t kFileFormatVersion = 3;
inline constexpr uint32_t kDeltaFileFormatVersion = 2;
inline constexpr uint32_t kFullFileFormatVersion = 1;
// The payload size of an admission-count record.
inline constexpr size_t kAdmissionCountBytes = 16;
// Upper bound of a block's raw size; the reader refuses bigger blocks, so a
// forged length cannot make it allocate without bound.
inline constexpr size_t kMaxBlockRawBytes = size_t{64} << 20;

// One table as the file records it. The caller fills it from the job config.
struct TableSchema {
  uint32_t id = 0;
  std::string name;
  uint32_t kind = 0;  // shardps::TableConfig::Kind number.
  uint32_t dim = 0;
  uint32_t payload_bytes = 0;  // Bytes of every record's payload; > 0.
  uint64_t fingerprint = 0;    // The caller's fingerprint of the TableConfig.
};

struct FileHeader {
  std::string job_name;
  uint64_t clock = 0;                // The checkpoint's clock C.
  uint32_t num_partitions = 0;       // P of the job (> 0), not this file's count.
  std::vector<TableSchema> tables;   // Unique ids and names; may be empty.
  std::vector<uint32_t> partitions;  // This file's: strictly increasing, < P.
  // A delta file (written as version 2, or 3 with admission counts): rows
  // changed since the checkpoint at base_clock (< clock), plus deletions.
  // False: a full file (version 1, or 3).
  bool delta = false;
  uint64_t base_clock = 0;  // 0 unless delta.
  // The file may hold admission-count blocks (written as version 3).
  bool admission_counts = false;
};

// OK if `header` can be written: lengths fit, ids/names unique, payload
// sizes > 0, partitions sorted, unique and < num_partitions; a delta's
// base_clock < clock, a full file's base_clock 0.
absl::Status ValidateHeader(const FileHeader& header);

enum class Compression { kNone, kZstd };

struct WriterOptions {
  Compression compression = Compression::kNone;
  int zstd_level = 1;
  // A block is cut when its raw bytes reach this (records are never split).
  // In [1, kMaxBlockRawBytes].
  size_t block_bytes = size_t{1} << 20;
};

// What Finish() wrote, for the manifest.
struct WrittenFile {
  std::string path;
  uint64_t size = 0;
  uint32_t crc32c = 0;  // Of the whole file.
  std::vector<uint32_t> partitions;
  uint64_t num_blocks = 0;
  uint64_t num_records = 0;  // Rows, deletions and admission counts.
};

class CheckpointFileWriter {
 public:
  // Validates `header`, creates "<path>.tmp.*" and writes the header. The
  // directory must exist. INVALID_ARGUMENT for a bad header or options.
  static absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> Create(
      const std::string& path, FileHeader header, const WriterOptions& options = WriterOptions());
  // Without a successful Finish(), removes the temporary file: `path` is
  // never created half-written.
  ~CheckpointFileWriter();
  CheckpointFileWriter(const CheckpointFileWriter&) = delete;
  CheckpointFileWriter& operator=(const CheckpointFileWriter&) = delete;

  // Appends a row of (partition, table_id). Consecutive calls for the same
  // (partition, table) fill one block; a change of group ends the block.
  // INVALID_ARGUMENT if the partition is not in the header, the table is not
  // in the schema or the payload is not payload_bytes long. An I/O error
  // fails this and every later call.
  absl::Status Add(uint32_t partition, uint32_t table_id, uint64_t key, absl::string_view payload);
  // Appends a deletion (delta checkpoints: the row was removed).
  absl::Status AddDeleted(uint32_t partition, uint32_t table_id, uint64_t key);
  // Appends an admission count: `count` is kAdmissionCountBytes long.
  // FAILED_PRECONDITION unless the header has admission_counts.
  absl::Status AddAdmissionCount(uint32_t partition, uint32_t table_id, uint64_t key,
                                 absl::string_view count);

  // Writes the last block and the footer, fsyncs, renames to `path`, fsyncs
  // the directory. Once only.
  absl::StatusOr<WrittenFile> Finish();

 private:
  struct Impl;
  explicit CheckpointFileWriter(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// What a block's records are.
enum class BlockKind {
  kRows,             // Keys and the table's payloads.
  kDeletions,        // Keys only, empty payloads.
  kAdmissionCounts,  // Keys and kAdmissionCountBytes payloads.
};

// One block of a verified file: records of one (partition, table).
class RecordBlock {
 public:
  RecordBlock(uint32_t partition, uint32_t table_id, BlockKind kind, size_t num_records,
              size_t payload_bytes, absl::string_view raw)
      : partition_(partition),
        table_id_(table_id),
        kind_(kind),
        num_records_(num_records),
        payload_bytes_(payload_bytes),
        raw_(raw) {}

  uint32_t partition() const { return partition_; }
  uint32_t table_id() const { return table_id_; }
  BlockKind kind() const { return kind_; }
  // True: the records are deletions (keys only, empty payloads).
  bool deleted() const { return kind_ == BlockKind::kDeletions; }
  // True: the records are rows (not deletions or admission counts).
  bool rows() const { return kind_ == BlockKind::kRows; }
  size_t size() const { return num_records_; }
  uint64_t key(size_t i) const {
    uint64_t k;
    std::memcpy(&k, raw_.data() + 8 * i, 8);
    return k;
  }
  // payload_bytes bytes (kAdmissionCountBytes for admission counts;
  // unaligned: memcpy before reading floats). Empty for deletions. Valid as
  // long as the reader.
  absl::string_view payload(size_t i) const {
    if (deleted()) return absl::string_view();
    return raw_.substr(8 * num_records_ + payload_bytes_ * i, payload_bytes_);
  }
  // Every payload, record i's at i * payload_bytes (unaligned). Empty for
  // deletions. Valid as long as the reader.
  absl::string_view payloads() const {
    if (deleted()) return absl::string_view();
    return raw_.substr(8 * num_records_, payload_bytes_ * num_records_);
  }

 private:
  uint32_t partition_;
  uint32_t table_id_;
  BlockKind kind_;
  size_t num_records_;
  size_t payload_bytes_;
  absl::string_view raw_;
};

// What the caller's job config says the file must hold. Unset = not checked.
struct Expectations {
  std::optional<std::string> job_name;
  std::optional<uint64_t> clock;
  std::optional<uint32_t> num_partitions;
  // The file's schema must hold exactly these tables (by id), each with the
  // same name, kind, dim, payload size and fingerprint.
  std::optional<std::vector<TableSchema>> tables;
  // The file's partition list must be exactly this (sorted).
  std::optional<std::vector<uint32_t>> partitions;
  // Every key must map to its block's partition by common/partition.h's
  // PartitionOf(table_id, key, num_partitions).
  bool check_key_partitions = false;
  // Whether the file must be a delta (and then on this base clock) or a
  // full file; a manifest of kind DELTA expects delta files on its base.
  std::optional<bool> delta;
  std::optional<uint64_t> base_clock;
};

// A verified file in memory. Memory: the whole file, plus the decompressed
// bytes of its zstd blocks; record views point into them and live as long as
// the reader. Open reads the file once (LoadManifest's CRC check, if on, is a
// second read).
class CheckpointFileReader {
 public:
  // Reads `path` and verifies all of it (see the top of this file).
  static absl::StatusOr<std::unique_ptr<CheckpointFileReader>> Open(
      const std::string& path, const Expectations& expect = Expectations());
  // The same on bytes already in memory; `name` is used in errors.
  static absl::StatusOr<std::unique_ptr<CheckpointFileReader>> Parse(
      std::string contents, std::string name, const Expectations& expect = Expectations());

  CheckpointFileReader(const CheckpointFileReader&) = delete;
  CheckpointFileReader& operator=(const CheckpointFileReader&) = delete;

  const std::string& name() const { return name_; }
  const FileHeader& header() const { return header_; }
  // The schema entry of `table_id`, or nullptr.
  const TableSchema* FindTable(uint32_t table_id) const;
  // In file order.
  const std::vector<RecordBlock>& blocks() const { return blocks_; }
  uint64_t num_records() const { return num_records_; }
  uint64_t file_size() const { return contents_.size(); }

 private:
  CheckpointFileReader(std::string contents, std::string name);
  absl::Status ParseAll();
  absl::Status ParseHeader(size_t* pos);
  absl::Status ParseBlock(size_t* pos);
  absl::Status ParseFooter(size_t pos);
  absl::Status Check(const Expectations& expect) const;
  absl::Status Error(absl::StatusCode code, absl::string_view what) const;

  const std::string contents_;
  const std::string name_;
  FileHeader header_;
  std::vector<RecordBlock> blocks_;
  std::deque<std::string> decompressed_;  // Stable addresses for blocks_.
  uint64_t num_records_ = 0;
};

// Conventional name of a partition-group file: "part-0003.shard".
std::string PartitionGroupFileName(uint32_t group);

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_FILE_H_

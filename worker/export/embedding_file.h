// Exported embedding tables: one file per sparse table, written by ps_export
// (worker/export/exporter.h) for serving, and a small reader for it.
//
// ## Format "SHPSEMB1", version 1 (all integers little-endian)
//
//   file    := header keys values footer           (nothing after the footer)
//   header  := "SHPSEMB1"          8 bytes magic
//              u32 version         1 (kEmbeddingFileVersion)
//              u32 table_id        TableConfig.id
//              u32 dim             floats per row (> 0)
//              u32 dtype           1 = fp32 (EmbeddingDtype; the only one today)
//              u64 num_rows
//              u64 clock           the checkpoint's clock (steps < clock applied)
//              u32 name_len, name_len bytes: the table's name (<= 4096 bytes)
//              u32 job_len,  job_len bytes:  the job's name   (<= 4096 bytes)
//   keys    := num_rows x u64 feature ids, strictly increasing
//   values  := num_rows x dim x f32, row i belongs to keys[i] (row-major)
//   footer  := "SHPSEND1" 8 bytes, u32 crc
//              crc = CRC32C (Castagnoli, as common/checkpoint/crc32c.h) of
//              every byte of the file before it (header, keys, values, the
//              footer's magic)
//
// So the file size is exactly 48 + name_len + job_len + num_rows * (8 + 4 * dim)
// + 12 bytes, and a reader can check it before reading the rows.
//
// Keys are the uint64 ids the trainer pulls (worker/data/fields.h:
// CategoricalKey of field and hashed value). A key missing from the file was
// never trained (or not admitted / evicted): as in the trainer's evaluation,
// its row is the table's shared unadmitted row of its partition if the table
// has them (a second file, exporter.h), else the table's initial value, a
// function of (table seed, key) (server/initializer.h); manifest.txt records
// each table's initializer.
//
// Versioning: a reader refuses any other magic, and any version it does not
// know, with FAILED_PRECONDITION naming both; a new version bumps
// kEmbeddingFileVersion and keeps reading the old ones.
//
// Errors name the file: DATA_LOSS for corruption and truncation (wrong magic,
// size, CRC, unsorted keys), FAILED_PRECONDITION for an unsupported version
// or dtype, NOT_FOUND for a missing file, INVALID_ARGUMENT for bad arguments
// to the writer.
//
// Thread-safety: the writer function is thread-compatible; a reader is
// immutable after Open and may be shared between threads.
#ifndef SHARDPS_WORKER_EXPORT_EMBEDDING_FILE_H_
#define SHARDPS_WORKER_EXPORT_EMBEDDING_FILE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"

namespace shardps {
namespace exporter {

inline constexpr char kEmbeddingFileMagic[] = "SHPSEMB1";  // 8 bytes on disk.
inline constexpr char kEmbeddingFooterMagic[] = "SHPSEND1";
inline constexpr uint32_t kEmbeddingFileVersion = 1;
inline constexpr uint32_t kMaxEmbeddingNameBytes = 4096;

enum class EmbeddingDtype : uint32_t { kFp32 = 1 };

struct EmbeddingFileHeader {
  uint32_t version = kEmbeddingFileVersion;  // Written as kEmbeddingFileVersion.
  uint32_t table_id = 0;
  std::string table_name;
  uint32_t dim = 0;
  EmbeddingDtype dtype = EmbeddingDtype::kFp32;
  uint64_t num_rows = 0;
  uint64_t clock = 0;
  std::string job_name;
};

// What WriteEmbeddingFile wrote.
struct WrittenEmbeddingFile {
  std::string path;
  uint64_t size = 0;
  uint32_t crc32c = 0;  // Of the whole file (for manifests).
};

// Writes `keys` (strictly increasing) and `values` (keys.size() * dim floats)
// as an embedding file at `path`, atomically (temporary name, fsync, rename;
// common/checkpoint/file_io.h). header.num_rows is set from keys.size().
// INVALID_ARGUMENT on dim 0, a size mismatch, unsorted keys or overlong
// names; I/O errors name the path.
absl::StatusOr<WrittenEmbeddingFile> WriteEmbeddingFile(const std::string& path,
                                                        EmbeddingFileHeader header,
                                                        absl::Span<const uint64_t> keys,
                                                        absl::Span<const float> values);

// A verified embedding file in memory (the whole file: 8 + 4 * dim bytes per
// row plus the header).
class EmbeddingFileReader {
 public:
  // Reads `path` and verifies all of it (magic, version, dtype, exact size,
  // CRC, sorted keys) before returning.
  static absl::StatusOr<std::unique_ptr<EmbeddingFileReader>> Open(const std::string& path);
  // The same on bytes in memory; `name` is used in errors.
  static absl::StatusOr<std::unique_ptr<EmbeddingFileReader>> Parse(std::string contents,
                                                                    std::string name);

  EmbeddingFileReader(const EmbeddingFileReader&) = delete;
  EmbeddingFileReader& operator=(const EmbeddingFileReader&) = delete;

  const EmbeddingFileHeader& header() const { return header_; }
  uint64_t num_rows() const { return header_.num_rows; }
  uint32_t dim() const { return header_.dim; }
  // Row i's key and its dim() floats, i < num_rows(); keys increase with i.
  uint64_t key(uint64_t i) const;
  absl::Span<const float> row(uint64_t i) const;
  // The row of `key` (binary search), or nullopt if the file has none.
  std::optional<absl::Span<const float>> Find(uint64_t key) const;

 private:
  EmbeddingFileReader(std::string contents, std::string name)
      : contents_(std::move(contents)), name_(std::move(name)) {}
  absl::Status Verify();
  absl::Status ParseHeader(size_t* pos);

  const std::string contents_;
  const std::string name_;
  EmbeddingFileHeader header_;
  size_t keys_offset_ = 0;
  // Rows copied out aligned (the file's floats may be unaligned in memory).
  std::vector<float> values_;
};

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_EMBEDDING_FILE_H_

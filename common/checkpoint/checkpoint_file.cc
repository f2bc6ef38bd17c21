#include "common/checkpoint/checkpoint_file.h"

#include <zstd.h>

#include <algorithm>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/checkpoint_format.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/status_macros.h"

// The writer, and what writer and reader share; the reader is in
// checkpoint_file_reader.cc.

namespace shardps {
namespace checkpoint {

// The format's constants and helpers.
using internal::kBlockTag;
using internal::kFlagDeleted;
using internal::kFlagZstd;
using internal::kFooterTag;
using internal::kMagicSize;
using internal::kMaxNameBytes;
using internal::PutStr;
using internal::PutU32;
using internal::PutU64;

namespace {

std::string EncodeHeader(const FileHeader& h) {
  std::string body;
  PutStr(&body, h.job_name);
  PutU64(&body, h.clock);
  PutU32(&body, h.num_partitions);
  PutU32(&body, static_cast<uint32_t>(h.tables.size()));
  for (const TableSchema& t : h.tables) {
    PutU32(&body, t.id);
    PutStr(&body, t.name);
    PutU32(&body, t.kind);
    PutU32(&body, t.dim);
    PutU32(&body, t.payload_bytes);
    PutU64(&body, t.fingerprint);
  }
  PutU32(&body, static_cast<uint32_t>(h.partitions.size()));
  for (uint32_t p : h.partitions) PutU32(&body, p);
  if (h.delta || h.admission_counts) {  // Versions 2 and 3: the file kind and the base.
    PutU32(&body, h.delta ? internal::kFileKindDelta : internal::kFileKindFull);
    PutU64(&body, h.base_clock);
  }

  std::string out(kFileMagic, kMagicSize);
  PutU32(&out, h.admission_counts ? kFileFormatVersion
               : h.delta          ? kDeltaFileFormatVersion
                                  : kFullFileFormatVersion);
  PutU32(&out, static_cast<uint32_t>(body.size()));
  out += body;
  PutU32(&out, Crc32c(out));
  return out;
}

}  // namespace

std::string PartitionGroupFileName(uint32_t group) {
  return absl::StrFormat("part-%04u.shard", group);
}

absl::Status ValidateHeader(const FileHeader& h) {
  if (h.job_name.size() > kMaxNameBytes) {
    return absl::InvalidArgumentError("checkpoint header: job name too long");
  }
  if (h.num_partitions == 0) {
    return absl::InvalidArgumentError("checkpoint header: num_partitions must be > 0");
  }
  absl::flat_hash_set<uint32_t> ids;
  absl::flat_hash_set<std::string> names;
  for (const TableSchema& t : h.tables) {
    const std::string which =
        absl::StrCat("checkpoint header: table ", t.id, " (\"", t.name, "\")");
    if (!ids.insert(t.id).second || !names.insert(t.name).second) {
      return absl::InvalidArgumentError(absl::StrCat(which, ": duplicate id or name"));
    }
    if (t.name.size() > kMaxNameBytes) {
      return absl::InvalidArgumentError(absl::StrCat(which, ": name too long"));
    }
    if (t.payload_bytes == 0 || t.payload_bytes > kMaxBlockRawBytes - 8) {
      return absl::InvalidArgumentError(
          absl::StrCat(which, ": payload_bytes ", t.payload_bytes, " out of range"));
    }
  }
  if (h.delta ? h.base_clock >= h.clock : h.base_clock != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "checkpoint header: base_clock ", h.base_clock, " of a ", h.delta ? "delta" : "full",
        " file at clock ", h.clock, " (a delta's base must be older; a full file has none)"));
  }
  for (size_t i = 0; i < h.partitions.size(); ++i) {
    if (h.partitions[i] >= h.num_partitions || (i > 0 && h.partitions[i] <= h.partitions[i - 1])) {
      return absl::InvalidArgumentError(
          absl::StrCat("checkpoint header: partitions must be strictly increasing and < ",
                       h.num_partitions, "; entry ", i, " is ", h.partitions[i]));
    }
  }
  return absl::OkStatus();
}

// ---------------------------------------------------------------- Writer

struct CheckpointFileWriter::Impl {
  FileHeader header;
  WriterOptions options;
  std::unique_ptr<AtomicFileWriter> file;
  absl::Status failed;  // Sticky: the first I/O error.
  bool finished = false;
  // The open block.
  bool open = false;
  uint32_t partition = 0, table_id = 0, payload_bytes = 0;
  BlockKind kind = BlockKind::kRows;
  uint32_t count = 0;
  std::string keys, payloads, raw, stored, block_header;
  ZSTD_CCtx* cctx = nullptr;
  uint64_t num_blocks = 0, num_records = 0;

  ~Impl() { ZSTD_freeCCtx(cctx); }

  absl::Status Append(absl::string_view data) {
    if (failed.ok()) failed = file->Append(data);
    return failed;
  }
  absl::Status FlushBlock();
  absl::Status AddRecord(uint32_t partition, uint32_t table_id, uint64_t key,
                         absl::string_view payload, BlockKind kind);
};

absl::Status CheckpointFileWriter::Impl::FlushBlock() {
  if (!open) return failed;
  open = false;
  raw.assign(keys);
  raw += payloads;
  keys.clear();
  payloads.clear();
  uint32_t flags = kind == BlockKind::kDeletions         ? kFlagDeleted
                   : kind == BlockKind::kAdmissionCounts ? internal::kFlagAdmissionCounts
                                                         : 0;
  absl::string_view data = raw;
  if (options.compression == Compression::kZstd) {
    stored.resize(ZSTD_compressBound(raw.size()));
    const size_t n = ZSTD_compressCCtx(cctx, &stored[0], stored.size(), raw.data(), raw.size(),
                                       options.zstd_level);
    if (!ZSTD_isError(n) && n < raw.size()) {  // Else store it raw.
      stored.resize(n);
      data = stored;
      flags |= kFlagZstd;
    }
  }
  block_header.clear();
  PutU32(&block_header, kBlockTag);
  PutU32(&block_header, partition);
  PutU32(&block_header, table_id);
  PutU32(&block_header, flags);
  PutU32(&block_header, count);
  PutU32(&block_header, static_cast<uint32_t>(raw.size()));
  PutU32(&block_header, static_cast<uint32_t>(data.size()));
  uint32_t crc = Crc32c(block_header);
  crc = Crc32cExtend(crc, data.data(), data.size());
  std::string trailer;
  PutU32(&trailer, crc);
  RETURN_IF_ERROR(Append(block_header));
  RETURN_IF_ERROR(Append(data));
  RETURN_IF_ERROR(Append(trailer));
  ++num_blocks;
  num_records += count;
  count = 0;
  return absl::OkStatus();
}

absl::Status CheckpointFileWriter::Impl::AddRecord(uint32_t part, uint32_t table, uint64_t key,
                                                   absl::string_view payload, BlockKind what) {
  RETURN_IF_ERROR(failed);
  if (finished) return absl::FailedPreconditionError("add after Finish()");
  if (what == BlockKind::kAdmissionCounts && !header.admission_counts) {
    return absl::FailedPreconditionError(
        absl::StrCat(file->path(), ": an admission count in a file whose header has none"));
  }
  if (!open || part != partition || table != table_id || what != kind) {
    if (!std::binary_search(header.partitions.begin(), header.partitions.end(), part)) {
      return absl::InvalidArgumentError(
          absl::StrCat(file->path(), ": partition ", part, " is not in the file's header"));
    }
    auto it = std::find_if(header.tables.begin(), header.tables.end(),
                           [&](const TableSchema& t) { return t.id == table; });
    if (it == header.tables.end()) {
      return absl::InvalidArgumentError(
          absl::StrCat(file->path(), ": table ", table, " is not in the file's schema"));
    }
    RETURN_IF_ERROR(FlushBlock());
    open = true;
    partition = part;
    table_id = table;
    kind = what;
    payload_bytes = what == BlockKind::kRows              ? it->payload_bytes
                    : what == BlockKind::kAdmissionCounts ? kAdmissionCountBytes
                                                          : 0;
  }
  if (payload.size() != payload_bytes) {
    return absl::InvalidArgumentError(absl::StrCat(
        file->path(), ": table ", table, " payload of ", payload.size(), " bytes, ",
        what == BlockKind::kRows ? "the schema says " : "an admission count has ", payload_bytes));
  }
  PutU64(&keys, key);
  payloads.append(payload.data(), payload.size());
  ++count;
  const size_t record = 8 + payload_bytes;
  if (keys.size() + payloads.size() + record > options.block_bytes) {
    return FlushBlock();
  }
  return absl::OkStatus();
}

CheckpointFileWriter::CheckpointFileWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

CheckpointFileWriter::~CheckpointFileWriter() = default;

absl::StatusOr<std::unique_ptr<CheckpointFileWriter>> CheckpointFileWriter::Create(
    const std::string& path, FileHeader header, const WriterOptions& options) {
  RETURN_IF_ERROR(ValidateHeader(header));
  if (options.block_bytes == 0 || options.block_bytes > kMaxBlockRawBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat("block_bytes must be in [1, ", kMaxBlockRawBytes, "]"));
  }
  auto impl = std::make_unique<Impl>();
  impl->options = options;
  if (options.compression == Compression::kZstd) {
    impl->cctx = ZSTD_createCCtx();
    if (impl->cctx == nullptr) return absl::ResourceExhaustedError("zstd");
  }
  ASSIGN_OR_RETURN(impl->file, AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(impl->Append(EncodeHeader(header)));
  impl->header = std::move(header);
  return std::unique_ptr<CheckpointFileWriter>(new CheckpointFileWriter(std::move(impl)));
}

absl::Status CheckpointFileWriter::Add(uint32_t partition, uint32_t table_id, uint64_t key,
                                       absl::string_view payload) {
  return impl_->AddRecord(partition, table_id, key, payload, BlockKind::kRows);
}

absl::Status CheckpointFileWriter::AddDeleted(uint32_t partition, uint32_t table_id, uint64_t key) {
  return impl_->AddRecord(partition, table_id, key, absl::string_view(), BlockKind::kDeletions);
}

absl::Status CheckpointFileWriter::AddAdmissionCount(uint32_t partition, uint32_t table_id,
                                                     uint64_t key, absl::string_view count) {
  return impl_->AddRecord(partition, table_id, key, count, BlockKind::kAdmissionCounts);
}

absl::StatusOr<WrittenFile> CheckpointFileWriter::Finish() {
  Impl& w = *impl_;
  if (w.finished) return absl::FailedPreconditionError("Finish() called twice");
  RETURN_IF_ERROR(w.FlushBlock());
  w.finished = true;
  std::string footer;
  PutU32(&footer, kFooterTag);
  PutU64(&footer, w.num_blocks);
  PutU64(&footer, w.num_records);
  PutU32(&footer, Crc32c(footer));
  RETURN_IF_ERROR(w.Append(footer));
  RETURN_IF_ERROR(w.file->Commit());
  WrittenFile out;
  out.path = w.file->path();
  out.size = w.file->size();
  out.crc32c = w.file->crc32c();
  out.partitions = w.header.partitions;
  out.num_blocks = w.num_blocks;
  out.num_records = w.num_records;
  return out;
}

}  // namespace checkpoint
}  // namespace shardps

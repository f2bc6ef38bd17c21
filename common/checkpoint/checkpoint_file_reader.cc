// The reader of checkpoint files: reads everything, verifies everything,
// then hands out views of the records.
#include <zstd.h>

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/checkpoint_format.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/partition.h"
#include "common/status_macros.h"

namespace shardps {
namespace checkpoint {

// The format's constants and helpers.
using internal::kBlockHeaderSize;
using internal::kBlockTag;
using internal::kFlagAdmissionCounts;
using internal::kFlagDeleted;
using internal::kFlagZstd;
using internal::kFooterSize;
using internal::kFooterTag;
using internal::kHeaderPrefix;
using internal::kMagicSize;
using internal::kMaxHeaderBody;
using internal::kMaxNameBytes;
using internal::LoadU32;
using internal::LoadU64;

namespace {

// Bounds-checked little-endian reads from a byte range.
class Decoder {
 public:
  explicit Decoder(absl::string_view in) : in_(in) {}
  bool U32(uint32_t* v) { return Fixed(v, 4); }
  bool U64(uint64_t* v) { return Fixed(v, 8); }
  bool Str(std::string* s) {
    uint32_t n;
    if (!U32(&n) || n > in_.size() - pos_ || n > kMaxNameBytes) return false;
    s->assign(in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  size_t remaining() const { return in_.size() - pos_; }

 private:
  template <typename T>
  bool Fixed(T* v, size_t n) {
    if (remaining() < n) return false;
    std::memcpy(v, in_.data() + pos_, n);
    pos_ += n;
    return true;
  }
  absl::string_view in_;
  size_t pos_ = 0;
};

}  // namespace

CheckpointFileReader::CheckpointFileReader(std::string contents, std::string name)
    : contents_(std::move(contents)), name_(std::move(name)) {}

absl::StatusOr<std::unique_ptr<CheckpointFileReader>> CheckpointFileReader::Open(
    const std::string& path, const Expectations& expect) {
  ASSIGN_OR_RETURN(std::string contents, ReadFileToString(path));
  return Parse(std::move(contents), path, expect);
}

absl::StatusOr<std::unique_ptr<CheckpointFileReader>> CheckpointFileReader::Parse(
    std::string contents, std::string name, const Expectations& expect) {
  std::unique_ptr<CheckpointFileReader> reader(
      new CheckpointFileReader(std::move(contents), std::move(name)));
  RETURN_IF_ERROR(reader->ParseAll());
  RETURN_IF_ERROR(reader->Check(expect));
  return reader;
}

absl::Status CheckpointFileReader::Error(absl::StatusCode code, absl::string_view what) const {
  return absl::Status(code, absl::StrCat(name_, ": ", what));
}

const TableSchema* CheckpointFileReader::FindTable(uint32_t table_id) const {
  for (const TableSchema& t : header_.tables) {
    if (t.id == table_id) return &t;
  }
  return nullptr;
}

absl::Status CheckpointFileReader::ParseAll() {
  size_t pos = 0;
  RETURN_IF_ERROR(ParseHeader(&pos));
  while (true) {
    if (contents_.size() - pos < 4) {
      return Error(absl::StatusCode::kDataLoss,
                   absl::StrCat("truncated after ", contents_.size(), " bytes: no footer (",
                                blocks_.size(), " complete blocks)"));
    }
    const uint32_t tag = LoadU32(contents_.data() + pos);
    if (tag == kFooterTag) return ParseFooter(pos);
    if (tag != kBlockTag) {
      return Error(absl::StatusCode::kDataLoss,
                   absl::StrFormat("offset %u: block %u: bad tag 0x%08x "
                                   "(expected a block or the footer)",
                                   pos, blocks_.size(), tag));
    }
    RETURN_IF_ERROR(ParseBlock(&pos));
  }
}

absl::Status CheckpointFileReader::ParseHeader(size_t* pos) {
  const absl::string_view in = contents_;
  if (in.size() < kHeaderPrefix) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("truncated after ", in.size(), " bytes: shorter than a header"));
  }
  if (in.substr(0, kMagicSize) != absl::string_view(kFileMagic, kMagicSize)) {
    return Error(absl::StatusCode::kDataLoss, "bad magic: not a shardps checkpoint file");
  }
  const uint32_t version = LoadU32(in.data() + kMagicSize);
  if (version < kFullFileFormatVersion || version > kFileFormatVersion) {
    return Error(
        absl::StatusCode::kFailedPrecondition,
        absl::StrCat("format version ", version, " is not supported (this build reads versions ",
                     kFullFileFormatVersion, " to ", kFileFormatVersion, ")"));
  }
  const uint32_t body_len = LoadU32(in.data() + kMagicSize + 4);
  if (body_len > kMaxHeaderBody) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("header length ", body_len, " is corrupt"));
  }
  const size_t end = kHeaderPrefix + body_len;
  if (in.size() < end + 4) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("truncated after ", in.size(), " bytes: inside the header (", end + 4,
                              " bytes)"));
  }
  const uint32_t stored = LoadU32(in.data() + end);
  const uint32_t computed = Crc32c(in.data(), end);
  if (stored != computed) {
    return Error(absl::StatusCode::kDataLoss, absl::StrFormat("header CRC mismatch (stored 0x%08x, "
                                                              "computed 0x%08x)",
                                                              stored, computed));
  }
  Decoder d(in.substr(kHeaderPrefix, body_len));
  FileHeader& h = header_;
  uint32_t n_tables = 0, n_parts = 0;
  bool ok = d.Str(&h.job_name) && d.U64(&h.clock) && d.U32(&h.num_partitions) && d.U32(&n_tables) &&
            n_tables <= d.remaining() / 28;  // Smallest entry: 28 bytes.
  for (uint32_t i = 0; ok && i < n_tables; ++i) {
    TableSchema t;
    ok = d.U32(&t.id) && d.Str(&t.name) && d.U32(&t.kind) && d.U32(&t.dim) &&
         d.U32(&t.payload_bytes) && d.U64(&t.fingerprint);
    h.tables.push_back(std::move(t));
  }
  ok = ok && d.U32(&n_parts) && n_parts <= d.remaining() / 4;
  for (uint32_t i = 0; ok && i < n_parts; ++i) {
    uint32_t p;
    ok = d.U32(&p);
    h.partitions.push_back(p);
  }
  if (ok && version >= 2) {
    uint32_t kind = 0;
    ok = d.U32(&kind) && d.U64(&h.base_clock) &&
         (kind == internal::kFileKindFull || kind == internal::kFileKindDelta);
    h.delta = kind == internal::kFileKindDelta;
  }
  h.admission_counts = version >= 3;
  if (!ok || d.remaining() != 0) {
    return Error(absl::StatusCode::kDataLoss, "header body is malformed");
  }
  absl::Status valid = ValidateHeader(h);
  if (!valid.ok()) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("header is inconsistent: ", valid.message()));
  }
  *pos = end + 4;
  return absl::OkStatus();
}

absl::Status CheckpointFileReader::ParseBlock(size_t* pos) {
  const size_t start = *pos;
  const size_t index = blocks_.size();
  const char* p = contents_.data() + start;
  const size_t left = contents_.size() - start;
  const std::string where = absl::StrCat("block ", index, " at offset ", start);
  auto fail = [&](absl::string_view what) {
    return Error(absl::StatusCode::kDataLoss, absl::StrCat(where, ": ", what));
  };
  if (left < kBlockHeaderSize + 4) {
    return Error(absl::StatusCode::kDataLoss, absl::StrCat("truncated after ", contents_.size(),
                                                           " bytes: inside the header of ", where));
  }
  const uint32_t partition = LoadU32(p + 4), table_id = LoadU32(p + 8), flags = LoadU32(p + 12),
                 count = LoadU32(p + 16), raw_len = LoadU32(p + 20), stored_len = LoadU32(p + 24);
  if (stored_len > left - kBlockHeaderSize - 4) {
    return Error(
        absl::StatusCode::kDataLoss,
        absl::StrCat("truncated after ", contents_.size(), " bytes: ", where, " claims ",
                     stored_len, " stored bytes, only ", left - kBlockHeaderSize - 4, " remain"));
  }
  const size_t crc_at = kBlockHeaderSize + stored_len;
  const uint32_t stored_crc = LoadU32(p + crc_at);
  const uint32_t crc = Crc32c(p, crc_at);
  if (stored_crc != crc) {
    return fail(
        absl::StrFormat("CRC mismatch (partition %u, table %u; stored 0x%08x, computed "
                        "0x%08x)",
                        partition, table_id, stored_crc, crc));
  }
  const TableSchema* table = FindTable(table_id);
  const bool deleted = (flags & kFlagDeleted) != 0;
  const bool counts = (flags & kFlagAdmissionCounts) != 0;
  if (table == nullptr) return fail(absl::StrCat("unknown table ", table_id));
  if (!std::binary_search(header_.partitions.begin(), header_.partitions.end(), partition)) {
    return fail(absl::StrCat("partition ", partition, " not in the header"));
  }
  const uint32_t known =
      kFlagZstd | kFlagDeleted | (header_.admission_counts ? kFlagAdmissionCounts : 0);
  const uint64_t payload = deleted  ? 0
                           : counts ? kAdmissionCountBytes
                                    : uint64_t{table->payload_bytes};
  const uint64_t record = 8 + payload;
  if ((flags & ~known) != 0 || (deleted && counts) || count == 0 || raw_len > kMaxBlockRawBytes ||
      uint64_t{count} * record != raw_len || ((flags & kFlagZstd) == 0 && stored_len != raw_len)) {
    return fail(absl::StrCat("inconsistent lengths or flags (flags ", flags, ", ", count,
                             " records, raw ", raw_len, " bytes, stored ", stored_len, ")"));
  }
  absl::string_view raw(p + kBlockHeaderSize, stored_len);
  if (flags & kFlagZstd) {
    std::string& out = decompressed_.emplace_back(raw_len, '\0');
    const size_t n = ZSTD_decompress(&out[0], out.size(), raw.data(), raw.size());
    if (ZSTD_isError(n) || n != raw_len) {
      return fail(absl::StrCat("zstd data does not decompress to ", raw_len, " bytes: ",
                               ZSTD_isError(n) ? ZSTD_getErrorName(n) : absl::StrCat(n, " bytes")));
    }
    raw = out;
  }
  blocks_.emplace_back(partition, table_id,
                       deleted  ? BlockKind::kDeletions
                       : counts ? BlockKind::kAdmissionCounts
                                : BlockKind::kRows,
                       count, payload, raw);
  num_records_ += count;
  *pos = start + crc_at + 4;
  return absl::OkStatus();
}

absl::Status CheckpointFileReader::ParseFooter(size_t pos) {
  const size_t left = contents_.size() - pos;
  if (left < kFooterSize) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("truncated after ", contents_.size(), " bytes: inside the footer"));
  }
  const char* p = contents_.data() + pos;
  const uint32_t stored = LoadU32(p + kFooterSize - 4);
  const uint32_t computed = Crc32c(p, kFooterSize - 4);
  if (stored != computed) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrFormat("footer at offset %u: CRC mismatch", pos));
  }
  const uint64_t blocks = LoadU64(p + 4), records = LoadU64(p + 12);
  if (blocks != blocks_.size() || records != num_records_) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat("footer says ", blocks, " blocks and ", records,
                              " records, the file holds ", blocks_.size(), " and ", num_records_));
  }
  if (left != kFooterSize) {
    return Error(absl::StatusCode::kDataLoss,
                 absl::StrCat(left - kFooterSize, " unexpected bytes after the footer"));
  }
  return absl::OkStatus();
}

namespace {

// Compares one field of a table; appends a message on mismatch.
template <typename T>
void CompareField(const TableSchema& t, absl::string_view field, const T& file, const T& job,
                  std::vector<std::string>* out) {
  if (file == job) return;
  out->push_back(absl::StrCat("table ", t.id, " (\"", t.name, "\") ", field, " ", file,
                              " does not match the job config's ", job));
}

std::string PartitionList(const std::vector<uint32_t>& p) {
  if (p.size() > 8) {
    return absl::StrCat(p.size(), " partitions [", p.front(), "..", p.back(), "]");
  }
  return absl::StrCat("[", absl::StrJoin(p, ","), "]");
}

}  // namespace

absl::Status CheckpointFileReader::Check(const Expectations& expect) const {
  const auto mismatch = [&](absl::string_view what) {
    return Error(absl::StatusCode::kFailedPrecondition, what);
  };
  const FileHeader& h = header_;
  if (expect.job_name && *expect.job_name != h.job_name) {
    return mismatch(absl::StrCat("job \"", h.job_name, "\" does not match the job config's \"",
                                 *expect.job_name, "\""));
  }
  if (expect.clock && *expect.clock != h.clock) {
    return mismatch(
        absl::StrCat("clock ", h.clock, " does not match the manifest's ", *expect.clock));
  }
  if (expect.num_partitions && *expect.num_partitions != h.num_partitions) {
    return mismatch(absl::StrCat("num_partitions ", h.num_partitions,
                                 " does not match the job config's ", *expect.num_partitions));
  }
  if (expect.delta && *expect.delta != h.delta) {
    return mismatch(absl::StrCat("a ", h.delta ? "delta" : "full", " file, the manifest expects a ",
                                 *expect.delta ? "delta" : "full", " one"));
  }
  if (expect.base_clock && *expect.base_clock != h.base_clock) {
    return mismatch(absl::StrCat("base clock ", h.base_clock, " does not match the manifest's ",
                                 *expect.base_clock));
  }
  if (expect.partitions && *expect.partitions != h.partitions) {
    return mismatch(absl::StrCat("partitions ", PartitionList(h.partitions),
                                 " do not match the expected ", PartitionList(*expect.partitions)));
  }
  if (expect.tables) {
    std::vector<std::string> problems;
    for (const TableSchema& job : *expect.tables) {
      const TableSchema* t = FindTable(job.id);
      if (t == nullptr) {
        problems.push_back(
            absl::StrCat("table ", job.id, " (\"", job.name, "\") of the job config is missing"));
        continue;
      }
      CompareField(*t, "name", t->name, job.name, &problems);
      CompareField(*t, "kind", t->kind, job.kind, &problems);
      CompareField(*t, "dim", t->dim, job.dim, &problems);
      CompareField(*t, "payload_bytes", t->payload_bytes, job.payload_bytes, &problems);
      CompareField(*t, "fingerprint", absl::StrFormat("%016x", t->fingerprint),
                   absl::StrFormat("%016x", job.fingerprint), &problems);
    }
    for (const TableSchema& t : h.tables) {
      const bool known = std::any_of(expect.tables->begin(), expect.tables->end(),
                                     [&](const TableSchema& j) { return j.id == t.id; });
      if (!known) {
        problems.push_back(
            absl::StrCat("table ", t.id, " (\"", t.name, "\") is not in the job config"));
      }
    }
    if (!problems.empty()) return mismatch(absl::StrJoin(problems, "; "));
  }
  if (expect.check_key_partitions) {
    for (size_t b = 0; b < blocks_.size(); ++b) {
      const RecordBlock& block = blocks_[b];
      for (size_t i = 0; i < block.size(); ++i) {
        const uint32_t want = PartitionOf(block.table_id(), block.key(i), h.num_partitions);
        if (want != block.partition()) {
          return Error(
              absl::StatusCode::kDataLoss,
              absl::StrCat("block ", b, ": key ", block.key(i), " of table ", block.table_id(),
                           " belongs to partition ", want, ", not ", block.partition()));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace checkpoint
}  // namespace shardps

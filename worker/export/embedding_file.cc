#include "worker/export/embedding_file.h"

#include <algorithm>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/status_macros.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the embedding file format is little-endian; add byte swaps");

namespace shardps {
namespace exporter {
namespace {

constexpr size_t kMagicBytes = 8;
constexpr size_t kFixedHeaderBytes = kMagicBytes + 4 * 4 + 8 * 2 + 4 * 2;  // 48.
constexpr size_t kFooterBytes = kMagicBytes + 4;

void PutU32(std::string* out, uint32_t v) { out->append(reinterpret_cast<const char*>(&v), 4); }
void PutU64(std::string* out, uint64_t v) { out->append(reinterpret_cast<const char*>(&v), 8); }

uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
uint64_t LoadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

std::string EncodeHeader(const EmbeddingFileHeader& h) {
  std::string out(kEmbeddingFileMagic, kMagicBytes);
  PutU32(&out, kEmbeddingFileVersion);
  PutU32(&out, h.table_id);
  PutU32(&out, h.dim);
  PutU32(&out, static_cast<uint32_t>(h.dtype));
  PutU64(&out, h.num_rows);
  PutU64(&out, h.clock);
  PutU32(&out, static_cast<uint32_t>(h.table_name.size()));
  out += h.table_name;
  PutU32(&out, static_cast<uint32_t>(h.job_name.size()));
  out += h.job_name;
  return out;
}

absl::Status CheckWriterArgs(const std::string& path, const EmbeddingFileHeader& header,
                             absl::Span<const uint64_t> keys, absl::Span<const float> values) {
  const std::string where = absl::StrCat(path, ": ");
  if (header.dim == 0) return absl::InvalidArgumentError(where + "dim must be > 0");
  if (header.dtype != EmbeddingDtype::kFp32) {
    return absl::InvalidArgumentError(where + "only fp32 rows are supported");
  }
  if (header.table_name.size() > kMaxEmbeddingNameBytes ||
      header.job_name.size() > kMaxEmbeddingNameBytes) {
    return absl::InvalidArgumentError(where + "table or job name longer than 4096 bytes");
  }
  if (values.size() != keys.size() * header.dim) {
    return absl::InvalidArgumentError(absl::StrCat(where, values.size(), " values for ",
                                                   keys.size(), " keys of dim ", header.dim));
  }
  for (size_t i = 1; i < keys.size(); ++i) {
    if (keys[i] <= keys[i - 1]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, "keys must be strictly increasing (key ", keys[i], " at row ", i,
                       " follows ", keys[i - 1], ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<WrittenEmbeddingFile> WriteEmbeddingFile(const std::string& path,
                                                        EmbeddingFileHeader header,
                                                        absl::Span<const uint64_t> keys,
                                                        absl::Span<const float> values) {
  RETURN_IF_ERROR(CheckWriterArgs(path, header, keys, values));
  header.version = kEmbeddingFileVersion;
  header.num_rows = keys.size();
  ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::AtomicFileWriter> out,
                   checkpoint::AtomicFileWriter::Create(path));
  RETURN_IF_ERROR(out->Append(EncodeHeader(header)));
  RETURN_IF_ERROR(out->Append(absl::string_view(reinterpret_cast<const char*>(keys.data()),
                                                keys.size() * sizeof(uint64_t))));
  RETURN_IF_ERROR(out->Append(absl::string_view(reinterpret_cast<const char*>(values.data()),
                                                values.size() * sizeof(float))));
  RETURN_IF_ERROR(out->Append(absl::string_view(kEmbeddingFooterMagic, kMagicBytes)));
  std::string crc;
  PutU32(&crc, out->crc32c());  // CRC of every byte so far.
  RETURN_IF_ERROR(out->Append(crc));
  WrittenEmbeddingFile written;
  written.path = path;
  written.size = out->size();
  written.crc32c = out->crc32c();
  RETURN_IF_ERROR(out->Commit());
  return written;
}

absl::StatusOr<std::unique_ptr<EmbeddingFileReader>> EmbeddingFileReader::Open(
    const std::string& path) {
  ASSIGN_OR_RETURN(std::string contents, checkpoint::ReadFileToString(path));
  return Parse(std::move(contents), path);
}

absl::StatusOr<std::unique_ptr<EmbeddingFileReader>> EmbeddingFileReader::Parse(
    std::string contents, std::string name) {
  std::unique_ptr<EmbeddingFileReader> reader(
      new EmbeddingFileReader(std::move(contents), std::move(name)));
  RETURN_IF_ERROR(reader->Verify());
  return reader;
}

absl::Status EmbeddingFileReader::ParseHeader(size_t* pos) {
  const std::string& c = contents_;
  auto loss = [this](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name_, ": ", what));
  };
  if (c.size() < kFixedHeaderBytes) {
    if (c.compare(0, std::min(c.size(), kMagicBytes), std::string(kEmbeddingFileMagic, kMagicBytes),
                  0, std::min(c.size(), kMagicBytes)) != 0) {
      return loss("not an embedding file (bad magic)");
    }
    return loss(absl::StrCat("truncated: ", c.size(), " bytes, shorter than the header"));
  }
  if (c.compare(0, kMagicBytes, kEmbeddingFileMagic) != 0) {
    return loss("not an embedding file (bad magic, expected \"SHPSEMB1\")");
  }
  header_.version = LoadU32(&c[8]);
  if (header_.version != kEmbeddingFileVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": embedding file version ", header_.version,
                     " is not supported (this reader knows version ", kEmbeddingFileVersion, ")"));
  }
  header_.table_id = LoadU32(&c[12]);
  header_.dim = LoadU32(&c[16]);
  const uint32_t dtype = LoadU32(&c[20]);
  if (dtype != static_cast<uint32_t>(EmbeddingDtype::kFp32)) {
    return absl::FailedPreconditionError(
        absl::StrCat(name_, ": dtype ", dtype, " is not supported (1 = fp32)"));
  }
  header_.num_rows = LoadU64(&c[24]);
  header_.clock = LoadU64(&c[32]);
  if (header_.dim == 0) return loss("dim 0");
  *pos = 40;
  for (std::string* s : {&header_.table_name, &header_.job_name}) {
    if (c.size() < *pos + 4) return loss("truncated inside the header");
    const uint32_t len = LoadU32(&c[*pos]);
    *pos += 4;
    if (len > kMaxEmbeddingNameBytes) return loss(absl::StrCat("name of ", len, " bytes"));
    if (c.size() < *pos + len) return loss("truncated inside the header");
    s->assign(c, *pos, len);
    *pos += len;
  }
  return absl::OkStatus();
}

absl::Status EmbeddingFileReader::Verify() {
  size_t pos = 0;
  RETURN_IF_ERROR(ParseHeader(&pos));
  const std::string& c = contents_;
  const uint64_t row_bytes = 8 + uint64_t{4} * header_.dim;
  if (header_.num_rows > (c.size() / row_bytes) + 1) {  // Guards the product below.
    return absl::DataLossError(
        absl::StrCat(name_, ": ", header_.num_rows, " rows cannot fit in ", c.size(), " bytes"));
  }
  const uint64_t expected = pos + header_.num_rows * row_bytes + kFooterBytes;
  if (c.size() != expected) {
    return absl::DataLossError(absl::StrCat(
        name_, ": ", c.size(), " bytes, expected ", expected, " for ", header_.num_rows,
        " rows of dim ", header_.dim, c.size() < expected ? " (truncated)" : " (trailing bytes)"));
  }
  const size_t footer = c.size() - kFooterBytes;
  if (c.compare(footer, kMagicBytes, kEmbeddingFooterMagic) != 0) {
    return absl::DataLossError(absl::StrCat(name_, ": bad footer magic"));
  }
  const uint32_t stored = LoadU32(&c[footer + kMagicBytes]);
  const uint32_t computed = checkpoint::Crc32c(c.data(), footer + kMagicBytes);
  if (stored != computed) {
    return absl::DataLossError(absl::StrCat(name_, ": CRC mismatch (stored ",
                                            absl::Hex(stored, absl::kZeroPad8), ", computed ",
                                            absl::Hex(computed, absl::kZeroPad8), ")"));
  }
  keys_offset_ = pos;
  for (uint64_t i = 1; i < header_.num_rows; ++i) {
    if (key(i) <= key(i - 1)) {
      return absl::DataLossError(absl::StrCat(name_, ": keys not strictly increasing at row ", i));
    }
  }
  values_.resize(header_.num_rows * header_.dim);
  if (!values_.empty()) {
    std::memcpy(values_.data(), c.data() + pos + header_.num_rows * 8,
                values_.size() * sizeof(float));
  }
  return absl::OkStatus();
}

uint64_t EmbeddingFileReader::key(uint64_t i) const {
  return LoadU64(contents_.data() + keys_offset_ + 8 * i);
}

absl::Span<const float> EmbeddingFileReader::row(uint64_t i) const {
  return absl::MakeConstSpan(values_.data() + i * header_.dim, header_.dim);
}

std::optional<absl::Span<const float>> EmbeddingFileReader::Find(uint64_t k) const {
  uint64_t lo = 0, hi = header_.num_rows;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    if (key(mid) < k) {
      lo = mid + 1;
    } else {
      hi = mid;
    }
  }
  if (lo < header_.num_rows && key(lo) == k) return row(lo);
  return std::nullopt;
}

}  // namespace exporter
}  // namespace shardps

#include "worker/data/line_source.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace data {
namespace {

constexpr unsigned kZlibBufferBytes = 256 << 10;

gzFile Gz(void* p) { return static_cast<gzFile>(p); }

}  // namespace

absl::StatusOr<std::unique_ptr<LineSource>> LineSource::Open(
    const std::string& path, size_t max_line_bytes) {
  if (max_line_bytes < 16) {
    return absl::InvalidArgumentError("max_line_bytes must be >= 16");
  }
  errno = 0;
  gzFile gz = gzopen(path.c_str(), "rb");
  if (gz == nullptr) {
    const int err = errno;
    const std::string what = absl::StrCat(path, ": cannot open: ",
                                          err ? std::strerror(err) : "out of memory");
    if (err == ENOENT) return absl::NotFoundError(what);
    return absl::FailedPreconditionError(what);
  }
  gzbuffer(gz, kZlibBufferBytes);
  return std::unique_ptr<LineSource>(new LineSource(path, gz, max_line_bytes));
}

LineSource::LineSource(std::string path, void* gz, size_t max_line_bytes)
    : path_(std::move(path)), gz_(gz), buf_(max_line_bytes) {}

LineSource::~LineSource() { gzclose(Gz(gz_)); }

absl::Status LineSource::ReadError(absl::string_view what) const {
  int errnum = Z_OK;
  const char* message = gzerror(Gz(gz_), &errnum);
  return absl::DataLossError(absl::StrCat(
      path_, ": ", what, " near uncompressed byte ", next_offset_, ": ",
      errnum == Z_ERRNO ? std::strerror(errno) : message));
}

absl::Status LineSource::Fill() {
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  const int n = gzread(Gz(gz_), buf_.data() + end_,
                       static_cast<unsigned>(buf_.size() - end_));
  // gzdirect is only meaningful after the first read.
  compressed_ = gzdirect(Gz(gz_)) == 0;
  if (n < 0) return ReadError("read error");
  if (n == 0) {
    int errnum = Z_OK;
    gzerror(Gz(gz_), &errnum);
    // Z_BUF_ERROR at the end: the gzip stream stopped mid-member.
    if (errnum != Z_OK) return ReadError("truncated or corrupt gzip data");
    eof_ = true;
  }
  end_ += static_cast<size_t>(n);
  return absl::OkStatus();
}

absl::Status LineSource::SkipRestOfLine() {
  while (true) {
    const char* start = buf_.data() + begin_;
    const void* nl = std::memchr(start, '\n', end_ - begin_);
    if (nl != nullptr) {
      const size_t n = static_cast<const char*>(nl) - start + 1;
      begin_ += n;
      next_offset_ += n;
      return absl::OkStatus();
    }
    next_offset_ += end_ - begin_;
    begin_ = end_;
    if (eof_) return absl::OkStatus();
    absl::Status status = Fill();
    if (!status.ok()) return status;
  }
}

absl::StatusOr<bool> LineSource::Next(Line* line) {
  line->too_long = false;
  while (true) {
    const char* start = buf_.data() + begin_;
    const size_t avail = end_ - begin_;
    const void* nl = std::memchr(start, '\n', avail);
    if (nl != nullptr) {
      const size_t len = static_cast<const char*>(nl) - start;
      line->text = absl::string_view(start, len);
      begin_ += len + 1;
      next_offset_ += len + 1;
      ++next_line_;
      return true;
    }
    if (eof_) {
      if (avail == 0) return false;
      line->text = absl::string_view(start, avail);
      begin_ = end_;
      next_offset_ += avail;
      ++next_line_;
      return true;
    }
    if (begin_ == 0 && end_ == buf_.size()) {
      // No '\n' in a full buffer: the line is too long to hold.
      absl::Status status = SkipRestOfLine();
      if (!status.ok()) return status;
      line->text = absl::string_view();
      line->too_long = true;
      ++next_line_;
      return true;
    }
    absl::Status status = Fill();
    if (!status.ok()) return status;
  }
}

absl::Status LineSource::Seek(uint64_t offset, uint64_t line_index) {
  begin_ = end_ = 0;
  eof_ = false;
  char prev = '\n';
  if (offset > 0) {
    if (gzseek(Gz(gz_), static_cast<z_off_t>(offset - 1), SEEK_SET) < 0) {
      return ReadError(absl::StrCat("cannot seek to byte ", offset));
    }
    const int n = gzread(Gz(gz_), &prev, 1);
    if (n < 0) return ReadError("read error");
    if (n == 0) prev = 0;  // Past the end.
  } else if (gzrewind(Gz(gz_)) != 0) {
    return ReadError("cannot rewind");
  }
  next_offset_ = offset;
  next_line_ = line_index;
  if (prev == '\n') return absl::OkStatus();
  // Also legal: the end of a file whose last line has no '\n'.
  if (prev != 0) {
    absl::Status status = Fill();
    if (!status.ok()) return status;
    if (eof_ && end_ == 0) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      path_, ": byte ", offset, " is not the start of a line of the file"));
}

}  // namespace data
}  // namespace shardps

#include "worker/data/line_source.h"

#include <fcntl.h>
#include <unistd.h>
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

absl::StatusOr<std::unique_ptr<LineSource>> LineSource::Open(const std::string& path,
                                                             size_t max_line_bytes) {
  if (max_line_bytes < 16) {
    return absl::InvalidArgumentError("max_line_bytes must be >= 16");
  }
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    const std::string what = absl::StrCat(path, ": cannot open: ", std::strerror(err));
    if (err == ENOENT) return absl::NotFoundError(what);
    return absl::FailedPreconditionError(what);
  }
  // The gzip magic; pread leaves the descriptor's offset at 0 for zlib.
  unsigned char magic[2] = {0, 0};
  ssize_t n;
  do {
    n = pread(fd, magic, 2, 0);
  } while (n < 0 && errno == EINTR);
  if (n < 0) {
    const std::string what = absl::StrCat(path, ": cannot read: ", std::strerror(errno));
    close(fd);
    return absl::FailedPreconditionError(what);
  }
  if (n < 2 || magic[0] != 0x1f || magic[1] != 0x8b) {
    return std::unique_ptr<LineSource>(new LineSource(path, fd, nullptr, max_line_bytes));
  }
  gzFile gz = gzdopen(fd, "rb");
  if (gz == nullptr) {
    close(fd);
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot open: out of memory"));
  }
  gzbuffer(gz, kZlibBufferBytes);
  return std::unique_ptr<LineSource>(new LineSource(path, -1, gz, max_line_bytes));
}

LineSource::LineSource(std::string path, int fd, void* gz, size_t max_line_bytes)
    : path_(std::move(path)), fd_(fd), gz_(gz), compressed_(gz != nullptr), buf_(max_line_bytes) {}

LineSource::~LineSource() {
  if (gz_ != nullptr) gzclose(Gz(gz_));
  if (fd_ >= 0) close(fd_);
}

absl::Status LineSource::ReadError(absl::string_view what) const {
  const char* message = std::strerror(errno);
  if (gz_ != nullptr) {
    int errnum = Z_OK;
    const char* gz_message = gzerror(Gz(gz_), &errnum);
    if (errnum != Z_ERRNO) message = gz_message;
  }
  return absl::DataLossError(
      absl::StrCat(path_, ": ", what, " near uncompressed byte ", next_offset_, ": ", message));
}

int64_t LineSource::Read(char* dst, size_t n) {
  if (gz_ != nullptr) {
    const int got = gzread(Gz(gz_), dst, static_cast<unsigned>(n));
    if (got > 0) bytes_decompressed_ += static_cast<uint64_t>(got);
    return got;
  }
  ssize_t got;
  do {
    got = read(fd_, dst, n);
  } while (got < 0 && errno == EINTR);
  if (got > 0) bytes_read_ += static_cast<uint64_t>(got);
  return got;
}

absl::Status LineSource::RawSeek(uint64_t offset) {
  begin_ = end_ = 0;
  eof_ = false;
  next_offset_ = offset;
  if (gz_ != nullptr) {
    // zlib decompresses forward from where it is, or from the start when
    // going back: count what it has to produce to get there.
    const uint64_t before = static_cast<uint64_t>(gztell(Gz(gz_)));
    if (gzseek(Gz(gz_), static_cast<z_off_t>(offset), SEEK_SET) < 0) {
      return ReadError(absl::StrCat("cannot seek to byte ", offset));
    }
    bytes_decompressed_ += offset >= before ? offset - before : offset;
  } else if (lseek(fd_, static_cast<off_t>(offset), SEEK_SET) < 0) {
    return ReadError(absl::StrCat("cannot seek to byte ", offset));
  }
  return absl::OkStatus();
}

absl::Status LineSource::Fill() {
  if (begin_ > 0) {
    std::memmove(buf_.data(), buf_.data() + begin_, end_ - begin_);
    end_ -= begin_;
    begin_ = 0;
  }
  const int64_t n = Read(buf_.data() + end_, buf_.size() - end_);
  if (n < 0) return ReadError("read error");
  if (n == 0) {
    if (gz_ != nullptr) {
      int errnum = Z_OK;
      gzerror(Gz(gz_), &errnum);
      // Z_BUF_ERROR at the end: the gzip stream stopped mid-member.
      if (errnum != Z_OK) return ReadError("truncated or corrupt gzip data");
    }
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
  next_line_ = line_index;
  if (offset == 0) return RawSeek(0);
  absl::Status status = RawSeek(offset - 1);
  if (!status.ok()) return status;
  char prev = '\n';
  const int64_t n = Read(&prev, 1);
  if (n < 0) return ReadError("read error");
  if (n == 0) prev = 0;  // Past the end.
  next_offset_ = offset;
  if (prev == '\n') return absl::OkStatus();
  // Also legal: the end of a file whose last line has no '\n'.
  if (prev != 0) {
    status = Fill();
    if (!status.ok()) return status;
    if (eof_ && end_ == 0) return absl::OkStatus();
  }
  return absl::InvalidArgumentError(
      absl::StrCat(path_, ": byte ", offset, " is not the start of a line of the file"));
}

absl::Status LineSource::SeekToLineAtOrAfter(uint64_t offset, uint64_t line_index) {
  if (offset == 0) return Seek(0, line_index);
  // The line holding byte offset - 1 ends at or after it: skip to its end.
  absl::Status status = RawSeek(offset - 1);
  if (status.ok()) status = SkipRestOfLine();
  next_line_ = line_index;
  return status;
}

}  // namespace data
}  // namespace shardps

// Reads the lines of one file, plain or gzip, with bounded memory.
//
// Compression is detected from the content (the gzip magic bytes 1f 8b at
// the start of the file), not from the file name; concatenated gzip members
// are read as one stream. A plain file is read with read(2), so seeking in it
// costs nothing; a gzip file goes through zlib, and seeking in it
// decompresses everything before the target. Memory is one buffer of
// `max_line_bytes` plus zlib's own buffers, whatever the file size.
//
// Lines end at '\n'; the last line may lack it. A line longer than
// `max_line_bytes` is skipped and reported as too long (its bytes are
// consumed, its text is not returned).
//
// Thread-compatible; owns its file descriptor and zlib handle (movable
// between threads, one user at a time). Not copyable.
#ifndef SHARDPS_WORKER_DATA_LINE_SOURCE_H_
#define SHARDPS_WORKER_DATA_LINE_SOURCE_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {
namespace data {

class LineSource {
 public:
  struct Line {
    absl::string_view text;  // Without the '\n'. Valid until the next call.
    bool too_long = false;   // Longer than max_line_bytes; text is empty.
  };

  // Opens `path`. NOT_FOUND if it does not exist, FAILED_PRECONDITION if it
  // cannot be opened otherwise. `max_line_bytes` must be >= 16.
  static absl::StatusOr<std::unique_ptr<LineSource>> Open(const std::string& path,
                                                          size_t max_line_bytes);

  ~LineSource();
  LineSource(const LineSource&) = delete;
  LineSource& operator=(const LineSource&) = delete;

  // Reads the next line into `*line`: true, or false at the end of the file.
  // DATA_LOSS (naming the file) on a corrupt or truncated gzip stream or a
  // read error.
  absl::StatusOr<bool> Next(Line* line);

  // Positions the source so that the next line starts at uncompressed byte
  // `offset`, and numbers it `line_index`. INVALID_ARGUMENT if `offset` is
  // not the start of a line (or the end) of the file.
  absl::Status Seek(uint64_t offset, uint64_t line_index);

  // Positions the source at the first line that starts at or after byte
  // `offset` (the end of the file if none does), and numbers it
  // `line_index`. How a reader of the byte range [offset, end) of a file
  // finds its first line: the line that straddles `offset` belongs to the
  // range before. DATA_LOSS on read errors.
  absl::Status SeekToLineAtOrAfter(uint64_t offset, uint64_t line_index);

  // 0-based index of the next line to be returned (lines returned so far,
  // counted from the line index given to the last seek, else from 0).
  uint64_t next_line() const { return next_line_; }
  // Uncompressed offset of the next line's first byte.
  uint64_t next_offset() const { return next_offset_; }
  // True if the content is gzip-compressed.
  bool compressed() const { return compressed_; }
  const std::string& path() const { return path_; }
  // Uncompressed bytes zlib produced so far (read, or decompressed to skip
  // them on a seek); 0 for a plain file.
  uint64_t bytes_decompressed() const { return bytes_decompressed_; }
  // Bytes read from a plain file so far; 0 for a gzip file.
  uint64_t bytes_read() const { return bytes_read_; }

 private:
  LineSource(std::string path, int fd, void* gz, size_t max_line_bytes);
  // Up to `n` bytes into `dst`: the count, 0 at the end, -1 on error.
  int64_t Read(char* dst, size_t n);
  // Moves the underlying file to uncompressed byte `offset`, empties the
  // buffer and sets next_offset_.
  absl::Status RawSeek(uint64_t offset);
  // Appends more data to buf_; sets eof_ at the end. DATA_LOSS on errors.
  absl::Status Fill();
  // Consumes bytes up to and including the next '\n' (or the end).
  absl::Status SkipRestOfLine();
  absl::Status ReadError(absl::string_view what) const;

  const std::string path_;
  const int fd_;    // Plain files: the descriptor; -1 with gz_.
  void* const gz_;  // gzFile for gzip files (it owns its descriptor), or
                    // null. void* keeps zlib.h out of this header.
  const bool compressed_;
  std::vector<char> buf_;
  size_t begin_ = 0;  // Unread data is buf_[begin_, end_).
  size_t end_ = 0;
  bool eof_ = false;
  uint64_t next_line_ = 0;
  uint64_t next_offset_ = 0;
  uint64_t bytes_decompressed_ = 0;
  uint64_t bytes_read_ = 0;
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_LINE_SOURCE_H_

// Reads the lines of one file, plain or gzip, with bounded memory.
//
// Compression is detected from the content (the gzip magic bytes 1f 8b, as
// zlib's gzread does), not from the file name; concatenated gzip members are
// read as one stream. Memory is one buffer of `max_line_bytes` plus zlib's
// own buffers, whatever the file size.
//
// Lines end at '\n'; the last line may lack it. A line longer than
// `max_line_bytes` is skipped and reported as too long (its bytes are
// consumed, its text is not returned).
//
// Thread-compatible; owns its zlib handle (movable between threads, one user
// at a time). Not copyable.
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
  static absl::StatusOr<std::unique_ptr<LineSource>> Open(
      const std::string& path, size_t max_line_bytes);

  ~LineSource();
  LineSource(const LineSource&) = delete;
  LineSource& operator=(const LineSource&) = delete;

  // Reads the next line into `*line`: true, or false at the end of the file.
  // DATA_LOSS (naming the file) on a corrupt or truncated gzip stream or a
  // read error.
  absl::StatusOr<bool> Next(Line* line);

  // Positions the source so that the next line starts at uncompressed byte
  // `offset`, and numbers it `line_index`. INVALID_ARGUMENT if `offset` is
  // not the start of a line (or the end) of the file. On gzip files this
  // decompresses up to `offset`.
  absl::Status Seek(uint64_t offset, uint64_t line_index);

  // 0-based index of the next line to be returned (= lines returned so far,
  // counting from the start of the file).
  uint64_t next_line() const { return next_line_; }
  // Uncompressed offset of the next line's first byte.
  uint64_t next_offset() const { return next_offset_; }
  // True if the content is gzip-compressed.
  bool compressed() const { return compressed_; }
  const std::string& path() const { return path_; }

 private:
  LineSource(std::string path, void* gz, size_t max_line_bytes);
  // Appends more data to buf_; sets eof_ at the end. DATA_LOSS on errors.
  absl::Status Fill();
  // Consumes bytes up to and including the next '\n' (or the end).
  absl::Status SkipRestOfLine();
  absl::Status ReadError(absl::string_view what) const;

  const std::string path_;
  void* const gz_;  // gzFile; void* keeps zlib.h out of this header.
  std::vector<char> buf_;
  size_t begin_ = 0;  // Unread data is buf_[begin_, end_).
  size_t end_ = 0;
  bool eof_ = false;
  bool compressed_ = false;
  uint64_t next_line_ = 0;
  uint64_t next_offset_ = 0;
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_LINE_SOURCE_H_

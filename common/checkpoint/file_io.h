// Small POSIX file helpers for the checkpoint code: durable atomic writes
// (temporary name in the target directory, fsync, rename, fsync of the
// directory), whole-file reads, directory listing and removal.
//
// Every error is a status naming the path and the errno text; a missing file
// is NOT_FOUND, other failures carry the code absl::ErrnoToStatus picks.
//
// Thread-safety: the functions are thread-compatible (no shared state); an
// AtomicFileWriter is used by one thread at a time.
#ifndef SHARDPS_COMMON_CHECKPOINT_FILE_IO_H_
#define SHARDPS_COMMON_CHECKPOINT_FILE_IO_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace shardps {
namespace checkpoint {

// Temporary names are "<final name>.tmp.<pid>.<n>": IsTempFileName spots
// them, so garbage collection can remove what a dead writer left behind.
bool IsTempFileName(absl::string_view name);

// Writes a file under a temporary name next to `path`; Commit() makes it
// appear under `path` atomically and durably. Destroying an uncommitted
// writer removes the temporary file. Tracks the size and the CRC32C of
// everything written, for the manifest.
class AtomicFileWriter {
 public:
  // Creates the temporary file (exclusively). The directory must exist.
  static absl::StatusOr<std::unique_ptr<AtomicFileWriter>> Create(const std::string& path);
  ~AtomicFileWriter();
  AtomicFileWriter(const AtomicFileWriter&) = delete;
  AtomicFileWriter& operator=(const AtomicFileWriter&) = delete;

  absl::Status Append(absl::string_view data);
  // fsync, close, rename over `path`, fsync the directory. Once only.
  absl::Status Commit();

  uint64_t size() const { return size_; }
  uint32_t crc32c() const { return crc_; }
  const std::string& path() const { return path_; }
  const std::string& temp_path() const { return temp_path_; }

 private:
  AtomicFileWriter(std::string path, std::string temp_path, int fd);
  void Abandon();

  const std::string path_;
  const std::string temp_path_;
  int fd_;  // -1 once closed.
  bool committed_ = false;
  uint64_t size_ = 0;
  uint32_t crc_ = 0;
};

// AtomicFileWriter in one call.
absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents);

// The whole file. NOT_FOUND if it does not exist.
absl::StatusOr<std::string> ReadFileToString(const std::string& path);

// Size and CRC32C of a file, read in bounded chunks. NOT_FOUND if missing.
struct FileDigest {
  uint64_t size = 0;
  uint32_t crc32c = 0;
};
absl::StatusOr<FileDigest> DigestFile(const std::string& path);

// Size of a file (stat). NOT_FOUND if missing.
absl::StatusOr<uint64_t> FileSize(const std::string& path);

// fsync of a directory, so a rename or creation in it survives a crash.
absl::Status SyncDir(const std::string& dir);

// Creates `dir` (one level; the parent must exist). OK if it exists.
absl::Status MakeDir(const std::string& dir);

// Names of the entries of `dir` (no "." or ".."), sorted.
absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir);

bool IsDirectory(const std::string& path);

// Removes a file, or a directory and everything below it. OK if missing.
absl::Status RemoveAll(const std::string& path);

// "a/b" from ("a", "b").
std::string JoinPath(absl::string_view dir, absl::string_view name);

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_FILE_IO_H_

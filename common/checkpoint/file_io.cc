#include "common/checkpoint/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <memory>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/crc32c.h"

namespace shardps {
namespace checkpoint {
namespace {

absl::Status Errno(int err, absl::string_view what, absl::string_view path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

std::string DirName(const std::string& path) {
  const size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

absl::Status WriteAll(int fd, const char* data, size_t size, const std::string& path) {
  while (size > 0) {
    const ssize_t n = ::write(fd, data, size);
    if (n < 0) {
      if (errno == EINTR) continue;
      return Errno(errno, "write", path);
    }
    data += n;
    size -= static_cast<size_t>(n);
  }
  return absl::OkStatus();
}

}  // namespace

bool IsTempFileName(absl::string_view name) { return absl::StrContains(name, ".tmp."); }

std::string JoinPath(absl::string_view dir, absl::string_view name) {
  if (dir.empty()) return std::string(name);
  if (dir.back() == '/') return absl::StrCat(dir, name);
  return absl::StrCat(dir, "/", name);
}

AtomicFileWriter::AtomicFileWriter(std::string path, std::string temp_path, int fd)
    : path_(std::move(path)), temp_path_(std::move(temp_path)), fd_(fd) {}

absl::StatusOr<std::unique_ptr<AtomicFileWriter>> AtomicFileWriter::Create(
    const std::string& path) {
  static std::atomic<uint64_t> counter{0};
  const std::string temp = absl::StrCat(path, ".tmp.", ::getpid(), ".", counter.fetch_add(1));
  const int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, "cannot create", temp);
  return std::unique_ptr<AtomicFileWriter>(new AtomicFileWriter(path, temp, fd));
}

AtomicFileWriter::~AtomicFileWriter() {
  if (!committed_) Abandon();
}

void AtomicFileWriter::Abandon() {
  if (fd_ >= 0) ::close(fd_);
  fd_ = -1;
  ::unlink(temp_path_.c_str());
}

absl::Status AtomicFileWriter::Append(absl::string_view data) {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": append after commit or failure"));
  }
  absl::Status s = WriteAll(fd_, data.data(), data.size(), temp_path_);
  if (!s.ok()) {
    Abandon();
    return s;
  }
  size_ += data.size();
  crc_ = Crc32cExtend(crc_, data.data(), data.size());
  return absl::OkStatus();
}

absl::Status AtomicFileWriter::Commit() {
  if (fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(path_, ": commit after commit or failure"));
  }
  absl::Status s;
  if (::fsync(fd_) != 0) s = Errno(errno, "fsync", temp_path_);
  if (::close(fd_) != 0 && s.ok()) s = Errno(errno, "close", temp_path_);
  fd_ = -1;
  if (s.ok() && ::rename(temp_path_.c_str(), path_.c_str()) != 0) {
    s = Errno(errno, absl::StrCat("rename ", temp_path_, " to"), path_);
  }
  if (!s.ok()) {
    Abandon();
    return s;
  }
  committed_ = true;
  return SyncDir(DirName(path_));
}

absl::Status WriteFileAtomically(const std::string& path, absl::string_view contents) {
  auto writer = AtomicFileWriter::Create(path);
  if (!writer.ok()) return writer.status();
  absl::Status s = (*writer)->Append(contents);
  if (!s.ok()) return s;
  return (*writer)->Commit();
}

absl::StatusOr<std::string> ReadFileToString(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "cannot open", path);
  std::string out;
  struct stat st;
  if (::fstat(fd, &st) == 0 && st.st_size > 0) {
    out.reserve(static_cast<size_t>(st.st_size));
  }
  char buf[1 << 16];
  while (true) {
    const ssize_t n = ::read(fd, buf, sizeof(buf));
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Errno(err, "read", path);
    }
    if (n == 0) break;
    out.append(buf, static_cast<size_t>(n));
  }
  ::close(fd);
  return out;
}

absl::StatusOr<FileDigest> DigestFile(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "cannot open", path);
  FileDigest digest;
  std::unique_ptr<char[]> buf(new char[1 << 20]);
  while (true) {
    const ssize_t n = ::read(fd, buf.get(), 1 << 20);
    if (n < 0) {
      if (errno == EINTR) continue;
      const int err = errno;
      ::close(fd);
      return Errno(err, "read", path);
    }
    if (n == 0) break;
    digest.size += static_cast<uint64_t>(n);
    digest.crc32c = Crc32cExtend(digest.crc32c, buf.get(), n);
  }
  ::close(fd);
  return digest;
}

absl::StatusOr<uint64_t> FileSize(const std::string& path) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) return Errno(errno, "cannot stat", path);
  return static_cast<uint64_t>(st.st_size);
}

absl::Status SyncDir(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (fd < 0) return Errno(errno, "cannot open directory", dir);
  absl::Status s;
  if (::fsync(fd) != 0) s = Errno(errno, "fsync directory", dir);
  ::close(fd);
  return s;
}

absl::Status MakeDir(const std::string& dir) {
  if (::mkdir(dir.c_str(), 0755) == 0 || errno == EEXIST) {
    if (IsDirectory(dir)) return absl::OkStatus();
    return absl::FailedPreconditionError(absl::StrCat(dir, " exists and is not a directory"));
  }
  return Errno(errno, "mkdir", dir);
}

absl::StatusOr<std::vector<std::string>> ListDir(const std::string& dir) {
  DIR* d = ::opendir(dir.c_str());
  if (d == nullptr) return Errno(errno, "cannot list", dir);
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(d)) {
    const absl::string_view name = e->d_name;
    if (name == "." || name == "..") continue;
    names.emplace_back(name);
  }
  ::closedir(d);
  std::sort(names.begin(), names.end());
  return names;
}

bool IsDirectory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

absl::Status RemoveAll(const std::string& path) {
  struct stat st;
  if (::lstat(path.c_str(), &st) != 0) {
    if (errno == ENOENT) return absl::OkStatus();
    return Errno(errno, "stat", path);
  }
  if (S_ISDIR(st.st_mode)) {
    auto names = ListDir(path);
    if (!names.ok()) return names.status();
    for (const std::string& name : *names) {
      absl::Status s = RemoveAll(JoinPath(path, name));
      if (!s.ok()) return s;
    }
    if (::rmdir(path.c_str()) != 0 && errno != ENOENT) {
      return Errno(errno, "rmdir", path);
    }
    return absl::OkStatus();
  }
  if (::unlink(path.c_str()) != 0 && errno != ENOENT) {
    return Errno(errno, "unlink", path);
  }
  return absl::OkStatus();
}

}  // namespace checkpoint
}  // namespace shardps

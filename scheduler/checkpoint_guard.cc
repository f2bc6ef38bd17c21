#include "scheduler/checkpoint_guard.h"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"

namespace shardps {
namespace {

absl::Status Errno(int err, const std::string& what, const std::string& path) {
  return absl::ErrnoToStatus(err, absl::StrCat(what, " ", path));
}

bool HasManifest(const std::string& dir) {
  return checkpoint::FileSize(checkpoint::JoinPath(dir, checkpoint::kManifestFileName)).ok();
}

}  // namespace

absl::Status ProbeCheckpointDir(const std::string& root) {
  std::error_code ec;
  if (std::filesystem::exists(root, ec) && !std::filesystem::is_directory(root, ec)) {
    return absl::FailedPreconditionError(absl::StrCat(root, " exists and is not a directory"));
  }
  std::filesystem::create_directories(root, ec);
  if (ec || !std::filesystem::is_directory(root)) {
    return absl::ErrnoToStatus(ec ? ec.value() : ENOTDIR, absl::StrCat("mkdir ", root));
  }
  const std::string probe = checkpoint::JoinPath(root, absl::StrCat(".probe-", ::getpid(), ".tmp"));
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, "cannot create", probe);
  const char kText[] = "shardps checkpoint.dir probe\n";
  absl::Status st;
  if (::write(fd, kText, sizeof kText - 1) != static_cast<ssize_t>(sizeof kText - 1)) {
    st = Errno(errno, "write", probe);
  } else if (::fsync(fd) != 0) {
    st = Errno(errno, "fsync", probe);
  }
  if (::close(fd) != 0 && st.ok()) st = Errno(errno, "close", probe);
  if (::unlink(probe.c_str()) != 0 && st.ok()) st = Errno(errno, "unlink", probe);
  if (st.ok()) st = checkpoint::SyncDir(root);
  return st;
}

absl::StatusOr<std::vector<CorruptCheckpoint>> FindCorruptCheckpoints(const std::string& root,
                                                                      int64_t after) {
  std::vector<CorruptCheckpoint> corrupt;
  auto entries = checkpoint::ListCheckpoints(root);
  if (absl::IsNotFound(entries.status())) return corrupt;
  if (!entries.ok()) return entries.status();
  checkpoint::LoadManifestOptions options;
  options.verify_file_crcs = false;  // Sizes; the servers check CRCs when they read.
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    if (after >= 0 && it->clock <= static_cast<uint64_t>(after)) break;
    if (!HasManifest(it->dir)) continue;  // Incomplete, not corrupt.
    auto loaded = checkpoint::LoadCheckpoint(root, it->clock, options);
    if (!loaded.ok()) corrupt.push_back({it->clock, it->dir, loaded.status()});
  }
  return corrupt;
}

absl::StatusOr<std::string> SetCheckpointAside(const std::string& dir, absl::Time now) {
  std::string to = absl::StrCat(dir, ".corrupt-", absl::ToUnixSeconds(now));
  for (int n = 1; std::filesystem::exists(to); ++n) {
    to = absl::StrCat(dir, ".corrupt-", absl::ToUnixSeconds(now), "-", n);
  }
  if (std::rename(dir.c_str(), to.c_str()) != 0) {
    return Errno(errno, absl::StrCat("rename ", dir, " to"), to);
  }
  return to;
}

absl::Status RemoveIncompleteCheckpoint(const std::string& root, uint64_t clock) {
  const std::string dir = checkpoint::CheckpointPath(root, clock);
  if (!checkpoint::IsDirectory(dir) || HasManifest(dir)) return absl::OkStatus();
  return checkpoint::RemoveAll(dir);
}

absl::StatusOr<std::unique_ptr<CheckpointDirLock>> CheckpointDirLock::Acquire(
    const std::string& root, const std::string& holder, absl::Duration wait) {
  const std::string path = checkpoint::JoinPath(root, "LOCK");
  const int fd = ::open(path.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd < 0) return Errno(errno, "cannot open the checkpoint directory's lock", path);
  const absl::Time start = absl::Now();
  while (::flock(fd, LOCK_EX | LOCK_NB) != 0) {
    const int err = errno;
    if (err == EINTR) continue;
    if (err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS) {
      ::close(fd);
      return std::unique_ptr<CheckpointDirLock>(new CheckpointDirLock(path, -1));
    }
    if (err != EWOULDBLOCK) {
      ::close(fd);
      return Errno(err, "cannot lock", path);
    }
    if (absl::Now() - start >= wait) {
      ::close(fd);
      std::ifstream in(path);
      std::stringstream text;
      text << in.rdbuf();
      std::string who(absl::StripAsciiWhitespace(text.str()));
      if (who.empty()) who = "a process that wrote no description yet";
      return absl::FailedPreconditionError(
          absl::StrCat("checkpoint.dir ", root, " is in use by another scheduler (", who,
                       "; waited ", absl::FormatDuration(wait), " for ", path,
                       "). Two jobs must not share a checkpoint directory: give this job its own"));
    }
    absl::SleepFor(absl::Milliseconds(100));
  }
  // Held: describe this holder (best effort; the lock is what counts).
  const std::string line = absl::StrCat(holder, ", since ", absl::FormatTime(absl::Now()), "\n");
  if (::ftruncate(fd, 0) != 0 || ::pwrite(fd, line.data(), line.size(), 0) < 0) {
    // Nothing to do: the refusal then says less of the holder.
  }
  return std::unique_ptr<CheckpointDirLock>(new CheckpointDirLock(path, fd));
}

CheckpointDirLock::~CheckpointDirLock() {
  if (fd_ >= 0) ::close(fd_);  // Closing the last descriptor releases flock.
}

}  // namespace shardps

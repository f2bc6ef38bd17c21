#include "worker/data/shard_plan.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace data {
namespace {

absl::StatusOr<FileInfo> Inspect(const std::string& path) {
  FileInfo info;
  info.path = path;
  struct stat st;
  if (stat(path.c_str(), &st) != 0) {
    const std::string what = absl::StrCat(path, ": ", std::strerror(errno));
    if (errno == ENOENT) return absl::NotFoundError(what);
    return absl::FailedPreconditionError(what);
  }
  if (S_ISDIR(st.st_mode)) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": is a directory"));
  }
  info.size = static_cast<uint64_t>(st.st_size);
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    return absl::FailedPreconditionError(
        absl::StrCat(path, ": cannot open: ", std::strerror(errno)));
  }
  unsigned char magic[2] = {0, 0};
  ssize_t n;
  do {
    n = pread(fd, magic, 2, 0);
  } while (n < 0 && errno == EINTR);
  const int err = errno;
  close(fd);
  if (n < 0) {
    return absl::FailedPreconditionError(absl::StrCat(path, ": cannot read: ", std::strerror(err)));
  }
  info.compressed = n == 2 && magic[0] == 0x1f && magic[1] == 0x8b;
  return info;
}

}  // namespace

absl::StatusOr<ShardPlan> ShardPlan::Create(const std::vector<std::string>& files, uint32_t rank,
                                            uint32_t num_workers, bool shuffle, uint64_t seed) {
  if (files.empty()) return absl::InvalidArgumentError("shard plan: no files");
  if (rank >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("shard plan: rank ", rank, " >= num_workers ", num_workers));
  }
  std::vector<FileInfo> infos;
  for (const std::string& path : files) {
    absl::StatusOr<FileInfo> info = Inspect(path);
    if (!info.ok()) return info.status();
    infos.push_back(std::move(*info));
  }
  return ShardPlan(std::move(infos), rank, num_workers, shuffle, seed);
}

std::vector<size_t> ShardPlan::FileOrder(uint64_t epoch) const {
  std::vector<size_t> order(files_.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!shuffle_) return order;
  SeededShuffle(Mix64(seed_ ^ Mix64(epoch + 0x5bd1e995ULL)), &order);
  return order;
}

std::vector<ReadUnit> ShardPlan::Units(uint64_t epoch) const {
  const uint64_t w = num_workers_;
  const uint64_t n = files_.size();
  std::vector<ReadUnit> units;
  if (n >= w) {
    uint64_t k = epoch * n;  // The deal goes on from the previous epoch.
    for (size_t f : FileOrder(epoch)) {
      if (k++ % w == rank_) units.push_back(ReadUnit{f, 0, kToEndOfFile});
    }
    return units;
  }
  uint64_t gzip_files = 0;
  for (const FileInfo& info : files_) gzip_files += info.compressed;
  uint64_t j = epoch * gzip_files;
  for (size_t f : FileOrder(epoch)) {
    const FileInfo& info = files_[f];
    if (info.compressed) {
      if (j++ % w == rank_) units.push_back(ReadUnit{f, 0, kToEndOfFile});
      continue;
    }
    auto cut = [&](uint64_t r) {
      return static_cast<uint64_t>(static_cast<unsigned __int128>(info.size) * r / w);
    };
    const uint64_t begin = cut(rank_);
    const uint64_t end = rank_ + 1 == w ? kToEndOfFile : cut(rank_ + 1);
    if (begin < end) units.push_back(ReadUnit{f, begin, end});
  }
  return units;
}

}  // namespace data
}  // namespace shardps

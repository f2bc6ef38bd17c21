// ShardPlan: which parts of which files one worker reads in each epoch.
//
// A *read unit* is the lines of one file that start at uncompressed byte
// offsets in [begin, end). For every epoch, the workers' units partition the
// lines of all files: every line is read by exactly one worker per epoch,
// and no worker reads (or decompresses) a byte outside its units but for a
// read-ahead buffer at the end of a plain range.
//
// The epoch's file order is FileOrder(epoch): a Fisher-Yates permutation
// seeded by (seed, epoch) with our own generator (identical on every
// platform), or list order when shuffling is off. Then:
//
//  * At least as many files as workers (N >= W): whole files are dealt like
//    cards. The k-th file of epoch e's order goes to worker (k + e N) mod W:
//    the deal goes on where the previous epoch stopped, so when W does not
//    divide N the extra files rotate among the workers from epoch to epoch.
//    Every file is read by one worker per epoch, gzip or not. Balance is by
//    file count: give a job files of similar sizes.
//  * Fewer files than workers (N < W): a plain file of S bytes is cut into
//    W byte ranges, worker r taking [r S / W, (r + 1) S / W) (the last one
//    to the end of the file, should it have grown), like Hadoop's text
//    splits: a range reads the lines that *start* in it, so the line that
//    straddles a boundary belongs to the range where it starts. A gzip file
//    cannot be entered in the middle, so it stays whole: the j-th gzip file
//    of the epoch's order goes to worker (j + e G) mod W (G gzip files), and
//    the workers dealt none that epoch read nothing of the gzip files.
//
// A unit's lines are numbered from 0 at its first line. Only units that
// start at byte 0 know their lines' numbers in the file.
//
// Thread-safety: immutable after Create; const methods are thread-safe.
#ifndef SHARDPS_WORKER_DATA_SHARD_PLAN_H_
#define SHARDPS_WORKER_DATA_SHARD_PLAN_H_

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "common/partition.h"

namespace shardps {
namespace data {

// `end` of a unit that reads to the end of its file.
inline constexpr uint64_t kToEndOfFile = std::numeric_limits<uint64_t>::max();

struct ReadUnit {
  size_t file = 0;     // Index into the plan's files.
  uint64_t begin = 0;  // Uncompressed byte offsets.
  uint64_t end = kToEndOfFile;

  bool operator==(const ReadUnit& o) const {
    return file == o.file && begin == o.begin && end == o.end;
  }
};

struct FileInfo {
  std::string path;
  uint64_t size = 0;        // On disk, when the plan was made.
  bool compressed = false;  // Starts with the gzip magic bytes.
};

// Fisher-Yates shuffle of `*v` driven by a splitmix64 stream that starts at
// `state`, with a multiply-shift draw: the same result with every standard
// library and platform.
template <typename T>
void SeededShuffle(uint64_t state, std::vector<T>* v) {
  for (size_t i = v->size(); i > 1; --i) {
    state += 0x9e3779b97f4a7c15ULL;
    const uint64_t r = Mix64(state);
    const size_t j = static_cast<size_t>((static_cast<unsigned __int128>(r) * i) >> 64);
    std::swap((*v)[i - 1], (*v)[j]);
  }
}

class ShardPlan {
 public:
  // Stats every file and reads its first two bytes. NOT_FOUND naming a
  // missing file, FAILED_PRECONDITION for one that is a directory or cannot
  // be read, INVALID_ARGUMENT for an empty list or rank >= num_workers.
  static absl::StatusOr<ShardPlan> Create(const std::vector<std::string>& files, uint32_t rank,
                                          uint32_t num_workers, bool shuffle, uint64_t seed);

  // The file indices in the order epoch `epoch` visits them.
  std::vector<size_t> FileOrder(uint64_t epoch) const;
  // This worker's units of epoch `epoch`, in reading order (the file
  // order's). Byte ranges that are empty are left out.
  std::vector<ReadUnit> Units(uint64_t epoch) const;

  const std::vector<FileInfo>& files() const { return files_; }
  uint32_t rank() const { return rank_; }
  uint32_t num_workers() const { return num_workers_; }

 private:
  ShardPlan(std::vector<FileInfo> files, uint32_t rank, uint32_t num_workers, bool shuffle,
            uint64_t seed)
      : files_(std::move(files)),
        rank_(rank),
        num_workers_(num_workers),
        shuffle_(shuffle),
        seed_(seed) {}

  std::vector<FileInfo> files_;
  uint32_t rank_;
  uint32_t num_workers_;
  bool shuffle_;
  uint64_t seed_;
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_SHARD_PLAN_H_

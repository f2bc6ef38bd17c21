// VersionAssembler: the stream versions a replica is receiving, part by
// part, until one is complete (replica.h "Following the servers' delta
// stream"; proto/ps.proto VersionPart).
//
// A version (job generation, clock) is complete once parts holding every
// partition exactly once have arrived, each server's part in all of its
// chunks (VersionPart.chunk of num_chunks; every chunk of a part names the
// same partitions). A part that disagrees with what arrived of its version
// (a partition another server's part holds, chunks or partitions other
// than its first chunk's, a chunk out of range or twice: a map that moved
// between the parts, a faulty server) drops the version. When a version
// completes, it and every version before it are forgotten; beyond
// kMaxPendingVersions begun and incomplete, the oldest is dropped.
//
// Each part must have been checked against the job first
// (ServedModel::CheckStreamPart: its partitions in range and unique).
//
// Thread-compatible: one per stream session, fed by the follower.
#ifndef SHARDPS_REPLICA_VERSION_ASSEMBLER_H_
#define SHARDPS_REPLICA_VERSION_ASSEMBLER_H_

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/ps.pb.h"
#include "replica/served_model.h"

namespace shardps {
namespace replica {

class VersionAssembler {
 public:
  static constexpr size_t kMaxPendingVersions = 16;

  // A complete version.
  struct Complete {
    ServedModel::StreamLink version;
    uint64_t generation = 0;
    uint64_t bytes = 0;      // Wire size of its parts.
    int64_t cut_micros = 0;  // The earliest server's start of its copy.
  };

  explicit VersionAssembler(uint32_t num_partitions) : num_partitions_(num_partitions) {}

  // Adds `part`: the version it completes, or nullopt. INVALID_ARGUMENT
  // naming the version, the server and what disagrees when its version is
  // dropped.
  absl::StatusOr<std::optional<Complete>> Add(std::shared_ptr<const VersionPart> part);

  // Versions begun and not complete.
  size_t pending() const { return pending_.size(); }

 private:
  // The parts of one version received so far.
  struct Pending {
    std::shared_ptr<ServedModel::StreamVersion> version;
    std::vector<bool> held;  // By partition.
    uint32_t partitions = 0;
    // By server index: the chunks received, and the partitions its first
    // chunk named.
    std::map<uint32_t, std::vector<bool>> chunks;
    std::map<uint32_t, std::vector<uint32_t>> partitions_of;
    uint64_t chunks_missing = 0;
    uint64_t bytes = 0;
    int64_t cut_micros = 0;
  };
  using Key = std::pair<uint64_t, uint64_t>;  // (generation, clock)

  const uint32_t num_partitions_;
  std::map<Key, Pending> pending_;
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_VERSION_ASSEMBLER_H_

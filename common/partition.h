// Keys to partitions, partitions to servers (docs/design.md, "Keys, tables,
// partitions").
//
// A key of table t goes to partition PartitionOf(t, key, P): the high bits of
// MixKey(t, key) * P. MixKey is frozen: checkpoints are grouped by partition,
// so changing it would make every existing checkpoint unreadable. The golden
// values in partition_test.cc pin it.
//
// Thread-safety: the free functions are pure; PartitionMap is immutable after
// construction and safe to share.
#ifndef SHARDPS_COMMON_PARTITION_H_
#define SHARDPS_COMMON_PARTITION_H_

#include <cstdint>
#include <vector>

#include "absl/status/statusor.h"

namespace shardps {

// The splitmix64 finalizer: a bijection on 64-bit values with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

// Mixes (table id, key). For a fixed table it is a bijection of keys, so
// distinct keys never collide; different tables get unrelated streams.
inline uint64_t MixKey(uint32_t table_id, uint64_t key) {
  return Mix64(key ^ Mix64(uint64_t{table_id} + 0x9e3779b97f4a7c15ULL));
}

// The partition of `key` in table `table_id`, in [0, num_partitions).
// `num_partitions` must be > 0.
inline uint32_t PartitionOf(uint32_t table_id, uint64_t key, uint32_t num_partitions) {
  return static_cast<uint32_t>(
      (static_cast<unsigned __int128>(MixKey(table_id, key)) * num_partitions) >> 64);
}

// Which server owns each partition, at one version. Versions only grow; a
// request stamped with another version than the server's is refused by the
// server (ABORTED), and the client refreshes its map.
class PartitionMap {
 public:
  // The initial assignment: contiguous, near-equal ranges of partitions per
  // server (server s owns [s*P/S, (s+1)*P/S)). Fails unless
  // 0 < num_servers <= num_partitions.
  static absl::StatusOr<PartitionMap> Contiguous(uint64_t version, uint32_t num_partitions,
                                                 uint32_t num_servers);
  // From an explicit owner list (owner[p] = server of partition p). Fails if
  // the list is empty or names a server >= num_servers.
  static absl::StatusOr<PartitionMap> FromOwners(uint64_t version, std::vector<uint32_t> owner,
                                                 uint32_t num_servers);

  PartitionMap() = default;  // Version 0, no partitions: owns nothing.

  uint64_t version() const { return version_; }
  uint32_t num_partitions() const { return static_cast<uint32_t>(owner_.size()); }
  uint32_t num_servers() const { return num_servers_; }
  const std::vector<uint32_t>& owners() const { return owner_; }

  uint32_t OwnerOfPartition(uint32_t partition) const { return owner_[partition]; }
  // Requires num_partitions() > 0.
  uint32_t ServerOf(uint32_t table_id, uint64_t key) const {
    return owner_[PartitionOf(table_id, key, num_partitions())];
  }

 private:
  uint64_t version_ = 0;
  uint32_t num_servers_ = 0;
  std::vector<uint32_t> owner_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_PARTITION_H_

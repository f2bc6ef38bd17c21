#include "common/partition.h"

#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<PartitionMap> PartitionMap::Contiguous(uint64_t version, uint32_t num_partitions,
                                                      uint32_t num_servers) {
  if (num_servers == 0 || num_servers > num_partitions) {
    return absl::InvalidArgumentError(
        absl::StrCat("partition map needs 0 < servers <= partitions, got ", num_servers,
                     " servers and ", num_partitions, " partitions"));
  }
  std::vector<uint32_t> owner(num_partitions);
  for (uint32_t p = 0; p < num_partitions; ++p) {
    owner[p] = static_cast<uint32_t>(uint64_t{p} * num_servers / num_partitions);
  }
  return FromOwners(version, std::move(owner), num_servers);
}

absl::StatusOr<PartitionMap> PartitionMap::FromOwners(uint64_t version, std::vector<uint32_t> owner,
                                                      uint32_t num_servers) {
  if (owner.empty()) {
    return absl::InvalidArgumentError("partition map has no partitions");
  }
  for (size_t p = 0; p < owner.size(); ++p) {
    if (owner[p] >= num_servers) {
      return absl::InvalidArgumentError(absl::StrCat("partition ", p, " is owned by server ",
                                                     owner[p], " but the job has ", num_servers,
                                                     " servers"));
    }
  }
  PartitionMap map;
  map.version_ = version;
  map.num_servers_ = num_servers;
  map.owner_ = std::move(owner);
  return map;
}

}  // namespace shardps

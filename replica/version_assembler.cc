#include "replica/version_assembler.h"

#include <algorithm>
#include <string>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace replica {

absl::StatusOr<std::optional<VersionAssembler::Complete>> VersionAssembler::Add(
    std::shared_ptr<const VersionPart> part) {
  const Key key(part->generation(), part->clock());
  Pending& p = pending_[key];
  if (p.version == nullptr) {
    p.version = std::make_shared<ServedModel::StreamVersion>();
    p.version->clock = part->clock();
    p.held.assign(num_partitions_, false);
    p.cut_micros = part->cut_unix_micros();
  }
  const uint32_t server = part->server_index();
  const uint32_t num_chunks = std::max<uint32_t>(1, part->num_chunks());
  const std::vector<uint32_t> partitions(part->partitions().begin(), part->partitions().end());
  auto [received, first_chunk] = p.chunks.try_emplace(server, num_chunks, false);
  std::string refused;
  if (first_chunk) {
    for (uint32_t q : partitions) {
      if (p.held[q]) refused = "holds a partition another server's part holds";
    }
  } else if (received->second.size() != num_chunks || partitions != p.partitions_of[server]) {
    refused = "does not name the chunks and partitions of its first chunk";
  }
  if (refused.empty() && (part->chunk() >= num_chunks || received->second[part->chunk()])) {
    refused =
        absl::StrCat("chunk ", part->chunk(), " of ", num_chunks, " is out of range or came twice");
  }
  if (!refused.empty()) {
    pending_.erase(key);
    return absl::InvalidArgumentError(absl::StrCat("version ", part->clock(), ": server ", server,
                                                   "'s part ", refused, "; dropped"));
  }
  if (first_chunk) {
    for (uint32_t q : partitions) p.held[q] = true;
    p.partitions += partitions.size();
    p.partitions_of[server] = partitions;
    p.chunks_missing += num_chunks;
  }
  received->second[part->chunk()] = true;
  --p.chunks_missing;
  p.bytes += part->ByteSizeLong();
  p.cut_micros = std::min(p.cut_micros, part->cut_unix_micros());
  p.version->parts.push_back(std::move(part));
  if (p.partitions < num_partitions_ || p.chunks_missing > 0) {
    if (pending_.size() > kMaxPendingVersions) pending_.erase(pending_.begin());
    return std::nullopt;
  }
  Complete complete{std::move(p.version), key.first, p.bytes, p.cut_micros};
  pending_.erase(pending_.begin(), pending_.upper_bound(key));
  return complete;
}

}  // namespace replica
}  // namespace shardps

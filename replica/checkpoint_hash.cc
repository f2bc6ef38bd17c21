#include "replica/checkpoint_hash.h"

#include <memory>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/manifest.h"
#include "common/status_macros.h"
#include "common/table_hash.h"

namespace shardps {
namespace replica {
namespace {

namespace ckpt = ::shardps::checkpoint;

// Every row's weights, by (table id, key); the bytes of `dim` floats.
using Rows = absl::flat_hash_map<std::pair<uint32_t, uint64_t>, std::string>;

// Applies one file: its deletions, then its rows (as a restore does).
absl::Status ApplyFile(const ckpt::CheckpointFileReader& file, Rows* rows) {
  // Admission counts are not rows: not in the hash.
  for (const ckpt::BlockKind kind : {ckpt::BlockKind::kDeletions, ckpt::BlockKind::kRows}) {
    const bool deletions = kind == ckpt::BlockKind::kDeletions;
    for (const ckpt::RecordBlock& block : file.blocks()) {
      if (block.kind() != kind) continue;
      const ckpt::TableSchema* schema = file.FindTable(block.table_id());
      if (schema == nullptr || size_t{schema->dim} * 4 > schema->payload_bytes) {
        return absl::DataLossError(absl::StrCat(file.name(), ": table ", block.table_id(),
                                                " has no schema with room for its weights"));
      }
      for (size_t i = 0; i < block.size(); ++i) {
        const std::pair<uint32_t, uint64_t> id(block.table_id(), block.key(i));
        if (deletions) {
          rows->erase(id);
        } else {
          (*rows)[id] = std::string(block.payload(i).substr(0, size_t{schema->dim} * 4));
        }
      }
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<CheckpointHash> HashCheckpoint(const std::string& root,
                                              std::optional<uint64_t> clock) {
  ckpt::ResolvedCheckpoint resolved;
  if (clock.has_value()) {
    ASSIGN_OR_RETURN(resolved, ckpt::LoadCheckpoint(root, *clock));
  } else {
    ASSIGN_OR_RETURN(resolved, ckpt::LatestComplete(root));
  }
  Rows rows;
  for (size_t link = 0; link < resolved.chain.size(); ++link) {
    const ckpt::CheckpointManifest& manifest = resolved.chain[link];
    for (const ckpt::CheckpointFile& entry : manifest.files()) {
      const std::string path = absl::StrCat(resolved.chain_dirs[link], "/", entry.name());
      ASSIGN_OR_RETURN(
          std::unique_ptr<ckpt::CheckpointFileReader> file,
          ckpt::CheckpointFileReader::Open(path, ckpt::FileExpectations(manifest, entry)));
      RETURN_IF_ERROR(ApplyFile(*file, &rows));
    }
  }
  TableHash hash;
  for (const auto& [id, weights] : rows) {
    hash.Add(id.first, id.second, weights.data(), weights.size() / 4);
  }
  CheckpointHash out;
  out.clock = resolved.manifest.clock();
  out.dir = resolved.dir;
  out.hash = hash.value();
  out.rows = hash.rows();
  out.chain_length = resolved.chain.size();
  return out;
}

}  // namespace replica
}  // namespace shardps

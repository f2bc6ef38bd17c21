#include "common/checkpoint/checkpoint_dir.h"

#include <algorithm>
#include <optional>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/file_io.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace checkpoint {
namespace {

bool SameJob(const CheckpointManifest& a, const CheckpointManifest& b) {
  return a.job_name() == b.job_name() && a.config_fingerprint() == b.config_fingerprint() &&
         a.num_partitions() == b.num_partitions();
}

// Checks link i of `chain` against the links before it.
// `ids` is the chain of the checkpoint being restored.
absl::Status CheckLink(const std::vector<CheckpointManifest>& chain, size_t i,
                       const std::string& dir,
                       const google::protobuf::RepeatedPtrField<std::string>& ids) {
  const CheckpointManifest& m = chain[i];
  const auto broken = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(dir, ": broken delta chain: ", what));
  };
  if (i == 0) {
    if (m.kind() != CheckpointManifest::FULL) {
      return broken("the chain does not start with a FULL checkpoint");
    }
    return absl::OkStatus();
  }
  if (m.kind() != CheckpointManifest::DELTA || m.base_id() != chain[i - 1].checkpoint_id()) {
    return broken(absl::StrCat("expected a DELTA on ", chain[i - 1].checkpoint_id()));
  }
  if (!SameJob(m, chain[0])) {
    return broken(
        absl::StrCat("job, config fingerprint or partition count "
                     "differ from ",
                     chain[0].checkpoint_id()));
  }
  if (m.chain_size() != static_cast<int>(i + 1) ||
      !std::equal(m.chain().begin(), m.chain().end(), ids.begin())) {
    return broken("its chain is not a prefix of the one being restored");
  }
  return absl::OkStatus();
}

// Removes a checkpoint directory, MANIFEST first (see the header).
absl::Status RemoveCheckpoint(const std::string& root, const CheckpointEntry& entry) {
  RETURN_IF_ERROR(RemoveAll(JoinPath(entry.dir, kManifestFileName)));
  RETURN_IF_ERROR(SyncDir(entry.dir));
  RETURN_IF_ERROR(RemoveAll(entry.dir));
  return SyncDir(root);
}

absl::StatusOr<uint64_t> RemoveTempFiles(const std::string& dir) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  uint64_t removed = 0;
  for (const std::string& name : names) {
    if (!IsTempFileName(name)) continue;
    RETURN_IF_ERROR(RemoveAll(JoinPath(dir, name)));
    ++removed;
  }
  return removed;
}

}  // namespace

std::string CheckpointPath(const std::string& root, uint64_t clock) {
  return JoinPath(root, CheckpointId(clock));
}

absl::StatusOr<std::string> CreateCheckpointDir(const std::string& root, uint64_t clock) {
  RETURN_IF_ERROR(MakeDir(root));
  const std::string dir = CheckpointPath(root, clock);
  RETURN_IF_ERROR(MakeDir(dir));
  RETURN_IF_ERROR(SyncDir(root));
  absl::StatusOr<uint64_t> manifest = FileSize(JoinPath(dir, kManifestFileName));
  if (manifest.ok()) {
    return absl::AlreadyExistsError(absl::StrCat(dir, ": this checkpoint is already complete"));
  }
  return dir;
}

absl::StatusOr<std::vector<CheckpointEntry>> ListCheckpoints(const std::string& root) {
  ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(root));
  std::vector<CheckpointEntry> out;
  for (const std::string& name : names) {
    std::optional<uint64_t> clock = ParseCheckpointId(name);
    // Only canonical names: "ckpt-12" and "ckpt-000000000012" are not two
    // checkpoints of the same clock.
    if (!clock || name != CheckpointId(*clock)) continue;
    const std::string dir = JoinPath(root, name);
    if (!IsDirectory(dir)) continue;
    out.push_back({*clock, name, dir});
  }
  std::sort(out.begin(), out.end(),
            [](const CheckpointEntry& a, const CheckpointEntry& b) { return a.clock < b.clock; });
  return out;
}

absl::StatusOr<ResolvedCheckpoint> LoadCheckpoint(const std::string& root, uint64_t clock,
                                                  const LoadManifestOptions& options) {
  ResolvedCheckpoint out;
  out.dir = CheckpointPath(root, clock);
  ASSIGN_OR_RETURN(out.manifest, LoadManifest(out.dir, options));
  for (int i = 0; i < out.manifest.chain_size(); ++i) {
    const std::string& id = out.manifest.chain(i);
    const std::string dir = JoinPath(root, id);
    if (i + 1 == out.manifest.chain_size()) {
      out.chain.push_back(out.manifest);
    } else {
      absl::StatusOr<CheckpointManifest> link = LoadManifest(dir, options);
      if (!link.ok()) {
        return absl::Status(link.status().code(),
                            absl::StrCat(out.dir, ": needs ", id,
                                         " of its delta chain: ", link.status().message()));
      }
      out.chain.push_back(*std::move(link));
    }
    out.chain_dirs.push_back(dir);
    RETURN_IF_ERROR(CheckLink(out.chain, out.chain.size() - 1, dir, out.manifest.chain()));
  }
  return out;
}

absl::StatusOr<ResolvedCheckpoint> LatestComplete(const std::string& root,
                                                  const LoadManifestOptions& options) {
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries, ListCheckpoints(root));
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    absl::StatusOr<ResolvedCheckpoint> loaded = LoadCheckpoint(root, it->clock, options);
    if (loaded.ok()) return loaded;
    if (absl::IsNotFound(loaded.status()) && !FileSize(JoinPath(it->dir, kManifestFileName)).ok()) {
      LOG(WARNING) << "skipping checkpoint " << it->dir << ": incomplete (no MANIFEST)";
    } else {
      LOG(WARNING) << "skipping checkpoint " << it->dir << ": " << loaded.status().message();
    }
  }
  return absl::NotFoundError(absl::StrCat(root, ": no complete checkpoint (", entries.size(),
                                          " checkpoint directories, none complete)"));
}

absl::StatusOr<GcResult> GarbageCollect(const std::string& root, const GcOptions& options) {
  if (options.keep == 0) {
    return absl::InvalidArgumentError("GarbageCollect: keep must be >= 1");
  }
  ASSIGN_OR_RETURN(std::vector<CheckpointEntry> entries, ListCheckpoints(root));
  LoadManifestOptions load;
  load.verify_file_crcs = options.verify_file_crcs;
  // Complete checkpoints, newest first, with their chains.
  absl::flat_hash_map<std::string, ResolvedCheckpoint> complete;
  std::vector<std::string> newest_first;
  for (auto it = entries.rbegin(); it != entries.rend(); ++it) {
    absl::StatusOr<ResolvedCheckpoint> c = LoadCheckpoint(root, it->clock, load);
    if (!c.ok()) continue;
    newest_first.push_back(it->id);
    complete.emplace(it->id, *std::move(c));
  }
  GcResult result;
  if (newest_first.empty()) return result;
  const uint64_t newest_clock = *ParseCheckpointId(newest_first.front());
  absl::flat_hash_set<std::string> kept;
  for (size_t i = 0; i < newest_first.size() && i < options.keep; ++i) {
    for (const CheckpointManifest& link : complete[newest_first[i]].chain) {
      kept.insert(link.checkpoint_id());
    }
  }
  for (uint64_t clock : options.pinned) {
    auto it = complete.find(CheckpointId(clock));
    if (it == complete.end()) continue;
    for (const CheckpointManifest& link : it->second.chain) kept.insert(link.checkpoint_id());
  }
  for (const CheckpointEntry& entry : entries) {
    if (kept.contains(entry.id)) {
      result.kept.push_back(entry.id);
      ASSIGN_OR_RETURN(uint64_t temps, RemoveTempFiles(entry.dir));
      result.temp_files_removed += temps;
      continue;
    }
    if (entry.clock > newest_clock) continue;  // Maybe in progress.
    LOG(INFO) << "checkpoint GC: removing " << entry.dir
              << (complete.contains(entry.id) ? " (beyond keep)" : " (incomplete or corrupt)");
    RETURN_IF_ERROR(RemoveCheckpoint(root, entry));
    result.removed.push_back(entry.id);
  }
  return result;
}

}  // namespace checkpoint
}  // namespace shardps

#include "replica/model_pair.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace replica {

ModelPair::ModelPair(JobConfig config, std::string root, absl::Duration reader_wait)
    : config_(std::move(config)), root_(std::move(root)), reader_wait_(reader_wait) {}

bool ModelPair::Extends(const checkpoint::ResolvedCheckpoint& next) const {
  if (next.manifest.kind() != checkpoint::CheckpointManifest::DELTA || chain_.empty() ||
      next.chain.size() <= chain_.size()) {
    return false;
  }
  for (size_t i = 0; i < chain_.size(); ++i) {
    if (chain_[i] != VersionId(next.chain[i].clock(), next.chain[i].created_unix_micros())) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<ModelPair::Built> ModelPair::BuildIncremental(
    const checkpoint::CheckpointEntry& entry, int64_t created,
    checkpoint::ResolvedCheckpoint resolved) {
  const ServedModel* served = models_.served();
  Built built;
  ASSIGN_OR_RETURN(built.links, served->ReadDeltas(resolved, chain_.size(), &built.bytes_read));
  if (CreatedMicros(entry.dir) != created) {
    return absl::AbortedError(absl::StrCat(entry.dir, " was written again while loading"));
  }
  built.incremental = true;
  built.links_read = built.links.size();
  // The other model, a version or more behind, catches up in place: the
  // links it lacks (kept from the version before: written without reading,
  // it then equals the served one) and the ones just read (their old rows
  // read for the running hash).
  absl::StatusOr<ServedModel*> idle = models_.Idle(absl::Now() + reader_wait_);
  if (!idle.ok()) {
    LOG(INFO) << "replica: version " << entry.clock << " on a copy of version " << served->clock()
              << ": " << idle.status().message();
  } else if (*idle != nullptr) {
    const absl::Status st = (*idle)->CatchUp(idle_lacks_, *served, resolved, built.links);
    if (st.ok()) {
      built.in_place = true;
      built.version = *idle;
      built.resolved = std::move(resolved);
      return built;
    }
    LOG(WARNING) << "replica: version " << entry.clock << " in place failed (" << st
                 << "); on a copy of version " << served->clock();
    models_.DropIdle();
  }
  ASSIGN_OR_RETURN(built.model, served->Copy());
  RETURN_IF_ERROR(built.model->Advance(resolved, built.links));
  built.version = built.model.get();
  built.resolved = std::move(resolved);
  return built;
}

absl::StatusOr<ModelPair::Built> ModelPair::BuildFromChain(const checkpoint::CheckpointEntry& entry,
                                                           int64_t created) {
  checkpoint::LoadManifestOptions sizes;
  sizes.verify_file_crcs = false;
  Built built;
  ASSIGN_OR_RETURN(built.model, ServedModel::Load(config_, root_, entry.clock));
  built.version = built.model.get();
  ASSIGN_OR_RETURN(built.resolved, checkpoint::LoadCheckpoint(root_, entry.clock, sizes));
  if (built.resolved.manifest.created_unix_micros() != created) {
    return absl::AbortedError(absl::StrCat(entry.dir, " was written again while loading"));
  }
  for (const checkpoint::CheckpointManifest& link : built.resolved.chain) {
    built.bytes_read += FileBytes(link);
  }
  built.links_read = built.resolved.chain.size();
  return built;
}

absl::StatusOr<ModelPair::Built> ModelPair::BuildCheckpoint(
    const checkpoint::CheckpointEntry& entry, int64_t created) {
  if (models_.served() != nullptr) {
    // The chain's manifests (sizes only: the files a build reads are checked
    // in full), and the checkpoint still the one listed (not rewritten).
    checkpoint::LoadManifestOptions sizes;
    sizes.verify_file_crcs = false;
    absl::StatusOr<checkpoint::ResolvedCheckpoint> resolved =
        checkpoint::LoadCheckpoint(root_, entry.clock, sizes);
    if (resolved.ok() && resolved->manifest.created_unix_micros() == created &&
        Extends(*resolved)) {
      absl::StatusOr<Built> built = BuildIncremental(entry, created, *std::move(resolved));
      if (built.ok() || absl::IsAborted(built.status())) return built;
      // The chain rebuild below refuses the checkpoint, or shows why the
      // deltas did not do.
      LOG(WARNING) << "replica: " << entry.dir << ": incremental build failed (" << built.status()
                   << "); rebuilding from its chain";
    }
  }
  return BuildFromChain(entry, created);
}

absl::StatusOr<ModelPair::Built> ModelPair::BuildStreamDelta(ServedModel::StreamLink version) {
  const ServedModel* served = models_.served();
  Built built;
  built.incremental = true;
  built.stream = version;
  absl::StatusOr<ServedModel*> idle = models_.Idle(absl::Now() + reader_wait_);
  if (idle.ok() && *idle != nullptr && idle_lacks_.empty() && !idle_lacks_stream_.empty()) {
    const absl::Status st = (*idle)->CatchUpStream(idle_lacks_stream_, *served, {version});
    if (st.ok()) {
      built.in_place = true;
      built.version = *idle;
      return built;
    }
    LOG(WARNING) << "replica: stream version " << version->clock << " in place failed (" << st
                 << "); on a copy of version " << served->clock();
    models_.DropIdle();
  } else if (idle.ok() && *idle != nullptr) {
    models_.DropIdle();  // Behind by file links: not caught up from the stream.
  }
  ASSIGN_OR_RETURN(built.model, served->Copy());
  RETURN_IF_ERROR(built.model->AdvanceStream({version}));
  built.version = built.model.get();
  return built;
}

absl::StatusOr<std::optional<ModelPair::Built>> ModelPair::BuildStream(
    ServedModel::StreamLink version, uint64_t served_generation) {
  const ServedModel* served = models_.served();
  const bool full = version->parts.front()->full();
  for (const auto& part : version->parts) {
    if (part->full() != full) return std::nullopt;  // Mixed: not one cut's parts.
    if (full) continue;
    if (served == nullptr) return std::nullopt;
    // Every part a delta on a base the version served can take.
    const bool same_history =
        part->generation() == served_generation && part->base_clock() <= served->clock();
    const bool on_base =
        part->base_generation() == served_generation && part->base_clock() == served->clock();
    if (!(same_history || on_base)) return std::nullopt;
  }
  if (!full) return BuildStreamDelta(std::move(version));
  Built built;
  built.full = true;
  built.stream = version;
  ASSIGN_OR_RETURN(built.model, ServedModel::FromStream(config_, *version));
  built.version = built.model.get();
  return built;
}

void ModelPair::Discard(const Built& built) {
  if (built.in_place) models_.DropIdle();  // It holds the version refused.
}

std::shared_ptr<ServedModel> ModelPair::Serve(Built built) {
  std::shared_ptr<ServedModel> next =
      models_.Serve(std::move(built.model), /*keep_previous=*/built.incremental);
  chain_.clear();
  idle_lacks_.clear();
  idle_lacks_stream_.clear();
  if (built.stream != nullptr) {
    // Not a checkpoint's chain: a later poll loads one whole.
    if (built.incremental) idle_lacks_stream_.push_back(std::move(built.stream));
    return next;
  }
  idle_lacks_ = std::move(built.links);
  for (const checkpoint::CheckpointManifest& link : built.resolved.chain) {
    chain_.emplace_back(link.clock(), link.created_unix_micros());
  }
  return next;
}

}  // namespace replica
}  // namespace shardps

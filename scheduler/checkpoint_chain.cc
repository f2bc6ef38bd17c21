// CheckpointChain: full or delta, the MANIFEST, garbage collection and the
// restore points of the job's checkpoints (checkpoint_chain.h).
#include "scheduler/checkpoint_chain.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/config.h"
#include "glog/logging.h"

namespace shardps {

CheckpointChain::CheckpointChain(const JobConfig& config) : config_(config) {}

bool CheckpointChain::BeginCut(absl::Time now, bool delta_on_last) {
  cut_time_ = now;
  // A delta on the previous complete checkpoint, unless this is the first
  // one or the chain already has kMaxDeltasPerFull deltas (a move's
  // catch-up: whenever there is a previous one).
  cut_delta_ = !chain_.empty() &&
               (delta_on_last ||
                (config_.checkpoint().delta() && chain_.size() <= checkpoint::kMaxDeltasPerFull));
  return cut_delta_;
}

std::optional<uint64_t> CheckpointChain::base_clock() const {
  if (chain_.empty()) return std::nullopt;
  return checkpoint::ParseCheckpointId(chain_.back());
}

absl::Status CheckpointChain::Complete(uint64_t clock, uint64_t generation,
                                       const std::vector<checkpoint::CheckpointFile>& files,
                                       const Positions& positions) {
  checkpoint::CheckpointManifest manifest;
  manifest.set_format_version(checkpoint::kManifestFormatVersion);
  manifest.set_checkpoint_id(checkpoint::CheckpointId(clock));
  manifest.set_clock(clock);
  manifest.set_job_name(config_.name());
  manifest.set_config_fingerprint(ConfigFingerprint(config_));
  manifest.set_num_partitions(config_.cluster().num_partitions());
  if (cut_delta_) {
    manifest.set_kind(checkpoint::CheckpointManifest::DELTA);
    manifest.set_base_id(chain_.back());
    for (const std::string& id : chain_) manifest.add_chain(id);
  } else {
    manifest.set_kind(checkpoint::CheckpointManifest::FULL);
  }
  manifest.add_chain(checkpoint::CheckpointId(clock));
  manifest.set_created_unix_micros(absl::ToUnixMicros(absl::Now()));
  manifest.set_cut_unix_micros(absl::ToUnixMicros(cut_time_));
  manifest.set_generation(generation);
  for (const checkpoint::CheckpointFile& file : files) *manifest.add_files() = file;
  for (const auto& [rank, position] : positions) {
    auto* p = manifest.add_worker_positions();
    p->set_rank(rank);
    p->set_position(position);
  }
  const std::string root = config_.checkpoint().dir();
  if (absl::Status st =
          checkpoint::WriteManifest(checkpoint::CheckpointPath(root, clock), manifest);
      !st.ok()) {
    return st;
  }
  chain_.assign(manifest.chain().begin(), manifest.chain().end());
  CollectGarbage();
  return absl::OkStatus();
}

void CheckpointChain::CollectGarbage() const {
  checkpoint::GcOptions gc;
  gc.keep = config_.checkpoint().keep();
  gc.verify_file_crcs = false;  // Sizes: the servers check CRCs when they read.
  gc.pinned = pinned_;
  auto collected = checkpoint::GarbageCollect(config_.checkpoint().dir(), gc);
  if (!collected.ok()) LOG(WARNING) << "checkpoint GC: " << collected.status();
}

absl::StatusOr<std::vector<RestorePoint>> CheckpointChain::RestorePoints() const {
  std::vector<RestorePoint> points;
  const std::string& root = config_.checkpoint().dir();
  if (root.empty()) return points;
  auto entries = checkpoint::ListCheckpoints(root);
  if (absl::IsNotFound(entries.status())) return points;
  if (!entries.ok()) return entries.status();
  checkpoint::LoadManifestOptions options;
  options.verify_file_crcs = false;
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    auto resolved = checkpoint::LoadCheckpoint(root, it->clock, options);
    if (!resolved.ok()) {
      if (points.empty()) {
        LOG(WARNING) << it->dir << " is not a complete checkpoint: " << resolved.status().message();
      }
      continue;
    }
    const checkpoint::CheckpointManifest& m = resolved->manifest;
    if (m.job_name() != config_.name() ||
        m.num_partitions() != config_.cluster().num_partitions()) {
      return absl::FailedPreconditionError(absl::StrCat(
          resolved->dir, ": checkpoint of job \"", m.job_name(), "\" with ", m.num_partitions(),
          " partitions; this job is \"", config_.name(), "\" with ",
          config_.cluster().num_partitions(), " (use another checkpoint.dir)"));
    }
    RestorePoint p;
    p.initial = false;
    p.clock = m.clock();
    p.dir = resolved->dir;
    for (const auto& wp : m.worker_positions()) p.positions[wp.rank()] = wp.position();
    p.chain.assign(m.chain().begin(), m.chain().end());
    points.push_back(std::move(p));
  }
  return points;
}

}  // namespace shardps

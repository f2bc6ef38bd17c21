// ModelPair: the replica's two models (left_right.h), the one served and
// the idle one (the version before it), with what the idle one lacks to be
// the served version and the served version's checkpoint chain; it builds
// each next version (replica.h "Building a version") and serves it.
//
// From the files (BuildCheckpoint): when the checkpoint is a DELTA whose
// chain is the served version's chain plus one or more deltas (each link
// identified by its clock and its manifest's created_unix_micros), only the
// new deltas' files are read, and the idle model is brought to the new
// version in place (ServedModel::CatchUp: the links it lacks, kept parsed
// from the build before, then the new ones), or, when there is no idle
// model or readers still hold it after `reader_wait`, a copy of the served
// model is (dropping a held idle model from the pair). Anything else (a
// FULL checkpoint, a rollback, a chain that does not extend the served
// one, an incremental build that fails) is built from the files of its own
// chain alone.
//
// From the stream (BuildStream): a FULL version as a new model; a DELTA one
// on the idle model in place when it lacks exactly the stream versions
// since it was served (catching those up first), else on a copy of the
// served one. A DELTA version continues the version served when that is of
// the same job generation and at or after the delta's base (a delta since
// the base holds every change since any later cut of the same history), or
// is exactly its base (clock and generation: the first delta after a
// rollback, on the restore point); one that does not is not built.
//
// Serve makes a built version the served one; the model served before
// becomes the idle one when the version was built from it (incremental),
// lacking what the build added; otherwise it is dropped (readers holding it
// keep it).
//
// Errors: BuildCheckpoint: ABORTED when the checkpoint was written again
// while loading (try at the next poll); else those of ServedModel (the
// checkpoint does not load). BuildStream: those of ServedModel.
//
// Thread-compatible: its owner (the replica) builds and serves under one
// lock. Handles returned by Serve may be used and dropped from any thread.
#ifndef SHARDPS_REPLICA_MODEL_PAIR_H_
#define SHARDPS_REPLICA_MODEL_PAIR_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "proto/config.pb.h"
#include "replica/left_right.h"
#include "replica/served_model.h"
#include "replica/version_id.h"

namespace shardps {
namespace replica {

class ModelPair {
 public:
  // `config` finalized; `root` the checkpoint root.
  ModelPair(JobConfig config, std::string root, absl::Duration reader_wait);
  ModelPair(const ModelPair&) = delete;
  ModelPair& operator=(const ModelPair&) = delete;

  // The model served last, nullptr before the first Serve. Read only.
  const ServedModel* served() const { return models_.served(); }

  // A version built, not yet served.
  struct Built {
    std::unique_ptr<ServedModel> model;    // Null when built in place on the idle model.
    const ServedModel* version = nullptr;  // The model holding it: model, or the idle one.
    bool incremental = false;              // From the served version and what follows it.
    bool in_place = false;                 // On the idle model.
    bool full = false;                     // A stream version of FULL parts.
    uint64_t bytes_read = 0;               // Checkpoint file bytes read.
    size_t links_read = 0;  // Checkpoint links read: the new deltas, or the whole chain.
    // From the files: the checkpoint with its chain, as built, and (when
    // incremental) the links read after the served version.
    checkpoint::ResolvedCheckpoint resolved;
    std::vector<ServedModel::Link> links;
    // From the stream: the version.
    ServedModel::StreamLink stream;
  };

  // The version of the complete checkpoint `entry`, whose MANIFEST had
  // `created` when listed. See the top.
  absl::StatusOr<Built> BuildCheckpoint(const checkpoint::CheckpointEntry& entry, int64_t created);
  // The version of `version`, a stream version whose parts hold every
  // partition once, when it continues the version served, of job
  // generation `served_generation`; nullopt when it does not. See the top.
  absl::StatusOr<std::optional<Built>> BuildStream(ServedModel::StreamLink version,
                                                   uint64_t served_generation);
  // Forgets `built` (not to be served): a model changed in place leaves the
  // pair.
  void Discard(const Built& built);
  // Serves `built` (see the top) and returns a handle to it.
  std::shared_ptr<ServedModel> Serve(Built built);

 private:
  // Whether `next` is a DELTA whose chain is the served version's chain
  // plus one or more deltas.
  bool Extends(const checkpoint::ResolvedCheckpoint& next) const;
  // BuildCheckpoint from the deltas after the served version (Extends).
  absl::StatusOr<Built> BuildIncremental(const checkpoint::CheckpointEntry& entry, int64_t created,
                                         checkpoint::ResolvedCheckpoint resolved);
  // BuildCheckpoint from its chain alone.
  absl::StatusOr<Built> BuildFromChain(const checkpoint::CheckpointEntry& entry, int64_t created);
  // BuildStream of a DELTA version that continues the one served.
  absl::StatusOr<Built> BuildStreamDelta(ServedModel::StreamLink version);

  // Constant after construction.
  const JobConfig config_;
  const std::string root_;
  const absl::Duration reader_wait_;

  LeftRight<ServedModel> models_;
  // The chain of the version served (FULL first), link by link; empty for
  // a version from the stream.
  std::vector<VersionId> chain_;
  // What the idle model lacks to be the served version: the checkpoint
  // links (the idle model's chain plus these is chain_), or the stream
  // versions.
  std::vector<ServedModel::Link> idle_lacks_;
  std::vector<ServedModel::StreamLink> idle_lacks_stream_;
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_MODEL_PAIR_H_

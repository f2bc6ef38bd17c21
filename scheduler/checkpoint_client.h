// The scheduler's side of checkpoints, over gRPC:
//
//  - MakeCheckpointer: a JobCoordinator::Checkpointer that asks every server
//    of the current map to write its partitions at the cut clock
//    (ParameterServer.Checkpoint), then writes the MANIFEST (files of every
//    server, each worker's data position) last, then garbage-collects to
//    checkpoint.keep complete checkpoints. A server failure fails the
//    checkpoint (no manifest: the directory stays incomplete and is ignored).
//    With checkpoint.delta, a checkpoint after the first complete one is a
//    DELTA on the previous complete one (its manifest's chain extends that
//    one's), until a chain holds kMaxDeltasPerFull deltas: then a FULL one
//    starts the next chain. If a server cannot write a delta (it lacks the
//    base, e.g. after a restart) every server writes a full one instead. The
//    first checkpoint of a checkpointer (a new or resumed scheduler) is FULL.
//  - MakeRestorer: asks every server to restore a complete checkpoint
//    (ParameterServer.Restore); each server verifies every file it needs
//    before changing anything.
//  - FindResume: the latest complete checkpoint of a job, as a Resume
//    (clock, worker positions), checked against the job's config.
//
// The returned functions are thread-compatible (the coordinator calls them
// from its checkpoint thread).
#ifndef SHARDPS_SCHEDULER_CHECKPOINT_CLIENT_H_
#define SHARDPS_SCHEDULER_CHECKPOINT_CLIENT_H_

#include <functional>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/job.h"

namespace shardps {

using MapGetter = std::function<std::optional<PartitionMapProto>()>;

JobCoordinator::Checkpointer MakeCheckpointer(const JobConfig& config, MapGetter map);

std::function<absl::Status()> MakeRestorer(const JobConfig& config, MapGetter map,
                                           const std::string& checkpoint_dir);

// Partial recovery (checkpoint.recovery: PARTIAL): restores the latest
// complete checkpoint on one server (index, address) only: its partitions
// roll back, every other server and the workers go on.
using ServerRestorer = std::function<absl::Status(uint32_t index, const std::string& address)>;
ServerRestorer MakeServerRestorer(const JobConfig& config);

// NOT_FOUND if checkpoint.dir holds no complete checkpoint;
// FAILED_PRECONDITION if it belongs to another job or config.
absl::StatusOr<JobCoordinator::Resume> FindResume(const JobConfig& config, MapGetter map);

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CHECKPOINT_CLIENT_H_

// The scheduler's ServerOps (server_ops.h) over gRPC: each call fanned out
// to the parameter servers (ParameterServer.Checkpoint / Restore / Control),
// in parallel, the first error naming the server. What the calls mean for
// the job's checkpoint files (full or delta, the MANIFEST written last,
// keep-N garbage collection, the complete checkpoints a job can roll back
// to) is the CheckpointChain's (checkpoint_chain.h), which this adapter
// tells what the servers did:
//
//  - CopyCut / FinishCut: phase COPY on every server of the map (the
//    workers are held meanwhile), then COLLECT on every server, then the
//    chain writes the MANIFEST from the servers' files and collects
//    garbage. A server failure fails the checkpoint (no manifest: the
//    directory stays incomplete and is ignored). A delta some server
//    refuses (it lacks the base, e.g. after a restart) is copied again in
//    full by every server. A full copy's answers carry each partition's
//    rows and bytes (LastCopySizes).
//  - VersionCut: phase VERSION on every server, a delta on the chain's base.
//  - RestorePoints: the chain's.
//  - Restore: ParameterServer.Restore on every server in parallel, or on
//    one; each verifies every file it needs before changing anything. A
//    restore of every server continues the restored checkpoint's chain.
//  - AddPartitions / SwitchMap: a move's Restore and Control calls.
//
// Every request carries `control_token` (the one the scheduler hands the
// servers at registration) and names checkpoints by clock: each server
// reads and writes only under its own config's checkpoint.dir.
//
// Called from the coordinator's control thread only (thread-compatible).
#ifndef SHARDPS_SCHEDULER_CHECKPOINT_CLIENT_H_
#define SHARDPS_SCHEDULER_CHECKPOINT_CLIENT_H_

#include <cstdint>
#include <memory>

#include "proto/config.pb.h"
#include "scheduler/server_ops.h"

namespace shardps {

std::unique_ptr<ServerOps> MakeGrpcServerOps(const JobConfig& config, uint64_t control_token);

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CHECKPOINT_CLIENT_H_

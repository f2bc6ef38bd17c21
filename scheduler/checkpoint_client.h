// The scheduler's ServerOps (server_ops.h) over gRPC: checkpoints and
// restores on the parameter servers (ParameterServer.Checkpoint / Restore),
// the MANIFEST written last, keep-N garbage collection, and the list of
// complete checkpoints a job can roll back to.
//
//  - CopyCut / FinishCut: phase COPY on every server of the map (the
//    workers are held meanwhile), then COLLECT on every server and the
//    MANIFEST (files of every server, each worker's data position), then GC
//    to checkpoint.keep complete checkpoints. A server failure fails the
//    checkpoint (no manifest: the directory stays incomplete and is
//    ignored). With checkpoint.delta, a checkpoint after the first complete
//    one is a DELTA on the previous complete one (its manifest's chain
//    extends that one's), until a chain holds kMaxDeltasPerFull deltas: then
//    a FULL one starts the next chain. If a server cannot write a delta (it
//    lacks the base, e.g. after a restart) every server writes a full one
//    instead. The first checkpoint after a restore continues the restored
//    checkpoint's chain; the first of a new scheduler is FULL.
//  - RestorePoints: the complete checkpoints of checkpoint.dir, newest first
//    (sizes checked here; each server checks the CRCs of what it reads),
//    refused with FAILED_PRECONDITION if they belong to another job.
//  - Restore: ParameterServer.Restore on every server in parallel, or on
//    one; each verifies every file it needs before changing anything.
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

// What identifies the replica's versions, and the few MANIFEST reads that
// tell them apart (replica.h "Rollbacks").
//
// A checkpoint is identified by its clock AND its manifest's
// created_unix_micros: a checkpoint written again at the same clock (after
// a rollback) is another one. A version from the servers' stream has no
// checkpoint (kStreamVersion).
//
// Thread-safe (functions of the files only).
#ifndef SHARDPS_REPLICA_VERSION_ID_H_
#define SHARDPS_REPLICA_VERSION_ID_H_

#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "proto/checkpoint.pb.h"

namespace shardps {
namespace replica {

// (clock, created_unix_micros); created is -1 for a MANIFEST that does not
// parse, kStreamVersion for a version from the stream.
using VersionId = std::pair<uint64_t, int64_t>;
constexpr int64_t kStreamVersion = -2;

// The MANIFEST's created_unix_micros in checkpoint directory `dir`: -1 if
// it does not parse, nullopt if there is none (being written, or gone).
// Reads the MANIFEST only (no file checks).
std::optional<int64_t> CreatedMicros(const std::string& dir);

// When the cut began: cut_unix_micros, else (older manifests)
// created_unix_micros.
int64_t CutMicros(const checkpoint::CheckpointManifest& manifest);

// Bytes of the checkpoint's own files.
uint64_t FileBytes(const checkpoint::CheckpointManifest& manifest);

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_VERSION_ID_H_

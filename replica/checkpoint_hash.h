// The table hash of a complete checkpoint computed from its files alone: the
// reference a serving replica's hash is compared with (ps_table_hash, tests).
//
// HashCheckpoint resolves the checkpoint at a clock under a checkpoint root
// with its whole chain (common/checkpoint/checkpoint_dir.h LoadCheckpoint:
// every file's size and CRC32C checked), reads every part file of every
// link (CheckpointFileReader: all of a file verified before its records are
// used), and replays the chain as a restore does: the FULL checkpoint's
// rows, then each delta's deletions and rows. The result is the TableHash
// (common/table_hash.h) of the rows left, each (table id, key, first `dim`
// floats of its payload), shared unadmitted rows (server/table.h) included
// under their reserved keys, exactly as the files hold them.
//
// It uses no server or worker code: only the file format, so it checks the
// replica's restore path independently.
//
// Errors: those of LoadCheckpoint and CheckpointFileReader (NOT_FOUND,
// DATA_LOSS, FAILED_PRECONDITION), naming the directory or file.
//
// Thread-safety: a pure function apart from reading files. Memory: the
// files of one link at a time, plus every row's weights.
#ifndef SHARDPS_REPLICA_CHECKPOINT_HASH_H_
#define SHARDPS_REPLICA_CHECKPOINT_HASH_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/statusor.h"

namespace shardps {
namespace replica {

struct CheckpointHash {
  uint64_t clock = 0;
  std::string dir;          // The checkpoint's directory.
  uint64_t hash = 0;        // TableHash of the rows.
  uint64_t rows = 0;        // Rows hashed (every table).
  size_t chain_length = 0;  // Checkpoints replayed (1 for a FULL one).
};

// `clock`: the checkpoint at that clock; nullopt: the latest complete one.
absl::StatusOr<CheckpointHash> HashCheckpoint(const std::string& root,
                                              std::optional<uint64_t> clock);

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_CHECKPOINT_HASH_H_

// Test helpers for the checkpoint package: a fresh scratch directory and
// byte-level file surgery (flip, truncate, overwrite).
#ifndef SHARDPS_COMMON_CHECKPOINT_TEST_UTIL_H_
#define SHARDPS_COMMON_CHECKPOINT_TEST_UTIL_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/strings/string_view.h"
#include "common/checkpoint/checkpoint_file.h"
#include "proto/checkpoint.pb.h"

namespace shardps {
namespace checkpoint {
namespace testing {

// A new empty directory under $TEST_TMPDIR (or /tmp), unique per call.
std::string NewTempDir(absl::string_view label);

// Byte-level edits; each CHECK-fails if the file cannot be read or written.
std::string ReadAll(const std::string& path);
void WriteAll(const std::string& path, absl::string_view contents);
void FlipByte(const std::string& path, uint64_t offset);
void Truncate(const std::string& path, uint64_t size);

// The schema of the test checkpoints: table 1 ("emb", payload 16 bytes) and
// table 2 ("mlp", payload 8 bytes); job "job", P = 8, fingerprint 77.
std::vector<TableSchema> TestTables();

// Writes a complete checkpoint <root>/ckpt-<clock>: two files (partitions
// 0-3 and 4-7) of a few rows each, then its MANIFEST. `chain_before` lists
// the ids before it in its chain (empty for a FULL checkpoint; a DELTA's base
// is the last). Returns the manifest; CHECK-fails on any error.
CheckpointManifest WriteTestCheckpoint(const std::string& root, uint64_t clock,
                                       const std::vector<std::string>& chain_before = {},
                                       Compression compression = Compression::kNone);

}  // namespace testing
}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_TEST_UTIL_H_

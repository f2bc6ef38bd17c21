// Seed inputs for the checkpoint fuzz target (checkpoint_file_fuzz.cc): valid
// checkpoint files (plain, zstd; with deletions, with admission counts) and
// manifests, each prefixed with the mode byte the target expects.
#ifndef SHARDPS_COMMON_CHECKPOINT_FUZZ_FUZZ_SEEDS_H_
#define SHARDPS_COMMON_CHECKPOINT_FUZZ_FUZZ_SEEDS_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/checkpoint/checkpoint_file.h"

namespace shardps {
namespace checkpoint {

// The schema of the seed files (the target also checks against it).
std::vector<TableSchema> FuzzSeedTables();

// Writes the seed files through the real writer in a scratch directory
// under `scratch_dir` and returns their bytes, mode byte first.
absl::StatusOr<std::vector<std::string>> MakeFuzzSeeds(const std::string& scratch_dir);

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_FUZZ_FUZZ_SEEDS_H_

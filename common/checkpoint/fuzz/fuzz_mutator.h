// A small stand-in for libFuzzer's loop, so fuzz targets build and run with
// gcc in the normal build: runs the target on each seed, then on `runs`
// random mutations of the seeds (bit flips, byte sets, truncations,
// insertions, erasures, duplicated ranges). Deterministic for a given
// `rng_seed`. No coverage feedback: real fuzzing is libFuzzer's job (see
// README.md); this keeps the target exercised by every `bazel test`.
#ifndef SHARDPS_COMMON_CHECKPOINT_FUZZ_FUZZ_MUTATOR_H_
#define SHARDPS_COMMON_CHECKPOINT_FUZZ_FUZZ_MUTATOR_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace shardps {
namespace checkpoint {

using FuzzTarget = int (*)(const uint8_t* data, size_t size);

// Returns the number of inputs run (seeds + runs).
uint64_t RunMutations(FuzzTarget target, const std::vector<std::string>& seeds, uint64_t runs,
                      uint64_t rng_seed);

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_FUZZ_FUZZ_MUTATOR_H_

// Runs one fuzz target (whichever is linked in) on its seeds and on
// FUZZ_TEST_RUNS random mutations of them in the normal (gcc) build. The
// seeds must reach the target's accepting path and the mutations its
// refusals; nothing may crash. Real fuzzing: run_fuzzers.sh.
#include "tests/fuzz/fuzz_target.h"

#include <string>
#include <vector>

#include "common/checkpoint/fuzz/fuzz_mutator.h"
#include "gtest/gtest.h"

#ifndef FUZZ_TEST_RUNS
#define FUZZ_TEST_RUNS 20000
#endif

namespace shardps {
namespace fuzz {
namespace {

TEST(FuzzTargetTest, SeedsAreAccepted) {
  const std::vector<std::string> seeds = FuzzSeeds();
  ASSERT_FALSE(seeds.empty());
  Outcomes() = FuzzOutcomes();
  for (const std::string& seed : seeds) {
    const uint64_t before = Outcomes().accepted;
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    EXPECT_GT(Outcomes().accepted, before) << "seed " << (&seed - seeds.data());
  }
}

TEST(FuzzTargetTest, MutationsNeverCrash) {
  Outcomes() = FuzzOutcomes();
  const std::vector<std::string> seeds = FuzzSeeds();
  const uint64_t ran =
      checkpoint::RunMutations(&LLVMFuzzerTestOneInput, seeds, FUZZ_TEST_RUNS, /*rng_seed=*/11);
  EXPECT_EQ(ran, seeds.size() + FUZZ_TEST_RUNS);
  EXPECT_GT(Outcomes().accepted, 0u);
  EXPECT_GT(Outcomes().refused, 0u);
}

}  // namespace
}  // namespace fuzz
}  // namespace shardps

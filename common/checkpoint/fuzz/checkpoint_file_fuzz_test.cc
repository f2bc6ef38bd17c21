// Runs the fuzz target on its seeds and on random mutations of them in the
// normal (gcc) build; libFuzzer runs are described in README.md.
#include <cstdlib>
#include <string>

#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/fuzz/fuzz_mutator.h"
#include "common/checkpoint/fuzz/fuzz_seeds.h"
#include "common/checkpoint/manifest.h"
#include "gtest/gtest.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace shardps {
namespace checkpoint {
namespace {

std::vector<std::string> Seeds() {
  const char* tmp = std::getenv("TEST_TMPDIR");
  auto seeds = MakeFuzzSeeds(tmp != nullptr ? tmp : "/tmp");
  EXPECT_TRUE(seeds.ok()) << seeds.status();
  return seeds.ok() ? *seeds : std::vector<std::string>();
}

TEST(CheckpointFileFuzzTest, SeedsAreValidInputs) {
  const std::vector<std::string> seeds = Seeds();
  ASSERT_EQ(seeds.size(), 14u);  // 6 files, each in modes 0 and 1; 2 manifests.
  for (const std::string& seed : seeds) {
    const std::string input = seed.substr(1);
    if (seed[0] == 0 || seed[0] == 1) {
      Expectations e;
      e.tables = FuzzSeedTables();
      e.check_key_partitions = true;
      auto reader = CheckpointFileReader::Parse(input, "seed", e);
      EXPECT_TRUE(reader.ok()) << reader.status();
    } else if (seed[0] == 2) {
      EXPECT_TRUE(ParseManifest(input, "seed").ok());
    }
  }
}

TEST(CheckpointFileFuzzTest, MutationsNeverCrash) {
  const uint64_t ran = RunMutations(&LLVMFuzzerTestOneInput, Seeds(), 30000, /*rng_seed=*/7);
  EXPECT_EQ(ran, 30014u);
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps

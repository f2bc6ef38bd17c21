// main() for fuzz targets built without libFuzzer (gcc, the normal build).
//
//   checkpoint_file_fuzz [--runs=N] [--seed=S] [FILE|DIR]...
//
// Runs the target on every FILE (and every file in every DIR), then on N
// random mutations of them (default 10000; with no files, of the built-in
// seeds). Exits 0 if nothing crashed. With --write_seeds=DIR it writes the
// built-in seeds there as a corpus for libFuzzer and exits.
#include <stdlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/fuzz/fuzz_mutator.h"
#include "common/checkpoint/fuzz/fuzz_seeds.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace shardps {
namespace checkpoint {
namespace {

int Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz driver: %s\n", what.c_str());
  return 2;
}

absl::StatusOr<std::vector<std::string>> BuiltInSeeds() {
  char scratch[] = "/tmp/ckpt_fuzz_seeds.XXXXXX";
  if (::mkdtemp(scratch) == nullptr) return absl::InternalError("mkdtemp");
  auto seeds = MakeFuzzSeeds(scratch);
  (void)RemoveAll(scratch);
  return seeds;
}

int Main(int argc, char** argv) {
  uint64_t runs = 10000, rng_seed = 1;
  std::string write_seeds;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--runs=")) {
      if (!absl::SimpleAtoi(arg, &runs)) return Fail("bad --runs");
    } else if (absl::ConsumePrefix(&arg, "--seed=")) {
      if (!absl::SimpleAtoi(arg, &rng_seed)) return Fail("bad --seed");
    } else if (absl::ConsumePrefix(&arg, "--write_seeds=")) {
      write_seeds = std::string(arg);
    } else if (IsDirectory(argv[i])) {
      auto names = ListDir(argv[i]);
      if (!names.ok()) return Fail(names.status().ToString());
      for (const std::string& n : *names) inputs.push_back(JoinPath(argv[i], n));
    } else {
      inputs.push_back(argv[i]);
    }
  }
  std::vector<std::string> seeds;
  for (const std::string& path : inputs) {
    auto bytes = ReadFileToString(path);
    if (!bytes.ok()) return Fail(bytes.status().ToString());
    seeds.push_back(*std::move(bytes));
  }
  if (seeds.empty() || !write_seeds.empty()) {
    auto built_in = BuiltInSeeds();
    if (!built_in.ok()) return Fail(built_in.status().ToString());
    if (!write_seeds.empty()) {
      for (size_t i = 0; i < built_in->size(); ++i) {
        absl::Status s =
            WriteFileAtomically(JoinPath(write_seeds, absl::StrCat("seed-", i)), (*built_in)[i]);
        if (!s.ok()) return Fail(s.ToString());
      }
      std::printf("wrote %zu seeds to %s\n", built_in->size(), write_seeds.c_str());
      return 0;
    }
    seeds = *std::move(built_in);
  }
  const uint64_t ran = RunMutations(&LLVMFuzzerTestOneInput, seeds, runs, rng_seed);
  std::printf("ran %llu inputs (%zu seeds), no crash\n", static_cast<unsigned long long>(ran),
              seeds.size());
  return 0;
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps

int main(int argc, char** argv) { return shardps::checkpoint::Main(argc, argv); }

// main() for the fuzz targets of tests/fuzz/ in the normal (gcc) build, where
// libFuzzer is not available:
//
//   <target> [--runs=N] [--seed=S] [FILE|DIR]...
//   <target> --write_seeds=DIR
//
// Runs the target on every FILE (and every file of every DIR; with none, on
// the built-in seeds), then on N random mutations of them (default 10000,
// common/checkpoint/fuzz/fuzz_mutator.h). Exits 0 if nothing crashed.
// --write_seeds writes the built-in seeds to DIR as a libFuzzer corpus.
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "common/checkpoint/fuzz/fuzz_mutator.h"
#include "tests/fuzz/fuzz_target.h"

namespace shardps {
namespace fuzz {
namespace {

namespace fs = std::filesystem;

int Fail(const std::string& what) {
  std::fprintf(stderr, "fuzz driver: %s\n", what.c_str());
  return 2;
}

bool ReadFile(const fs::path& path, std::string* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::ostringstream bytes;
  bytes << in.rdbuf();
  *out = bytes.str();
  return true;
}

int WriteSeeds(const std::string& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) return Fail(absl::StrCat("cannot create ", dir, ": ", ec.message()));
  const std::vector<std::string> seeds = FuzzSeeds();
  for (size_t i = 0; i < seeds.size(); ++i) {
    const fs::path path = fs::path(dir) / absl::StrCat("seed-", i);
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out.write(seeds[i].data(), static_cast<std::streamsize>(seeds[i].size()));
    if (!out) return Fail(absl::StrCat("cannot write ", path.string()));
  }
  std::printf("wrote %zu seeds to %s\n", seeds.size(), dir.c_str());
  return 0;
}

// Appends the inputs named by `arg` (a file, or every file of a directory).
bool AddInputs(const std::string& arg, std::vector<std::string>* inputs) {
  std::error_code ec;
  std::vector<fs::path> paths;
  if (fs::is_directory(arg, ec)) {
    for (const fs::directory_entry& e : fs::directory_iterator(arg, ec)) {
      if (e.is_regular_file()) paths.push_back(e.path());
    }
    if (ec) return false;
  } else {
    paths.push_back(arg);
  }
  for (const fs::path& p : paths) {
    std::string bytes;
    if (!ReadFile(p, &bytes)) return false;
    inputs->push_back(std::move(bytes));
  }
  return true;
}

int Main(int argc, char** argv) {
  uint64_t runs = 10000, rng_seed = 1;
  std::vector<std::string> inputs;
  for (int i = 1; i < argc; ++i) {
    absl::string_view arg = argv[i];
    if (absl::ConsumePrefix(&arg, "--runs=")) {
      if (!absl::SimpleAtoi(arg, &runs)) return Fail("bad --runs");
    } else if (absl::ConsumePrefix(&arg, "--seed=")) {
      if (!absl::SimpleAtoi(arg, &rng_seed)) return Fail("bad --seed");
    } else if (absl::ConsumePrefix(&arg, "--write_seeds=")) {
      return WriteSeeds(std::string(arg));
    } else if (!AddInputs(argv[i], &inputs)) {
      return Fail(absl::StrCat("cannot read ", argv[i]));
    }
  }
  if (inputs.empty()) inputs = FuzzSeeds();
  const uint64_t ran = checkpoint::RunMutations(&LLVMFuzzerTestOneInput, inputs, runs, rng_seed);
  std::printf(
      "ran %llu inputs (%zu seeds): %llu accepted, %llu refused, "
      "no crash\n",
      static_cast<unsigned long long>(ran), inputs.size(),
      static_cast<unsigned long long>(Outcomes().accepted),
      static_cast<unsigned long long>(Outcomes().refused));
  return 0;
}

}  // namespace
}  // namespace fuzz
}  // namespace shardps

int main(int argc, char** argv) { return shardps::fuzz::Main(argc, argv); }

// What every fuzz target in tests/fuzz/ provides besides libFuzzer's entry
// point, so that one driver (fuzz_main.cc) and one test (fuzz_target_test.cc)
// serve them all.
//
// A target is one .cc file that defines
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
//   std::vector<std::string> shardps::fuzz::FuzzSeeds();
// and reports each input's outcome with CountOutcome(). The entry point must
// never crash, hang or leak on any input; an invariant it finds broken is a
// bug and aborts through FuzzCheck (libFuzzer then saves the input).
//
// Built two ways: with gcc in the normal Bazel build, linked with
// fuzz_main.cc (random mutations of the seeds, no coverage feedback), and with
// clang -fsanitize=fuzzer,address,undefined by run_fuzzers.sh.
#ifndef SHARDPS_TESTS_FUZZ_FUZZ_TARGET_H_
#define SHARDPS_TESTS_FUZZ_FUZZ_TARGET_H_

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace shardps {
namespace fuzz {

// The target's seed corpus: valid inputs that reach the accepting paths.
std::vector<std::string> FuzzSeeds();

// How many inputs the target accepted (reached its success path) and
// refused with a status. Not thread-safe; targets run single-threaded.
struct FuzzOutcomes {
  uint64_t accepted = 0;
  uint64_t refused = 0;
};
FuzzOutcomes& Outcomes();
inline void CountOutcome(bool accepted) { ++(accepted ? Outcomes().accepted : Outcomes().refused); }

// True if the environment sets FUZZ_VERBOSE: targets then print each
// refusal to stderr (for triage of a corpus).
bool Verbose();

// Aborts with `what` unless `ok`: a broken invariant is a crash.
void FuzzCheck(bool ok, const char* what);

}  // namespace fuzz
}  // namespace shardps

#endif  // SHARDPS_TESTS_FUZZ_FUZZ_TARGET_H_

#include "tests/fuzz/fuzz_target.h"

#include <cstdio>
#include <cstdlib>

namespace shardps {
namespace fuzz {

FuzzOutcomes& Outcomes() {
  static FuzzOutcomes outcomes;
  return outcomes;
}

bool Verbose() {
  static const bool verbose = std::getenv("FUZZ_VERBOSE") != nullptr;
  return verbose;
}

void FuzzCheck(bool ok, const char* what) {
  if (ok) return;
  std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
  std::abort();
}

}  // namespace fuzz
}  // namespace shardps

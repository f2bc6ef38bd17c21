#include "common/checkpoint/fuzz/fuzz_mutator.h"

#include <algorithm>
#include <random>

namespace shardps {
namespace checkpoint {
namespace {

void Mutate(std::mt19937_64* rng, std::string* s) {
  auto pick = [&](size_t n) { return n == 0 ? 0 : (*rng)() % n; };
  switch ((*rng)() % 7) {
    case 0:  // Flip a bit.
      if (!s->empty()) (*s)[pick(s->size())] ^= char(1 << pick(8));
      break;
    case 1:  // Set a byte, often to a boundary value.
      if (!s->empty()) {
        static const char kValues[] = {0, 1, 0x7f, char(0x80), char(0xff)};
        (*s)[pick(s->size())] = pick(2) ? kValues[pick(sizeof(kValues))] : char((*rng)());
      }
      break;
    case 2:  // Truncate.
      s->resize(pick(s->size() + 1));
      break;
    case 3: {  // Insert random bytes.
      std::string bytes(1 + pick(16), '\0');
      for (char& c : bytes) c = char((*rng)());
      s->insert(pick(s->size() + 1), bytes);
      break;
    }
    case 4:  // Erase a range.
      if (!s->empty()) {
        const size_t at = pick(s->size());
        s->erase(at, 1 + pick(std::min<size_t>(32, s->size() - at)));
      }
      break;
    case 5:  // Duplicate a range somewhere else.
      if (!s->empty()) {
        const size_t at = pick(s->size());
        const std::string range = s->substr(at, 1 + pick(64));
        s->insert(pick(s->size() + 1), range);
      }
      break;
    default:  // Overwrite a little-endian u32 with a boundary value.
      if (s->size() >= 4) {
        static const uint32_t kWords[] = {0, 1, 0xffffffffu, 0x7fffffffu, 1u << 20, 1u << 26};
        const uint32_t w = kWords[pick(sizeof(kWords) / sizeof(kWords[0]))];
        s->replace(pick(s->size() - 3), 4, reinterpret_cast<const char*>(&w), 4);
      }
      break;
  }
}

}  // namespace

uint64_t RunMutations(FuzzTarget target, const std::vector<std::string>& seeds, uint64_t runs,
                      uint64_t rng_seed) {
  std::mt19937_64 rng(rng_seed);
  uint64_t count = 0;
  for (const std::string& seed : seeds) {
    target(reinterpret_cast<const uint8_t*>(seed.data()), seed.size());
    ++count;
  }
  for (uint64_t i = 0; i < runs; ++i) {
    std::string input;
    if (!seeds.empty() && rng() % 16 != 0) {
      input = seeds[rng() % seeds.size()];
    } else {  // Sometimes pure noise.
      input.resize(rng() % 256);
      for (char& c : input) c = char(rng());
    }
    const int mutations = 1 + static_cast<int>(rng() % 4);
    for (int m = 0; m < mutations; ++m) Mutate(&rng, &input);
    target(reinterpret_cast<const uint8_t*>(input.data()), input.size());
    ++count;
  }
  return count;
}

}  // namespace checkpoint
}  // namespace shardps

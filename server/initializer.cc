#include "server/initializer.h"

#include <algorithm>
#include <cmath>

#include "common/partition.h"

namespace shardps {
namespace {

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;

// A uniform float in [0, 1) from the top 24 bits (exact in fp32).
inline float Unit(uint64_t bits) { return static_cast<float>(bits >> 40) * (1.0f / 16777216.0f); }

}  // namespace

RowInitializer::RowInitializer(const InitializerConfig& config, uint64_t seed, uint32_t dim)
    : kind_(config.kind()),
      scale_(config.scale()),
      value_(config.value()),
      seed_(seed),
      dim_(dim) {}

void RowInitializer::Fill(uint64_t key, float* out) const {
  const uint64_t row_seed = Mix64(seed_ ^ Mix64(key + kGolden));
  switch (kind_) {
    case InitializerConfig::CONSTANT:
      std::fill(out, out + dim_, value_);
      return;
    case InitializerConfig::UNIFORM:
    case InitializerConfig::KIND_UNSPECIFIED:
      for (uint32_t i = 0; i < dim_; ++i) {
        const float u = Unit(Mix64(row_seed + (i + 1) * kGolden));
        out[i] = (2.0f * u - 1.0f) * scale_;
      }
      return;
    case InitializerConfig::NORMAL:
      for (uint32_t i = 0; i < dim_; ++i) {
        const uint64_t c = row_seed + (2 * uint64_t{i} + 1) * kGolden;
        const double u1 = 1.0 - Unit(Mix64(c));  // (0, 1]: log is finite.
        const double u2 = Unit(Mix64(c + kGolden));
        const double z = std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2);
        out[i] = static_cast<float>(z * scale_);
      }
      return;
    case InitializerConfig::ZEROS:
    case InitializerConfig::MODEL:
    default:
      std::fill(out, out + dim_, 0.0f);
      return;
  }
}

}  // namespace shardps

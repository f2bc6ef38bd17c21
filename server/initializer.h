// Deterministic initial rows: a row's initial value is a pure function of
// (table seed, key, element index), so every shard that creates the row (or
// re-creates it after eviction or on restore to another server count)
// produces the same bits.
//
// The generator is counter-based: element i of key k draws from
// Mix64(row_seed + i * golden), row_seed = Mix64(seed ^ Mix64(k + golden)).
// UNIFORM is U(-scale, scale) from 24 random bits; NORMAL is N(0, scale^2)
// by Box-Muller on two draws; ZEROS and CONSTANT need no draws. MODEL (dense
// tables whose rows come from InitRows) reads as zeros until written.
//
// Thread-safety: immutable after construction.
#ifndef SHARDPS_SERVER_INITIALIZER_H_
#define SHARDPS_SERVER_INITIALIZER_H_

#include <cstdint>

#include "proto/config.pb.h"

namespace shardps {

class RowInitializer {
 public:
  RowInitializer(const InitializerConfig& config, uint64_t seed, uint32_t dim);

  // Writes the initial value of `key`'s row to out[0, dim).
  void Fill(uint64_t key, float* out) const;

  InitializerConfig::Kind kind() const { return kind_; }

 private:
  const InitializerConfig::Kind kind_;
  const float scale_;
  const float value_;
  const uint64_t seed_;
  const uint32_t dim_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_INITIALIZER_H_

// TableHash: an order-independent fingerprint of a model's rows, so that two
// processes holding the same rows (a serving replica and the checkpoint files
// of the trainer's cut, replica/replica.h) can prove it by comparing one
// 64-bit value.
//
// A row is (table id, key, its `dim` weights, bit for bit); optimizer state
// and row metadata are not part of it (a replica serves weights only). The
// hash of a set of rows is the wrapping sum of RowHash over the rows, so it
// does not depend on the order rows are visited in, and a row counted twice
// does not cancel out (as it would with XOR). An empty set hashes to 0.
//
// Not a cryptographic hash: it detects divergence, it does not resist forgery.
//
// Thread-safety: pure functions; a TableHash is a value (one thread at a time).
#ifndef SHARDPS_COMMON_TABLE_HASH_H_
#define SHARDPS_COMMON_TABLE_HASH_H_

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "common/partition.h"

namespace shardps {

// The hash of one row: `weights` points to `dim` floats (any alignment).
inline uint64_t RowHash(uint32_t table_id, uint64_t key, const void* weights, size_t dim) {
  uint64_t h = MixKey(table_id, key) ^ (uint64_t{dim} << 32);
  const char* p = static_cast<const char*>(weights);
  for (size_t i = 0; i < dim; ++i) {
    uint32_t bits;
    std::memcpy(&bits, p + 4 * i, 4);
    h = Mix64(h ^ bits);
  }
  return Mix64(h);
}

// Accumulates rows; value() is their hash.
class TableHash {
 public:
  void Add(uint32_t table_id, uint64_t key, const void* weights, size_t dim) {
    sum_ += RowHash(table_id, key, weights, dim);
    ++rows_;
  }
  uint64_t value() const { return sum_; }
  uint64_t rows() const { return rows_; }

 private:
  uint64_t sum_ = 0;
  uint64_t rows_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_TABLE_HASH_H_

// A table stripe's index: uint64 key -> (slot, generation).
//
// Open addressing with linear probing over 16-byte buckets that hold the key
// and its value together, so a lookup that misses the cache costs one line
// (absl::flat_hash_map costs a control-byte line and a slot line). Capacity is
// a power of two, the load is kept at most 3/4, and Erase shifts the probe
// run back (no tombstones, so lookups never slow down after evictions).
//
// Prefetch(key) issues a prefetch of the key's home bucket. The Table
// prefetches a batch's buckets before looking them up, so the misses of a
// batch overlap instead of following each other.
//
// Bucket pointers stay valid until the next Insert, Erase or Clear.
//
// Thread-safety: not thread-safe; the Table's stripe lock guards each index.
#ifndef SHARDPS_SERVER_ROW_INDEX_H_
#define SHARDPS_SERVER_ROW_INDEX_H_

#include <cstddef>
#include <cstdint>
#include <memory>

#include "common/partition.h"

namespace shardps {

class RowIndex {
 public:
  struct Bucket {
    uint64_t key;
    uint32_t slot;        // kEmpty: the bucket is free.
    uint32_t generation;  // The Table's change generation of the row.
  };
  static_assert(sizeof(Bucket) == 16, "four buckets a cache line");
  static constexpr uint32_t kEmpty = 0xffffffffu;  // Slots are below it.

  RowIndex() = default;
  RowIndex(const RowIndex&) = delete;
  RowIndex& operator=(const RowIndex&) = delete;

  size_t size() const { return size_; }
  size_t capacity() const { return mask_ == 0 ? 0 : mask_ + 1; }
  size_t MemoryBytes() const { return capacity() * sizeof(Bucket); }

  void Prefetch(uint64_t key) const {
    if (mask_ == 0) return;
    const Bucket* b = &buckets_[Home(key)];
#if defined(__x86_64__)
    // GCC 12 -O2 deletes a loop of nothing but __builtin_prefetch calls as
    // dead code (measured: no prefetch instruction was left in the Table's
    // batch loop); a volatile asm stays.
    asm volatile("prefetcht0 %0" : : "m"(*reinterpret_cast<const char*>(b)));
#else
    __builtin_prefetch(b);
#endif
  }

  // The key's bucket, or nullptr.
  const Bucket* Find(uint64_t key) const {
    if (mask_ == 0) return nullptr;
    for (size_t i = Home(key);; i = (i + 1) & mask_) {
      const Bucket& b = buckets_[i];
      if (b.slot == kEmpty) return nullptr;
      if (b.key == key) return &b;
    }
  }
  Bucket* Find(uint64_t key) {
    return const_cast<Bucket*>(static_cast<const RowIndex*>(this)->Find(key));
  }
  bool Contains(uint64_t key) const { return Find(key) != nullptr; }

  // Adds `key`, which must not be present. `slot` must be below kEmpty.
  Bucket* Insert(uint64_t key, uint32_t slot, uint32_t generation) {
    if ((size_ + 1) * 4 > capacity() * 3) Rehash(capacity() == 0 ? 16 : capacity() * 2);
    size_t i = Home(key);
    while (buckets_[i].slot != kEmpty) i = (i + 1) & mask_;
    buckets_[i] = Bucket{key, slot, generation};
    ++size_;
    return &buckets_[i];
  }

  // Grows the capacity (never shrinks it) so that `n` keys fit without a
  // rehash.
  void Reserve(size_t n) {
    size_t capacity = this->capacity() == 0 ? 16 : this->capacity();
    while (n * 4 > capacity * 3) capacity *= 2;
    if (capacity != this->capacity()) Rehash(capacity);
  }

  // Removes `key`; false if it was not present.
  bool Erase(uint64_t key) {
    Bucket* b = Find(key);
    if (b == nullptr) return false;
    size_t hole = static_cast<size_t>(b - buckets_.get());
    // Move back every later bucket of the run whose home is not in
    // (hole, j]: its probe passed the hole.
    for (size_t j = (hole + 1) & mask_; buckets_[j].slot != kEmpty; j = (j + 1) & mask_) {
      const size_t home = Home(buckets_[j].key);
      const bool stays = hole <= j ? (hole < home && home <= j) : (hole < home || home <= j);
      if (stays) continue;
      buckets_[hole] = buckets_[j];
      hole = j;
    }
    buckets_[hole].slot = kEmpty;
    --size_;
    return true;
  }

  // Drops every key and the memory.
  void Clear() {
    buckets_.reset();
    mask_ = 0;
    size_ = 0;
  }

  // Calls f(const Bucket&) (or f(Bucket&)) for every key, in bucket order.
  // `f` must not insert or erase.
  template <typename F>
  void ForEach(F&& f) const {
    for (size_t i = 0; i < capacity(); ++i) {
      if (buckets_[i].slot != kEmpty) f(buckets_[i]);
    }
  }
  template <typename F>
  void ForEachMutable(F&& f) {
    for (size_t i = 0; i < capacity(); ++i) {
      if (buckets_[i].slot != kEmpty) f(buckets_[i]);
    }
  }

 private:
  // Mix64 (full avalanche): every key bit reaches the low bits.
  size_t Home(uint64_t key) const { return static_cast<size_t>(Mix64(key)) & mask_; }

  void Rehash(size_t new_capacity) {
    std::unique_ptr<Bucket[]> old = std::move(buckets_);
    const size_t old_capacity = capacity();
    buckets_.reset(new Bucket[new_capacity]);
    for (size_t i = 0; i < new_capacity; ++i) buckets_[i].slot = kEmpty;
    mask_ = new_capacity - 1;
    for (size_t i = 0; i < old_capacity; ++i) {
      if (old[i].slot == kEmpty) continue;
      size_t j = Home(old[i].key);
      while (buckets_[j].slot != kEmpty) j = (j + 1) & mask_;
      buckets_[j] = old[i];
    }
  }

  std::unique_ptr<Bucket[]> buckets_;
  size_t mask_ = 0;  // capacity - 1; 0 while there are no buckets.
  size_t size_ = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_ROW_INDEX_H_

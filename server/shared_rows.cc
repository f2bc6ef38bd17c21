// SharedRows (shared_rows.h).
#include "server/shared_rows.h"

#include <algorithm>
#include <cstring>

#include "common/partition.h"

namespace shardps {
namespace {

// The multiplicative inverse of an odd 64-bit value (Newton's iteration
// doubles the correct low bits each step: 5 steps from 3 bits reach 64).
constexpr uint64_t InverseOdd(uint64_t a) {
  uint64_t x = a;
  for (int i = 0; i < 5; ++i) x *= 2 - a * x;
  return x;
}

// The inverse of Mix64 (common/partition.h): each xor-shift undone by
// xoring the shifted values back in, each multiply by its inverse.
uint64_t InverseMix64(uint64_t x) {
  x ^= (x >> 31) ^ (x >> 62);
  x *= InverseOdd(0x94d049bb133111ebULL);
  x ^= (x >> 27) ^ (x >> 54);
  x *= InverseOdd(0xbf58476d1ce4e5b9ULL);
  x ^= (x >> 30) ^ (x >> 60);
  return x;
}

uint32_t PartitionOfMixed(uint64_t mixed, uint32_t num_partitions) {
  return static_cast<uint32_t>((static_cast<unsigned __int128>(mixed) * num_partitions) >> 64);
}

}  // namespace

SharedRows::SharedRows(uint32_t table_id, uint32_t num_partitions, uint32_t dim, size_t stride,
                       const Optimizer* optimizer, const std::atomic<uint32_t>* generation)
    : table_id_(table_id),
      num_partitions_(num_partitions),
      dim_(dim),
      stride_(stride),
      optimizer_(optimizer),
      table_generation_(generation) {}

void SharedRows::Reset() {
  MutexLock lock(&mu_);
  of_.assign(num_partitions_, 0);
  rows_.assign(stride_, 0.0f);
  optimizer_->InitState(rows_.data() + dim_);
  generation_.assign(1, table_generation_->load(std::memory_order_relaxed));
  users_.assign(1, num_partitions_);
}

uint64_t SharedRows::Key(uint32_t partition) const {
  // The lowest mixed value of the partition: ceil(p * 2^64 / P).
  const unsigned __int128 lowest =
      ((static_cast<unsigned __int128>(partition) << 64) + num_partitions_ - 1) / num_partitions_;
  return InverseMix64(static_cast<uint64_t>(lowest)) ^
         Mix64(uint64_t{table_id_} + 0x9e3779b97f4a7c15ULL);
}

bool SharedRows::IsKey(uint64_t key, uint32_t* partition) const {
  const uint64_t mixed = MixKey(table_id_, key);
  *partition = PartitionOfMixed(mixed, num_partitions_);
  return mixed == 0 || PartitionOfMixed(mixed - 1, num_partitions_) != *partition;
}

float* SharedRows::RowOf(uint64_t key) const {
  const uint32_t p = PartitionOf(table_id_, key, num_partitions_);
  // The vector is not resized while the lock is held by the caller.
  return const_cast<float*>(rows_.data()) + size_t{of_[p]} * stride_;
}

// The lock is taken only once a key without a row shows up.
void SharedRows::Pull(const uint64_t* keys, const uint32_t* order, float* const* rows, size_t n,
                      Encoding encoding, char* out) const ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const size_t row_bytes = dim_ * BytesPerValue(encoding);
  bool locked = false;
  for (size_t j = 0; j < n; ++j) {
    if (rows[j] != nullptr) continue;
    if (!locked) {
      mu_.Lock();
      locked = true;
    }
    const uint32_t i = order[j];
    EncodeValuesTo(RowOf(keys[i]), dim_, encoding, out + i * row_bytes);
  }
  if (locked) mu_.Unlock();
}

void SharedRows::Push(const uint64_t* keys, const uint32_t* order, const uint8_t* to_shared,
                      size_t n, const float* grads, float lr_scale) {
  // Per thread: no allocation once warm. slot[g]: row g's sum in `sums`.
  thread_local std::vector<float> sums;
  thread_local std::vector<int32_t> slot;
  thread_local std::vector<uint32_t> touched;
  MutexLock lock(&mu_);
  slot.assign(generation_.size(), -1);
  touched.clear();
  // Summed in batch order (stripe by stripe): the same bits for the same
  // push, whichever threads grouped it.
  for (size_t j = 0; j < n; ++j) {
    if (!to_shared[j]) continue;
    const uint32_t i = order[j];
    const uint32_t g = of_[PartitionOf(table_id_, keys[i], num_partitions_)];
    if (slot[g] < 0) {
      slot[g] = static_cast<int32_t>(touched.size());
      touched.push_back(g);
      sums.resize(touched.size() * dim_);
      std::fill(sums.end() - dim_, sums.end(), 0.0f);
    }
    float* sum = sums.data() + size_t(slot[g]) * dim_;
    const float* g_i = grads + size_t{i} * dim_;
    for (uint32_t k = 0; k < dim_; ++k) sum[k] += g_i[k];
  }
  const uint32_t generation = table_generation_->load(std::memory_order_relaxed);
  for (size_t t = 0; t < touched.size(); ++t) {
    float* row = rows_.data() + size_t{touched[t]} * stride_;
    optimizer_->Update(row, row + dim_, sums.data() + t * dim_, lr_scale);
    generation_[touched[t]] = generation;
    ++updates_;
  }
}

void SharedRows::Restore(uint32_t partition, const float* payload) {
  MutexLock lock(&mu_);
  const size_t bytes = stride_ * sizeof(float);
  --users_[of_[partition]];
  // Partitions of one server carry bit-identical rows: share one again.
  // Newest rows first (a server's partitions come one after another).
  size_t row = users_.size();
  for (size_t g = users_.size(); g-- > 0;) {
    if (users_[g] == 0) {
      row = g;  // Free: reused unless a row in use matches.
    } else if (std::memcmp(rows_.data() + g * stride_, payload, bytes) == 0) {
      row = g;
      break;
    }
  }
  if (row == users_.size()) {
    rows_.resize(rows_.size() + stride_);
    generation_.push_back(0);
    users_.push_back(0);
  }
  if (users_[row] == 0) {
    std::memcpy(rows_.data() + row * stride_, payload, bytes);
    generation_[row] = table_generation_->load(std::memory_order_relaxed);
  }
  ++users_[row];
  of_[partition] = static_cast<uint32_t>(row);
}

void SharedRows::ForEach(std::optional<uint32_t> since,
                         const std::function<void(uint32_t partition, uint64_t key,
                                                  const float* payload)>& visit) const {
  MutexLock lock(&mu_);
  for (uint32_t p = 0; p < num_partitions_; ++p) {
    const uint32_t g = of_[p];
    if (since.has_value() && generation_[g] <= *since) continue;
    visit(p, Key(p), rows_.data() + size_t{g} * stride_);
  }
}

uint64_t SharedRows::RowsInUse() const {
  MutexLock lock(&mu_);
  uint64_t n = 0;
  for (uint32_t users : users_) n += users > 0;
  return n;
}

uint64_t SharedRows::Updates() const {
  MutexLock lock(&mu_);
  return updates_;
}

}  // namespace shardps

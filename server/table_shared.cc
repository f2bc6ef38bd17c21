// Table: shared unadmitted rows (table.h, "Shared unadmitted rows"): the
// partition -> shared row map, the rows' pulls and pushes, their reserved
// checkpoint keys and their restore.
#include <algorithm>
#include <cstring>
#include <optional>
#include <vector>

#include "common/partition.h"
#include "server/table.h"
#include "server/table_internal.h"

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

uint64_t Table::SharedRowKey(uint32_t partition) const {
  // The lowest mixed value of the partition: ceil(p * 2^64 / P).
  const unsigned __int128 lowest =
      ((static_cast<unsigned __int128>(partition) << 64) + num_partitions_ - 1) / num_partitions_;
  return InverseMix64(static_cast<uint64_t>(lowest)) ^
         Mix64(uint64_t{config_.id()} + 0x9e3779b97f4a7c15ULL);
}

bool Table::IsSharedRowKey(uint64_t key, uint32_t* partition) const {
  const uint64_t mixed = MixKey(config_.id(), key);
  *partition = PartitionOfMixed(mixed, num_partitions_);
  return mixed == 0 || PartitionOfMixed(mixed - 1, num_partitions_) != *partition;
}

float* Table::SharedRowOf(uint64_t key) const {
  const uint32_t p = PartitionOf(config_.id(), key, num_partitions_);
  // The vector is not resized while the lock is held by the caller.
  return const_cast<float*>(shared_.data()) + size_t{shared_of_[p]} * stride_;
}

void Table::ResetShared() {
  if (!shared_rows_) return;
  MutexLock lock(&shared_mu_);
  shared_of_.assign(num_partitions_, 0);
  shared_.assign(stride_, 0.0f);
  optimizer_->InitState(shared_.data() + dim_);
  shared_generation_.assign(1, CurrentGeneration());
  shared_users_.assign(1, num_partitions_);
}

// The lock is taken only once a key without a row shows up.
void Table::PullShared(const Batch& b, const uint64_t* keys, size_t n, Encoding encoding,
                       char* out) ABSL_NO_THREAD_SAFETY_ANALYSIS {
  const size_t row_bytes = dim_ * BytesPerValue(encoding);
  bool locked = false;
  for (size_t j = 0; j < n; ++j) {
    if (b.rows[j] != nullptr) continue;
    if (!locked) {
      shared_mu_.Lock();
      locked = true;
    }
    const uint32_t i = b.order[j];
    EncodeValuesTo(SharedRowOf(keys[i]), dim_, encoding, out + i * row_bytes);
  }
  if (locked) shared_mu_.Unlock();
}

void Table::PushShared(const Batch& b, const uint64_t* keys, size_t n, const float* grads,
                       float lr_scale) {
  // Per thread: no allocation once warm. slot[g]: row g's sum in `sums`.
  thread_local std::vector<float> sums;
  thread_local std::vector<int32_t> slot;
  thread_local std::vector<uint32_t> touched;
  MutexLock lock(&shared_mu_);
  slot.assign(shared_generation_.size(), -1);
  touched.clear();
  // Summed in batch order (stripe by stripe): the same bits for the same
  // push, whichever threads grouped it.
  for (size_t j = 0; j < n; ++j) {
    if (!b.to_shared[j]) continue;
    const uint32_t i = b.order[j];
    const uint32_t g = shared_of_[PartitionOf(config_.id(), keys[i], num_partitions_)];
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
  const uint32_t generation = CurrentGeneration();
  for (size_t t = 0; t < touched.size(); ++t) {
    float* row = shared_.data() + size_t{touched[t]} * stride_;
    optimizer_->Update(row, row + dim_, sums.data() + t * dim_, lr_scale);
    shared_generation_[touched[t]] = generation;
    ++shared_updates_;
  }
}

void Table::RestoreSharedRow(uint32_t partition, const float* payload) {
  MutexLock lock(&shared_mu_);
  const size_t bytes = stride_ * sizeof(float);
  --shared_users_[shared_of_[partition]];
  // Partitions of one server carry bit-identical rows: share one again.
  // Newest rows first (a server's partitions come one after another).
  size_t row = shared_users_.size();
  for (size_t g = shared_users_.size(); g-- > 0;) {
    if (shared_users_[g] == 0) {
      row = g;  // Free: reused unless a row in use matches.
    } else if (std::memcmp(shared_.data() + g * stride_, payload, bytes) == 0) {
      row = g;
      break;
    }
  }
  if (row == shared_users_.size()) {
    shared_.resize(shared_.size() + stride_);
    shared_generation_.push_back(0);
    shared_users_.push_back(0);
  }
  if (shared_users_[row] == 0) {
    std::memcpy(shared_.data() + row * stride_, payload, bytes);
    shared_generation_[row] = CurrentGeneration();
  }
  ++shared_users_[row];
  shared_of_[partition] = static_cast<uint32_t>(row);
}

void Table::ForEachSharedRow(std::optional<uint32_t> since,
                             const std::function<void(uint32_t partition, uint64_t key,
                                                      const float* payload)>& visit) const {
  if (!shared_rows_) return;
  MutexLock lock(&shared_mu_);
  for (uint32_t p = 0; p < num_partitions_; ++p) {
    const uint32_t g = shared_of_[p];
    if (since.has_value() && shared_generation_[g] <= *since) continue;
    visit(p, SharedRowKey(p), shared_.data() + size_t{g} * stride_);
  }
}

}  // namespace shardps

#include "worker/model/dedup.h"

#include <algorithm>
#include <limits>

#include "common/partition.h"
#include "glog/logging.h"

namespace shardps {
namespace {

constexpr size_t kMinSlots = 16;
constexpr size_t kMaxUnique = std::numeric_limits<int32_t>::max();

size_t SlotsFor(size_t n) {
  size_t slots = kMinSlots;
  while (slots < 2 * n) slots <<= 1;
  return slots;
}

}  // namespace

void KeyDeduper::Reset(size_t expected_keys) {
  unique_.clear();
  inverse_.clear();
  inverse_.reserve(expected_keys);
  const size_t want = SlotsFor(expected_keys);
  if (slots_.size() < want) {
    slots_.assign(want, 0);
  } else {
    // Keep the larger table: clearing is a memset, cheaper than reallocating.
    std::fill(slots_.begin(), slots_.end(), 0);
  }
  mask_ = slots_.size() - 1;
}

void KeyDeduper::Rehash(size_t n) {
  slots_.assign(SlotsFor(n), 0);
  mask_ = slots_.size() - 1;
  for (size_t u = 0; u < unique_.size(); ++u) {
    uint64_t i = Mix64(unique_[u]) & mask_;
    while (slots_[i] != 0) i = (i + 1) & mask_;
    slots_[i] = static_cast<uint32_t>(u + 1);
  }
}

void KeyDeduper::Add(absl::Span<const uint64_t> keys) {
  if (slots_.empty()) Reset(keys.size());
  inverse_.reserve(inverse_.size() + keys.size());
  for (const uint64_t key : keys) {
    uint64_t i = Mix64(key) & mask_;
    for (;;) {
      const uint32_t slot = slots_[i];
      if (slot == 0) break;
      if (unique_[slot - 1] == key) break;
      i = (i + 1) & mask_;
    }
    if (slots_[i] != 0) {
      inverse_.push_back(slots_[i] - 1);
      continue;
    }
    const size_t u = unique_.size();
    CHECK_LT(u, kMaxUnique) << "more than 2^31 - 1 unique keys in one batch";
    unique_.push_back(key);
    inverse_.push_back(static_cast<int64_t>(u));
    if (2 * unique_.size() > slots_.size()) {
      Rehash(2 * unique_.size());  // Doubles the table.
    } else {
      slots_[i] = static_cast<uint32_t>(u + 1);
    }
  }
}

}  // namespace shardps

#include "server/bsp_aggregator.h"

#include <utility>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace shardps {

BspAggregator::BspAggregator(uint32_t server_index, uint32_t num_workers, TableStore* store,
                             std::function<void(uint64_t)> on_applied)
    : server_index_(server_index), store_(store), on_applied_(std::move(on_applied)) {
  MutexLock lock(&mu_);
  for (uint32_t r = 0; r < num_workers; ++r) active_.insert(r);
}

absl::Status BspAggregator::Buffer(uint32_t rank, uint64_t clock, BufferedPush push) {
  MutexLock lock(&mu_);
  if (!active_.count(rank)) {
    return absl::FailedPreconditionError(
        absl::StrCat("BSP push from rank ", rank, ", which is not an active worker"));
  }
  if (clock >= applied_clock_ + kClocksAhead) {
    return absl::InvalidArgumentError(
        absl::StrCat("BSP push of clock ", clock, " from rank ", rank, ": server ", server_index_,
                     " has applied clocks < ", applied_clock_, " and buffers at most ",
                     kClocksAhead, " clocks ahead (a worker is never more than one ahead)"));
  }
  if (clock < applied_clock_ || pending_[clock].count(rank)) {
    return absl::AlreadyExistsError(absl::StrCat("rank ", rank, " already pushed clock ", clock,
                                                 " (server ", server_index_,
                                                 " has applied clocks < ", applied_clock_, ")"));
  }
  pending_[clock].emplace(rank, std::move(push));
  CloseClocksLocked();
  return absl::OkStatus();
}

void BspAggregator::SetActive(std::set<uint32_t> ranks) {
  MutexLock lock(&mu_);
  active_ = std::move(ranks);
  CloseClocksLocked();
  clock_applied_.SignalAll();
}

absl::Status BspAggregator::WaitForClock(uint64_t clock, uint64_t generation, absl::Time deadline) {
  MutexLock lock(&mu_);
  while (applied_clock_ < clock && !shutdown_ && generation_ == generation) {
    if (!clock_applied_.WaitUntil(&mu_, deadline) && applied_clock_ < clock &&
        generation_ == generation) {
      std::vector<uint32_t> missing;
      auto it = pending_.find(applied_clock_);
      for (uint32_t r : active_) {
        if (it == pending_.end() || !it->second.count(r)) missing.push_back(r);
      }
      return absl::DeadlineExceededError(
          absl::StrCat("BSP pull for clock ", clock, " timed out: server ", server_index_,
                       " has applied clocks < ", applied_clock_, "; clock ", applied_clock_,
                       " still waits for the pushes of ranks [", absl::StrJoin(missing, ","), "]"));
    }
  }
  if (shutdown_) return absl::UnavailableError("server is shutting down");
  return absl::OkStatus();
}

uint64_t BspAggregator::applied_clock() const {
  MutexLock lock(&mu_);
  return applied_clock_;
}

absl::Status BspAggregator::AtClock(uint64_t clock, const std::function<void()>& copy) {
  MutexLock lock(&mu_);
  if (applied_clock_ != clock) {
    return absl::FailedPreconditionError(absl::StrCat(
        "Checkpoint at clock ", clock, ": server ", server_index_, " has applied clocks < ",
        applied_clock_, " (BSP checkpoints need exactly the clocks < ", clock, " applied)"));
  }
  copy();
  return absl::OkStatus();
}

void BspAggregator::Reset(uint64_t clock, uint64_t generation) {
  MutexLock lock(&mu_);
  pending_.clear();
  applied_clock_ = clock;
  generation_ = generation;
  clock_applied_.SignalAll();
}

void BspAggregator::Shutdown() {
  MutexLock lock(&mu_);
  shutdown_ = true;
  clock_applied_.SignalAll();
}

void BspAggregator::CloseClocksLocked() {
  while (true) {
    auto it = pending_.find(applied_clock_);
    if (it == pending_.end()) return;
    for (uint32_t r : active_) {
      if (!it->second.count(r)) return;
    }
    std::set<uint32_t> ranks = active_;
    for (const auto& [r, push] : it->second) ranks.insert(r);
    ApplyClockLocked(it->second, ranks.size());
    pending_.erase(it);
    ++applied_clock_;
    if (on_applied_) on_applied_(applied_clock_);
    clock_applied_.SignalAll();
  }
}

void BspAggregator::ApplyClockLocked(const std::map<uint32_t, BufferedPush>& pushes,
                                     size_t num_ranks) {
  if (pushes.empty()) return;
  const float lr_scale = pushes.begin()->second.lr_scale;  // Lowest rank.
  std::map<uint32_t, std::vector<const BufferedTable*>> by_table;
  for (const auto& [rank, push] : pushes) {  // Rank order.
    for (const BufferedTable& bt : push.tables) by_table[bt.table_id].push_back(&bt);
  }
  for (const auto& [table_id, parts] : by_table) {
    Table* table = store_->FindTable(table_id);
    const size_t dim = table->dim();
    absl::flat_hash_map<uint64_t, size_t> index;
    std::vector<uint64_t> keys;
    std::vector<uint32_t> occurrences;  // Ranks whose push carried the key.
    std::vector<float> sum;
    for (const BufferedTable* bt : parts) {
      for (size_t i = 0; i < bt->keys.size(); ++i) {
        auto [it, inserted] = index.try_emplace(bt->keys[i], keys.size());
        if (inserted) {
          keys.push_back(bt->keys[i]);
          occurrences.push_back(0);
          sum.resize(sum.size() + dim, 0.0f);
        }
        ++occurrences[it->second];
        float* dst = sum.data() + it->second * dim;
        const float* g = bt->grads.data() + i * dim;
        for (size_t j = 0; j < dim; ++j) dst[j] += g[j];
      }
    }
    const float divisor = static_cast<float>(num_ranks);
    for (float& v : sum) v /= divisor;
    // Admission counts each worker's batch that held the key, as SSP and
    // ASP do push by push (a rank pushes a clock once: a retry is refused).
    table->Push(keys.data(), keys.size(), sum.data(), lr_scale, occurrences.data());
  }
}

}  // namespace shardps

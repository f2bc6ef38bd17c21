// ParameterServerCore's BSP aggregation (parameter_server_core.h,
// "Consistency"): pushes of a clock are buffered per rank and applied, as
// one step with the mean gradient in rank order, once every active worker
// has pushed.
#include <map>
#include <set>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "common/codec.h"
#include "server/parameter_server_core.h"

namespace shardps {

absl::Status ParameterServerCore::BufferBspPush(
    const PushRequest& request, float lr_scale,
    const std::vector<DecodedTable>& tables, PushResponse* response) {
  const uint32_t rank = request.worker_rank();
  const uint64_t clock = request.clock();
  BufferedPush push;
  push.lr_scale = lr_scale;
  uint64_t buffered = 0, skipped = 0;
  for (const DecodedTable& d : tables) {
    BufferedTable bt;
    bt.table_id = d.table->id();
    const size_t dim = d.table->dim();
    bt.keys.reserve(d.n);
    bt.grads.reserve(d.n * dim);
    uint64_t table_skipped = 0;
    for (size_t i = 0; i < d.n; ++i) {
      const float* g = d.grads + i * dim;
      if (!AllFinite(g, dim)) {  // Only under SKIP_AND_COUNT (validated).
        ++table_skipped;
        continue;
      }
      bt.keys.push_back(d.keys[i]);
      bt.grads.insert(bt.grads.end(), g, g + dim);
    }
    d.table->CountSkippedNonFinite(table_skipped);
    skipped += table_skipped;
    buffered += bt.keys.size();
    push.tables.push_back(std::move(bt));
  }
  MutexLock lock(&bsp_mu_);
  if (!active_.count(rank)) {
    return absl::FailedPreconditionError(absl::StrCat(
        "BSP push from rank ", rank, ", which is not an active worker"));
  }
  if (clock >= applied_clock_ + kBspClocksAhead) {
    return absl::InvalidArgumentError(absl::StrCat(
        "BSP push of clock ", clock, " from rank ", rank, ": server ", server_index_,
        " has applied clocks < ", applied_clock_, " and buffers at most ",
        kBspClocksAhead, " clocks ahead (a worker is never more than one ahead)"));
  }
  if (clock < applied_clock_ || pending_[clock].count(rank)) {
    return absl::AlreadyExistsError(absl::StrCat(
        "rank ", rank, " already pushed clock ", clock, " (server ",
        server_index_, " has applied clocks < ", applied_clock_, ")"));
  }
  pending_[clock].emplace(rank, std::move(push));
  CloseClocks();
  response->set_rows_applied(buffered);
  response->set_rows_skipped_nonfinite(skipped);
  return absl::OkStatus();
}

void ParameterServerCore::CloseClocks() {
  while (true) {
    auto it = pending_.find(applied_clock_);
    if (it == pending_.end()) return;
    for (uint32_t r : active_) {
      if (!it->second.count(r)) return;
    }
    std::set<uint32_t> ranks = active_;
    for (const auto& [r, push] : it->second) ranks.insert(r);
    ApplyClock(it->second, ranks.size());
    pending_.erase(it);
    ++applied_clock_;
    max_clock_.store(applied_clock_, std::memory_order_relaxed);
    store_->SetClock(applied_clock_);
    clock_applied_.SignalAll();
  }
}

void ParameterServerCore::ApplyClock(
    const std::map<uint32_t, BufferedPush>& pushes, size_t num_ranks) {
  if (pushes.empty()) return;
  const float lr_scale = pushes.begin()->second.lr_scale;  // Lowest rank.
  std::map<uint32_t, std::vector<const BufferedTable*>> by_table;
  for (const auto& [rank, push] : pushes) {  // Rank order.
    for (const BufferedTable& bt : push.tables) {
      by_table[bt.table_id].push_back(&bt);
    }
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

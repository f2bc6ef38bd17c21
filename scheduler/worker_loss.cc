#include "scheduler/worker_loss.h"

#include <string>

namespace shardps {

const std::string& WorkerLoss::policy_name() const {
  return ClusterConfig::OnWorkerLoss_Name(policy_);
}

uint64_t WorkerLoss::UntrainedSamples(uint64_t longest, const std::vector<uint64_t>& clocks,
                                      const std::vector<uint32_t>& lost,
                                      uint64_t batch_size) const {
  if (!drops()) return 0;
  uint64_t untrained = 0;
  for (uint32_t rank : lost) {
    if (rank < clocks.size() && longest > clocks[rank]) {
      untrained += (longest - clocks[rank]) * batch_size;
    }
  }
  return untrained;
}

bool WorkerLoss::TakeLease(uint32_t rank, absl::Time now, absl::Duration hold) {
  auto it = leases_.find(rank);
  if (it != leases_.end() && now - it->second < hold) return false;
  leases_[rank] = now;
  return true;
}

void WorkerLoss::BeginRewind(const std::vector<uint32_t>& workers) {
  awaited_ = std::set<uint32_t>(workers.begin(), workers.end());
  tick_samples_.clear();
}

void WorkerLoss::ReleaseClocks(bool forget_awaited) {
  held_since_.reset();
  if (forget_awaited) awaited_.clear();
}

bool WorkerLoss::HoldExpired(absl::Time now, absl::Duration deadline) const {
  return held_since_ && now - *held_since_ > deadline;
}

bool WorkerLoss::Started(uint32_t rank) { return awaited_.erase(rank) > 0 && awaited_.empty(); }

}  // namespace shardps

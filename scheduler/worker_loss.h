// WorkerLoss: the scheduler's book of what a lost worker does to the job
// (cluster.on_worker_loss, docs/operations.md "What happens when a worker
// dies"), kept apart from the coordinator's other state:
//
//   - the policy: WAIT keeps a lost worker in the clock minimum (BSP's
//     default); REASSIGN and DROP let it leave (LeavesClock), REASSIGN
//     hands its unfinished share to a worker done with its own (leases),
//     DROP ends the job without it and counts what it left untrained;
//   - the samples each worker's share has trained (its last tick), for the
//     job's total and DROP's estimate;
//   - the leases of lost shares: one taker at a time, and the same share is
//     not offered again for a while (the taker registers for the rank);
//   - the rewind after a rollback: which workers have not started in the new
//     generation yet (the recovery is complete once none is left), and since
//     when the clocks are held for them (at most start_deadline_ms).
//
// The book decides nothing about processes it cannot see: the scheduler
// (job.h, job_state.h) feeds it what members, clocks and reports say and acts on its
// answers (pauses clocks, marks workers dead, fails the job).
//
// Not thread-safe: JobState (job_state.h) holds it under its lock.
#ifndef SHARDPS_SCHEDULER_WORKER_LOSS_H_
#define SHARDPS_SCHEDULER_WORKER_LOSS_H_

#include <cstdint>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "absl/time/time.h"
#include "proto/config.pb.h"

namespace shardps {

class WorkerLoss {
 public:
  explicit WorkerLoss(ClusterConfig::OnWorkerLoss policy) : policy_(policy) {}

  ClusterConfig::OnWorkerLoss policy() const { return policy_; }
  // "WAIT", "REASSIGN" or "DROP".
  const std::string& policy_name() const;
  // REASSIGN and DROP: a lost worker leaves the clock minimum.
  bool LeavesClock() const { return policy_ != ClusterConfig::WAIT; }
  bool reassigns() const { return policy_ == ClusterConfig::REASSIGN; }
  bool drops() const { return policy_ == ClusterConfig::DROP; }

  // ---- Samples trained, per worker share ----
  // TickRequest.samples of `rank` (validated by the caller).
  void RecordTick(uint32_t rank, uint64_t samples) { tick_samples_[rank] = samples; }
  const std::map<uint32_t, uint64_t>& tick_samples() const { return tick_samples_; }
  // DROP's estimate of the samples the job ends without: for each rank in
  // `lost` (dead with its share unfinished), (`longest` - its clock) x
  // `batch_size`, where `longest` is the most steps a finished worker
  // trained. 0 under another policy.
  uint64_t UntrainedSamples(uint64_t longest, const std::vector<uint64_t>& clocks,
                            const std::vector<uint32_t>& lost, uint64_t batch_size) const;

  // ---- Leases of lost shares (REASSIGN) ----
  // Whether `rank`'s share may be offered at `now`: not leased within
  // `hold` before; if so the lease is taken at `now`.
  bool TakeLease(uint32_t rank, absl::Time now, absl::Duration hold);

  // ---- The rewind after a rollback ----
  // A rollback to a restore point: every rank of `workers` has to start
  // again; the ticks of the old generation are forgotten.
  void BeginRewind(const std::vector<uint32_t>& workers);
  // The clocks are held from `now` until every awaited worker started or
  // the deadline passed (HoldExpired).
  void HoldClocks(absl::Time now) { held_since_ = now; }
  // The clocks go on; with `forget_awaited`, so does the recovery report
  // (nothing to complete).
  void ReleaseClocks(bool forget_awaited);
  bool clocks_held() const { return held_since_.has_value(); }
  // Whether the hold began more than `deadline` before `now`.
  bool HoldExpired(absl::Time now, absl::Duration deadline) const;
  // `rank` started in the new generation. True when it was the last one
  // awaited (the recovery is complete).
  bool Started(uint32_t rank);
  // `rank` is not waited for any more (lost for good under a policy that
  // lets it leave the clock minimum).
  void StopAwaiting(uint32_t rank) { awaited_.erase(rank); }
  std::vector<uint32_t> Awaited() const { return {awaited_.begin(), awaited_.end()}; }

 private:
  const ClusterConfig::OnWorkerLoss policy_;
  std::map<uint32_t, uint64_t> tick_samples_;
  std::map<uint32_t, absl::Time> leases_;  // Rank -> when its share was last offered.
  std::set<uint32_t> awaited_;             // Not started since the last rollback.
  std::optional<absl::Time> held_since_;   // The clocks wait for `awaited_`.
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_WORKER_LOSS_H_

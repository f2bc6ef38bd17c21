// JobControl: the move of partitions that changes the job's number of
// servers (job_control.h; docs/design.md "Resharding" has the protocol and
// why a BSP job stays bit-identical across it).
#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/job_control.h"
#include "scheduler/reshard_plan.h"

namespace shardps {

absl::Status JobControl::Move(uint64_t clock, uint32_t target, uint32_t* moved) {
  *moved = 0;
  const std::optional<PartitionMapProto> map = members_.Map();
  if (!map) return absl::FailedPreconditionError("no partition map");
  const uint32_t servers = members_.MapServers();
  ReshardInput input;
  input.owner.assign(map->owner().begin(), map->owner().end());
  input.target_servers = target;
  ASSIGN_OR_RETURN(const ReshardPlan plan, PlanReshard(input));
  if (plan.moves.empty()) return absl::OkStatus();

  // Every server of the move, addressed by index: the map's, and the spares
  // joining it.
  const uint32_t involved = std::max(servers, target);
  PartitionMapProto addressed = *map;
  addressed.clear_server_addresses();
  for (uint32_t i = 0; i < involved; ++i) {
    const std::optional<Member> m = members_.Get(SERVER, i);
    if (!m || m->state != ALIVE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", i, " is not registered and alive (start it with its index ", i,
          " to join the job; cluster.max_servers ", config_.cluster().max_servers(), ")"));
    }
    addressed.add_server_addresses(m->address);
  }
  uint64_t generation;
  {
    MutexLock lock(&state_.mu);
    generation = state_.generation;
    state_.recovery.SetDoing(absl::StrCat("moving ", plan.moves.size(), " partitions: ", servers,
                                          " -> ", target, " servers at clock ", clock));
  }
  RestorePoint point;
  point.initial = false;
  point.clock = clock;
  point.dir = checkpoint::CheckpointPath(config_.checkpoint().dir(), clock);
  // A joining spare takes the cut's clock and the job's generation: a full
  // restore of the cut while it owns nothing reads no rows.
  for (uint32_t i = servers; i < target; ++i) {
    RETURN_IF_ERROR(ops_->Restore(addressed, i, point, generation).status());
  }
  std::map<uint32_t, std::vector<uint32_t>> added, dropped;
  for (const PartitionMove& m : plan.moves) {
    added[m.to].push_back(m.partition);
    dropped[m.from].push_back(m.partition);
  }
  RestoreStats total;
  for (const auto& [index, partitions] : added) {
    ASSIGN_OR_RETURN(const RestoreStats stats,
                     ops_->AddPartitions(addressed, index, point, partitions, generation));
    total.rows += stats.rows;
    total.bytes += stats.bytes;
  }
  // The switch. Before it nothing changed that a request can see; from the
  // first server that takes the new map on, a failure is a server failure
  // (the recovery restores the cut under the new map).
  ASSIGN_OR_RETURN(const PartitionMapProto next, members_.SetOwners(plan.owner));
  PartitionMapProto switching = next;
  *switching.mutable_server_addresses() = addressed.server_addresses();
  std::vector<uint32_t> active;
  const auto states = clock_.States();
  for (uint32_t r = 0; r < states.size(); ++r) {
    if (states[r] == ClockService::WorkerState::kLive) active.push_back(r);
  }
  // Every server is switched even if one fails: the recovery restores the
  // cut on each server under the map it holds, so every live one must hold
  // the new map (a failed one takes it when it registers again).
  absl::Status switch_status;
  for (uint32_t i = 0; i < involved; ++i) {
    const absl::Status st = ops_->SwitchMap(switching, i, dropped[i], active);
    if (st.ok()) continue;
    if (switch_status.ok()) switch_status = st;
    MutexLock lock(&state_.mu);
    state_.ServerFailed(i, absl::StrCat("server ", i, " failed during a move: ", st.message()),
                        absl::Now(), absl::Now(), /*lost=*/true);
  }
  RETURN_IF_ERROR(switch_status);
  *moved = static_cast<uint32_t>(plan.moves.size());
  LOG(INFO) << "moved " << plan.moves.size() << " partitions (" << total.rows << " rows, "
            << total.bytes << " bytes read) at clock " << clock << ": " << servers << " -> "
            << target << " servers, map version " << next.version();
  return absl::OkStatus();
}

void JobControl::Reshard(uint64_t clock, uint64_t serving) {
  uint32_t target;
  uint64_t requested;
  {
    MutexLock lock(&state_.mu);
    target = state_.reshard.target;
    requested = state_.reshard.requested;
  }
  absl::Status st = Cut(clock, /*next=*/clock, serving);  // Keeps the hold.
  if (AfterCut(clock, st)) st = absl::UnavailableError("the cut will be tried again");
  uint32_t moved = 0;
  if (st.ok()) st = Move(clock, target, &moved);
  uint64_t next;
  {
    MutexLock lock(&state_.mu);
    state_.recovery.ClearDoing();
    next = state_.cuts.NextAfter(clock);
    if (!absl::IsUnavailable(st)) {  // Unavailable: the cut is retried, and the move with it.
      state_.reshard.served = requested;
      state_.reshard.error = st.ok() ? "" : std::string(st.message());
      state_.reshard.last_moved = moved;
      if (moved > 0) {
        state_.reshard.clock = clock;
        ++state_.reshard.moves;
        state_.reshard.partitions_moved += moved;
      }
    }
    state_.changed.SignalAll();
  }
  if (!st.ok())
    LOG(ERROR) << "reshard to " << target << " servers at clock " << clock << ": " << st;
  if (next > 0) {
    clock_.Hold(next);
  } else {
    clock_.Release();
  }
  if (moved > 0) state_.Notify();
}

}  // namespace shardps

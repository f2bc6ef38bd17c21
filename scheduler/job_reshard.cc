// JobControl: the move of partitions that changes the job's number of
// servers (job_control.h; docs/design.md "Resharding" has the protocol and
// why a BSP job stays bit-identical across it).
#include <unistd.h>

#include <algorithm>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/status_macros.h"
#include "common/testing_stall.h"
#include "glog/logging.h"
#include "scheduler/job_control.h"
#include "scheduler/reshard_plan.h"

namespace shardps {
namespace {

// A call that failed because its server is gone or unreachable.
bool ServerUnreachable(const absl::Status& st) {
  return absl::IsUnavailable(st) || absl::IsDeadlineExceeded(st) || absl::IsCancelled(st) ||
         absl::IsAborted(st) || st.message().find("stale generation") != absl::string_view::npos;
}

}  // namespace

absl::Status JobControl::Move(uint64_t clock, uint32_t target, uint32_t* moved,
                              RestoreStats* stats) {
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
  std::vector<uint32_t> active;
  const auto states = clock_.States();
  for (uint32_t r = 0; r < states.size(); ++r) {
    if (states[r] == ClockService::WorkerState::kLive) active.push_back(r);
  }
  RestoreStats& total = *stats;
  for (const auto& [index, partitions] : added) {
    absl::StatusOr<RestoreStats> stats =
        ops_->AddPartitions(addressed, index, point, partitions, generation);
    if (!stats.ok()) {
      // The old map stays in force. The destinations drop what they added
      // (a server that does not answer holds it unowned: it serves none of
      // it, a full restore clears it and a later add drops it first).
      for (const auto& [to, given] : added) {
        if (to > index) break;
        if (absl::Status st = ops_->SwitchMap(addressed, to, given, active); !st.ok()) {
          LOG(WARNING) << "server " << to
                       << " did not drop the partitions of a failed move: " << st;
        }
      }
      return stats.status();
    }
    total.rows += stats->rows;
    total.bytes += stats->bytes;
  }
  MaybeStallAt(ProcessTestingStalls(), "reshard_added", "the scheduler", absl::StrCat(getpid()));
  // The switch. Before it nothing changed that a request can see; from the
  // first server that takes the new map on, a failure is a server failure
  // (the recovery restores the cut under the new map).
  ASSIGN_OR_RETURN(const PartitionMapProto next, members_.SetOwners(plan.owner));
  *moved = static_cast<uint32_t>(plan.moves.size());
  PartitionMapProto switching = next;
  *switching.mutable_server_addresses() = addressed.server_addresses();
  // Every server is switched even if one fails: the recovery restores the
  // cut on each server under the map it holds, so every live one must hold
  // the new map (a failed one takes it when it registers again).
  uint32_t failed = 0;
  for (uint32_t i = 0; i < involved; ++i) {
    const absl::Status st = ops_->SwitchMap(switching, i, dropped[i], active);
    if (i == 0)
      MaybeStallAt(ProcessTestingStalls(), "reshard_switching", "the scheduler",
                   absl::StrCat(getpid()));
    if (st.ok()) continue;
    ++failed;
    LOG(ERROR) << "server " << i << " failed during the switch to map version " << next.version()
               << ": " << st << "; the recovery restores the cut at clock " << clock
               << " under the new map";
    MutexLock lock(&state_.mu);
    state_.ServerFailed(i, absl::StrCat("server ", i, " failed during a move: ", st.message()),
                        absl::Now(), absl::Now(), /*lost=*/true);
  }
  LOG(INFO) << "moved " << plan.moves.size() << " partitions (" << total.rows << " rows, "
            << total.bytes << " bytes read) at clock " << clock << ": " << servers << " -> "
            << target << " servers, map version " << next.version()
            << (failed > 0 ? absl::StrCat("; ", failed, " servers failed during the switch") : "");
  return absl::OkStatus();
}

bool JobControl::ReshardReadyLocked(absl::Time now) {
  JobState::Reshard& r = state_.reshard;
  if (!r.retry_until) return true;
  const uint32_t involved = std::max(members_.MapServers(), r.target);
  std::vector<uint32_t> missing;
  for (uint32_t i = 0; i < involved; ++i) {
    const std::optional<Member> m = members_.Get(SERVER, i);
    if (!m || m->state != ALIVE) missing.push_back(i);
  }
  if (missing.empty() && now >= r.retry_after) return true;
  if (now < *r.retry_until) return false;
  r.error = absl::StrCat(r.retry_cause, "; servers [", absl::StrJoin(missing, ","),
                         "] were not back within cluster.server_deadline_ms (",
                         config_.cluster().server_deadline_ms(), " ms) to try again");
  r.served = r.requested;
  r.last_moved = 0;
  r.retry_until.reset();
  r.retries = 0;
  state_.changed.SignalAll();
  LOG(ERROR) << "reshard to " << r.target << " servers: " << r.error;
  return false;
}

void JobControl::Reshard(uint64_t clock, uint64_t serving) {
  uint32_t target;
  uint64_t requested;
  {
    MutexLock lock(&state_.mu);
    target = state_.reshard.target;
    requested = state_.reshard.requested;
  }
  const absl::Time start = absl::Now();
  absl::Status st = Cut(clock, /*next=*/clock, serving);  // Keeps the hold.
  bool retry = AfterCut(clock, st);  // The cut is tried again, and the move with it.
  uint32_t moved = 0;
  RestoreStats stats;
  if (st.ok()) st = Move(clock, target, &moved, &stats);
  // A server of the move gone or unreachable before the switch: the move is
  // tried again once it is back.
  const bool server_trouble = moved == 0 && ServerUnreachable(st);
  uint64_t next;
  {
    MutexLock lock(&state_.mu);
    state_.recovery.ClearDoing();
    next = state_.cuts.NextAfter(clock);
    JobState::Reshard& r = state_.reshard;
    const absl::Time now = absl::Now();
    if (server_trouble && !retry && (!r.retry_until || now < *r.retry_until)) {
      retry = true;
      r.retry_cause = absl::StrCat("the move at clock ", clock, " failed: ", st.message());
      if (!r.retry_until) {
        r.retry_until = now + absl::Milliseconds(config_.cluster().server_deadline_ms());
      }
      r.retry_after = now + std::min(absl::Milliseconds(2 * config_.cluster().heartbeat_ms()) *
                                         (1 << std::min<uint32_t>(r.retries, 4)),
                                     absl::Seconds(5));
      ++r.retries;
    }
    if (!retry) {
      r.served = requested;
      r.retry_until.reset();
      r.retries = 0;
      r.error = st.ok() || moved > 0 ? "" : std::string(st.message());
      r.last_moved = moved;
      if (moved > 0) {
        r.clock = clock;
        ++r.moves;
        r.partitions_moved += moved;
        r.rows_moved += stats.rows;
        r.bytes_moved += stats.bytes;
        r.last_sec = absl::ToDoubleSeconds(now - start);
      }
    }
    state_.changed.SignalAll();
  }
  if (!st.ok())
    LOG(ERROR) << "reshard to " << target << " servers at clock " << clock << ": " << st
               << (retry ? " (tried again)" : "");
  if (next > 0) {
    clock_.Hold(next);
  } else {
    clock_.Release();
  }
  if (moved > 0) state_.Notify();
}

}  // namespace shardps

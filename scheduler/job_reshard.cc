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

absl::Status JobControl::Precopy(uint64_t clock, uint32_t target) {
  precopy_.reset();
  const std::optional<PartitionMapProto> map = members_.Map();
  if (!map) return absl::FailedPreconditionError("no partition map");
  const uint32_t servers = members_.MapServers();
  ReshardInput input;
  input.owner.assign(map->owner().begin(), map->owner().end());
  input.target_servers = target;
  // By the rows and bytes of the cut just copied (unknown: by count).
  ServerOps::PartitionSizes sizes = ops_->LastCopySizes();
  const bool by_rows = sizes.rows.size() == input.owner.size();
  if (by_rows) {
    input.rows = std::move(sizes.rows);
    input.bytes = std::move(sizes.bytes);
  }
  ASSIGN_OR_RETURN(const ReshardPlan plan, PlanReshard(input));
  if (plan.moves.empty()) return absl::OkStatus();
  LOG(INFO) << "move " << servers << " -> " << target << " planned by "
            << (by_rows ? "the rows of the cut at clock " + std::to_string(clock)
                        : std::string("partition count (the cut's rows are unknown)"))
            << ": " << plan.moves.size() << " partitions (" << plan.rows_moved
            << " rows) move; rows per server after it: " << absl::StrJoin(plan.server_rows, ",");

  MoveInFlight move;
  move.clock = clock;
  move.map_version = map->version();
  move.target = target;
  move.servers = servers;
  move.owner = plan.owner;
  move.start = absl::Now();
  // Every server of the move, addressed by index: the map's, and the spares
  // joining it.
  const uint32_t involved = std::max(servers, target);
  move.addressed = *map;
  move.addressed.clear_server_addresses();
  for (uint32_t i = 0; i < involved; ++i) {
    const std::optional<Member> m = members_.Get(SERVER, i);
    if (!m || m->state != ALIVE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", i, " is not registered and alive (start it with its index ", i,
          " to join the job; cluster.max_servers ", config_.cluster().max_servers(), ")"));
    }
    move.addressed.add_server_addresses(m->address);
  }
  {
    MutexLock lock(&state_.mu);
    move.generation = state_.generation;
    state_.recovery.SetDoing(absl::StrCat("moving ", plan.moves.size(), " partitions: ", servers,
                                          " -> ", target, " servers: pre-copy from clock ", clock));
  }
  const RestorePoint point = CutPoint(clock);
  // A joining spare takes the cut's clock and the job's generation: a full
  // restore of the cut while it owns nothing reads no rows.
  for (uint32_t i = servers; i < target; ++i) {
    RETURN_IF_ERROR(ops_->Restore(move.addressed, i, point, move.generation).status());
  }
  for (const PartitionMove& m : plan.moves) {
    move.added[m.to].push_back(m.partition);
    move.dropped[m.from].push_back(m.partition);
  }
  ServerOps::AddStep step;
  step.precopy = true;
  precopy_ = std::move(move);
  for (const auto& [index, partitions] : precopy_->added) {
    absl::StatusOr<RestoreStats> stats = ops_->AddPartitions(
        precopy_->addressed, index, point, partitions, precopy_->generation, step);
    if (!stats.ok()) {
      DropAdded(index);
      precopy_.reset();
      return stats.status();
    }
    precopy_->stats.rows += stats->rows;
    precopy_->stats.bytes += stats->bytes;
    precopy_->stats.paced += stats->paced;
  }
  const std::string paced =
      precopy_->stats.paced > absl::ZeroDuration()
          ? absl::StrCat(", paced to ", config_.cluster().move_mb_per_s(),
                         " MB/s: ", absl::FormatDuration(precopy_->stats.paced), " slept")
          : "";
  LOG(INFO) << "pre-copied " << plan.moves.size() << " partitions (" << precopy_->stats.rows
            << " rows, " << precopy_->stats.bytes << " bytes read" << paced
            << ") from the cut at clock " << clock << " for the move " << servers << " -> "
            << target << " servers; the catch-up and the switch follow at the next clock";
  return absl::OkStatus();
}

RestorePoint JobControl::CutPoint(uint64_t clock) const {
  RestorePoint point;
  point.initial = false;
  point.clock = clock;
  point.dir = checkpoint::CheckpointPath(config_.checkpoint().dir(), clock);
  return point;
}

void JobControl::DropAdded(uint32_t upto) {
  // The old map stays in force. The destinations drop what they added (a
  // server that does not answer holds it unowned: it serves none of it, a
  // full restore clears it and a later add drops it first).
  const std::vector<uint32_t> active = clock_.LiveRanks();
  for (const auto& [to, given] : precopy_->added) {
    if (to > upto) break;
    if (absl::Status st = ops_->SwitchMap(precopy_->addressed, to, given, active); !st.ok()) {
      LOG(WARNING) << "server " << to << " did not drop the partitions of a failed move: " << st;
    }
  }
}

absl::Status JobControl::CatchUpAndSwitch(uint64_t clock, uint32_t* moved, RestoreStats* stats) {
  *moved = 0;
  MoveInFlight& move = *precopy_;
  *stats = move.stats;
  {
    MutexLock lock(&state_.mu);
    state_.recovery.SetDoing(absl::StrCat("moving partitions: ", move.servers, " -> ", move.target,
                                          " servers: catch-up from clock ", move.clock, " to ",
                                          clock));
  }
  const RestorePoint point = CutPoint(clock);
  ServerOps::AddStep step;
  step.catch_up_from = move.clock;
  uint64_t caught_up = 0;
  for (const auto& [index, partitions] : move.added) {
    absl::StatusOr<RestoreStats> caught =
        ops_->AddPartitions(move.addressed, index, point, partitions, move.generation, step);
    if (!caught.ok()) {
      DropAdded(UINT32_MAX);
      return caught.status();
    }
    // The partitions' rows are the pre-copy's count; the bytes read are
    // both steps'.
    caught_up += caught->rows;
    stats->bytes += caught->bytes;
  }
  MaybeStallAt(ProcessTestingStalls(), "reshard_added", "the scheduler", absl::StrCat(getpid()));
  const std::vector<uint32_t> active = clock_.LiveRanks();
  // The switch. Before it nothing changed that a request can see; from the
  // first server that takes the new map on, a failure is a server failure
  // (the recovery restores the cut under the new map).
  ASSIGN_OR_RETURN(const PartitionMapProto next, members_.SetOwners(move.owner));
  uint32_t partitions = 0;
  for (const auto& [to, given] : move.added) partitions += given.size();
  *moved = partitions;
  PartitionMapProto switching = next;
  *switching.mutable_server_addresses() = move.addressed.server_addresses();
  // Every server is switched even if one fails: the recovery restores the
  // cut on each server under the map it holds, so every live one must hold
  // the new map (a failed one takes it when it registers again).
  const uint32_t involved = std::max(move.servers, move.target);
  uint32_t failed = 0;
  for (uint32_t i = 0; i < involved; ++i) {
    const absl::Status st = ops_->SwitchMap(switching, i, move.dropped[i], active);
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
  LOG(INFO) << "moved " << partitions << " partitions (" << stats->rows
            << " rows pre-copied at clock " << move.clock << ", " << caught_up
            << " rows caught up at clock " << clock << ", " << stats->bytes
            << " bytes read in all): " << move.servers << " -> " << move.target
            << " servers, map version " << next.version()
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
  uint64_t requested, generation;
  {
    MutexLock lock(&state_.mu);
    target = state_.reshard.target;
    requested = state_.reshard.requested;
    generation = state_.generation;
  }
  const std::optional<PartitionMapProto> map = members_.Map();
  if (precopy_ && (precopy_->generation != generation || precopy_->target != target || !map ||
                   map->version() != precopy_->map_version)) {
    // A recovery (its full restores cleared the pre-copies), or another
    // request: the move starts again.
    LOG(INFO) << "the pre-copy at clock " << precopy_->clock
              << " is out of date (job generation, partition map or target changed): the move "
                 "starts again";
    precopy_.reset();
  }
  const bool second = precopy_.has_value();
  const absl::Time start = second ? precopy_->start : absl::Now();
  uint64_t next_cut;
  {
    MutexLock lock(&state_.mu);
    next_cut = state_.cuts.NextAfter(clock);
  }
  // The first step pre-copies from a recent cut of the same generation and
  // map (a delta on it is what the catch-up reads), or cuts anew.
  const bool reuse = !second && last_cut_ && map && last_cut_->generation == generation &&
                     last_cut_->map_version == map->version() && last_cut_->clock <= clock &&
                     absl::Now() - last_cut_->at <= kReuseCutFor;
  absl::Status st;
  bool retry = false;
  if (reuse) {
    LOG(INFO) << "the move pre-copies from the cut at clock " << last_cut_->clock << " (taken "
              << absl::FormatDuration(absl::Now() - last_cut_->at) << " ago)";
    if (next_cut > 0) {
      clock_.Hold(next_cut);
    } else {
      clock_.Release();
    }
  } else {
    // The first step releases the workers after the cut's copy; the second
    // keeps them held until the switch.
    st = Cut(clock, /*next=*/second ? clock : next_cut, serving, /*final=*/false,
             /*delta_on_last=*/second);
    retry = AfterCut(clock, st);  // The cut is tried again, and the move with it.
  }
  uint32_t moved = 0;
  RestoreStats stats;
  bool pending = false;  // The first step is done: the second follows.
  if (st.ok() && !second) {
    st = Precopy(reuse ? last_cut_->clock : clock, target);
    pending = st.ok() && precopy_.has_value();
  } else if (st.ok()) {
    st = CatchUpAndSwitch(clock, &moved, &stats);
  }
  if (second || !st.ok()) precopy_.reset();
  // A server of the move gone, unreachable or without its pre-copy before
  // the switch: the move is tried again once it is back.
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
    if (!retry && !pending) {
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
  // The first step's cut released the workers already (or holds them at the
  // next cut); a failed second step, or a done move, releases them here.
  if (second || !st.ok()) {
    if (next > 0) {
      clock_.Hold(next);
    } else {
      clock_.Release();
    }
  }
  if (moved > 0) state_.Notify();
}

}  // namespace shardps

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
#include "scheduler/partition_move.h"
#include "scheduler/reshard_plan.h"

namespace shardps {

absl::StatusOr<ReshardPlan> JobControl::PlanMove(const PartitionMapProto& map, uint32_t servers,
                                                 uint64_t clock, uint32_t target) {
  ReshardInput input;
  input.owner.assign(map.owner().begin(), map.owner().end());
  input.target_servers = target;
  // By the rows and bytes of the cut just copied (unknown: by count).
  ServerOps::PartitionSizes sizes = ops_->LastCopySizes();
  const bool by_rows = sizes.rows.size() == input.owner.size();
  if (by_rows) {
    input.rows = std::move(sizes.rows);
    input.bytes = std::move(sizes.bytes);
  }
  ASSIGN_OR_RETURN(ReshardPlan plan, PlanReshard(input));
  if (plan.moves.empty()) return plan;
  LOG(INFO) << "move " << servers << " -> " << target << " planned by "
            << (by_rows ? "the rows of the cut at clock " + std::to_string(clock)
                        : std::string("partition count (the cut's rows are unknown)"))
            << ": " << plan.moves.size() << " partitions (" << plan.rows_moved
            << " rows) move; rows per server after it: " << absl::StrJoin(plan.server_rows, ",");
  return plan;
}

absl::StatusOr<PartitionMapProto> JobControl::AddressMove(const PartitionMapProto& map,
                                                          uint32_t servers, uint32_t target) const {
  PartitionMapProto addressed = map;
  addressed.clear_server_addresses();
  for (uint32_t i = 0; i < std::max(servers, target); ++i) {
    const std::optional<Member> m = members_.Get(SERVER, i);
    if (!m || m->state != ALIVE) {
      return absl::FailedPreconditionError(absl::StrCat(
          "server ", i, " is not registered and alive (start it with its index ", i,
          " to join the job; cluster.max_servers ", config_.cluster().max_servers(), ")"));
    }
    addressed.add_server_addresses(m->address);
  }
  return addressed;
}

absl::StatusOr<bool> JobControl::Precopy(uint64_t clock, uint32_t target) {
  const std::optional<PartitionMapProto> map = members_.Map();
  if (!map) return absl::FailedPreconditionError("no partition map");
  const uint32_t servers = members_.MapServers();
  ASSIGN_OR_RETURN(const ReshardPlan plan, PlanMove(*map, servers, clock, target));
  if (plan.moves.empty()) return false;
  PartitionMove::InFlight move;
  move.clock = clock;
  move.map_version = map->version();
  move.target = target;
  move.servers = servers;
  move.owner = plan.owner;
  move.start = absl::Now();
  ASSIGN_OR_RETURN(move.addressed, AddressMove(*map, servers, target));
  move.generation = state_.generation();
  state_.Doing(absl::StrCat("moving ", plan.moves.size(), " partitions: ", servers, " -> ", target,
                            " servers: pre-copy from clock ", clock));
  const RestorePoint point = CutPoint(clock);
  // A joining spare takes the cut's clock and the job's generation: a full
  // restore of the cut while it owns nothing reads no rows.
  for (uint32_t i = servers; i < target; ++i) {
    RETURN_IF_ERROR(ops_->Restore(move.addressed, i, point, move.generation).status());
  }
  for (const MovedPartition& m : plan.moves) {
    move.added[m.to].push_back(m.partition);
    move.dropped[m.from].push_back(m.partition);
  }
  ServerOps::AddStep step;
  step.precopy = true;
  for (const auto& [index, partitions] : move.added) {
    absl::StatusOr<RestoreStats> stats =
        ops_->AddPartitions(move.addressed, index, point, partitions, move.generation, step);
    if (!stats.ok()) {
      DropAdded(move, index);
      return stats.status();
    }
    move.stats.rows += stats->rows;
    move.stats.bytes += stats->bytes;
    move.stats.paced += stats->paced;
  }
  const std::string paced =
      move.stats.paced > absl::ZeroDuration()
          ? absl::StrCat(", paced to ", config_.cluster().move_mb_per_s(),
                         " MB/s: ", absl::FormatDuration(move.stats.paced), " slept")
          : "";
  LOG(INFO) << "pre-copied " << plan.moves.size() << " partitions (" << move.stats.rows << " rows, "
            << move.stats.bytes << " bytes read" << paced << ") from the cut at clock " << clock
            << " for the move " << servers << " -> " << target
            << " servers; the catch-up and the switch follow at the next clock";
  state_.MovePrecopied(std::move(move));
  return true;
}

RestorePoint JobControl::CutPoint(uint64_t clock) const {
  RestorePoint point;
  point.initial = false;
  point.clock = clock;
  point.dir = checkpoint::CheckpointPath(config_.checkpoint().dir(), clock);
  return point;
}

void JobControl::DropAdded(const PartitionMove::InFlight& move, uint32_t upto) {
  // The old map stays in force. The destinations drop what they added (a
  // server that does not answer holds it unowned: it serves none of it, a
  // full restore clears it and a later add drops it first).
  const std::vector<uint32_t> active = clock_.LiveRanks();
  for (const auto& [to, given] : move.added) {
    if (to > upto) break;
    if (absl::Status st = ops_->SwitchMap(move.addressed, to, given, active); !st.ok()) {
      LOG(WARNING) << "server " << to << " did not drop the partitions of a failed move: " << st;
    }
  }
}

absl::Status JobControl::CatchUpAndSwitch(const PartitionMove::InFlight& move, uint64_t clock,
                                          uint32_t* moved, RestoreStats* stats) {
  *moved = 0;
  *stats = move.stats;
  state_.Doing(absl::StrCat("moving partitions: ", move.servers, " -> ", move.target,
                            " servers: catch-up from clock ", move.clock, " to ", clock));
  const RestorePoint point = CutPoint(clock);
  ServerOps::AddStep step;
  step.catch_up_from = move.clock;
  uint64_t caught_up = 0;
  for (const auto& [index, partitions] : move.added) {
    absl::StatusOr<RestoreStats> caught =
        ops_->AddPartitions(move.addressed, index, point, partitions, move.generation, step);
    if (!caught.ok()) {
      DropAdded(move, UINT32_MAX);
      return caught.status();
    }
    // The partitions' rows are the pre-copy's count; the bytes read are
    // both steps'.
    caught_up += caught->rows;
    stats->bytes += caught->bytes;
  }
  MaybeStallAt(ProcessTestingStalls(), "reshard_added", "the scheduler", absl::StrCat(getpid()));
  // The switch. Before it nothing changed that a request can see; from the
  // first server that takes the new map on, a failure is a server failure
  // (the recovery restores the cut under the new map).
  ASSIGN_OR_RETURN(const PartitionMapProto next, members_.SetOwners(move.owner));
  for (const auto& [to, given] : move.added) *moved += given.size();
  const uint32_t failed = SwitchMap(move, next, clock);
  LOG(INFO) << "moved " << *moved << " partitions (" << stats->rows << " rows pre-copied at clock "
            << move.clock << ", " << caught_up << " rows caught up at clock " << clock << ", "
            << stats->bytes << " bytes read in all): " << move.servers << " -> " << move.target
            << " servers, map version " << next.version()
            << (failed > 0 ? absl::StrCat("; ", failed, " servers failed during the switch") : "");
  return absl::OkStatus();
}

uint32_t JobControl::SwitchMap(const PartitionMove::InFlight& move, const PartitionMapProto& next,
                               uint64_t clock) {
  const std::vector<uint32_t> active = clock_.LiveRanks();
  PartitionMapProto switching = next;
  *switching.mutable_server_addresses() = move.addressed.server_addresses();
  // Every server is switched even if one fails: the recovery restores the
  // cut on each server under the map it holds, so every live one must hold
  // the new map (a failed one takes it when it registers again).
  uint32_t failed = 0;
  for (uint32_t i = 0; i < std::max(move.servers, move.target); ++i) {
    const auto dropped = move.dropped.find(i);
    const absl::Status st = ops_->SwitchMap(
        switching, i, dropped == move.dropped.end() ? std::vector<uint32_t>() : dropped->second,
        active);
    if (i == 0)
      MaybeStallAt(ProcessTestingStalls(), "reshard_switching", "the scheduler",
                   absl::StrCat(getpid()));
    if (st.ok()) continue;
    ++failed;
    LOG(ERROR) << "server " << i << " failed during the switch to map version " << next.version()
               << ": " << st << "; the recovery restores the cut at clock " << clock
               << " under the new map";
    state_.ServerFailed(i, absl::StrCat("server ", i, " failed during a move: ", st.message()),
                        absl::Now(), absl::Now(), /*lost=*/true);
  }
  return failed;
}

void JobControl::Reshard(uint64_t clock, uint64_t serving) {
  const JobState::MoveStep s = state_.BeginMoveStep(clock);
  std::optional<PartitionMove::InFlight> move = s.in_flight;
  const std::optional<PartitionMapProto> map = members_.Map();
  if (move && (!map || !move->Current(s.generation, s.target, map->version()))) {
    // A recovery (its full restores cleared the pre-copies), or another
    // request: the move starts again.
    LOG(INFO) << "the pre-copy at clock " << move->clock
              << " is out of date (job generation, partition map or target changed): the move "
                 "starts again";
    state_.ForgetMove();
    move.reset();
  }
  PartitionMove::Step step;
  step.clock = clock;
  step.answers = s.requested;
  step.start = move ? move->start : absl::Now();
  if (!move) {
    PrecopyStep(clock, serving, s, map, &step);
  } else {
    // The second step: a cut at `clock` that is a delta on the pre-copy's
    // and keeps the workers held until the switch.
    step.status = Cut(clock, /*next=*/clock, serving, /*final=*/false, /*delta_on_last=*/true);
    step.cut_retried = AfterCut(clock, step.status);  // The cut is tried again, and the move.
    if (step.status.ok()) step.status = CatchUpAndSwitch(*move, clock, &step.moved, &step.stats);
  }
  uint64_t next;
  const bool retry = state_.MoveStepEnded(step, absl::Now(), &next);
  if (!step.status.ok()) {
    LOG(ERROR) << "reshard to " << s.target << " servers at clock " << clock << ": " << step.status
               << (retry ? " (tried again)" : "");
  }
  // The first step's cut released the workers already (or holds them at the
  // next cut); a failed second step, or a done move, releases them here.
  if (move || !step.status.ok()) HoldOrRelease(next);
  if (step.moved > 0) state_.Notify();
}

void JobControl::PrecopyStep(uint64_t clock, uint64_t serving, const JobState::MoveStep& s,
                             const std::optional<PartitionMapProto>& map,
                             PartitionMove::Step* step) {
  // The pre-copy reads a recent cut of the same generation and map (a
  // delta on it is what the catch-up reads), or cuts anew.
  const bool reuse = last_cut_ && map && last_cut_->generation == s.generation &&
                     last_cut_->map_version == map->version() && last_cut_->clock <= clock &&
                     absl::Now() - last_cut_->at <= kReuseCutFor;
  if (reuse) {
    LOG(INFO) << "the move pre-copies from the cut at clock " << last_cut_->clock << " (taken "
              << absl::FormatDuration(absl::Now() - last_cut_->at) << " ago)";
    HoldOrRelease(s.next_cut);
  } else {
    // The workers are released after the cut's copy.
    step->status = Cut(clock, s.next_cut, serving);
    step->cut_retried = AfterCut(clock, step->status);  // The cut is tried again, and the move.
  }
  if (!step->status.ok()) return;
  const absl::StatusOr<bool> precopied = Precopy(reuse ? last_cut_->clock : clock, s.target);
  step->status = precopied.status();
  step->first_done = precopied.ok() && *precopied;
}

}  // namespace shardps

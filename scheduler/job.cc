// JobCoordinator: construction, failure detection, checkpoint requests, the
// job's status, registration and heartbeats (job.h). The workers' requests
// are in job_workers.cc.
#include "scheduler/job.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/generation.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_guard.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

}  // namespace

JobCoordinator::JobCoordinator(JobConfig config, ServerNotifier notifier, ServerOps* ops)
    : config_(std::move(config)),
      fingerprint_(ConfigFingerprint(config_)),
      start_time_(absl::Now()),
      checkpoints_on_(!config_.checkpoint().dir().empty()),
      members_(config_, fingerprint_),
      clock_(config_.cluster().num_workers(), EffectiveStaleness(config_.cluster()) == UINT32_MAX
                                                  ? ClockService::kUnbounded
                                                  : EffectiveStaleness(config_.cluster())),
      state_(config_, &members_, &clock_, std::move(notifier), start_time_),
      control_(config_, &state_, &members_, &clock_, ops, start_time_) {
  // No step starts before the job has formed (the control thread unpauses).
  clock_.SetPaused(true);
}

JobCoordinator::~JobCoordinator() {
  stop_ = true;
  {
    MutexLock lock(&state_.mu);
    state_.changed.SignalAll();
  }
  clock_.Abort("the scheduler is shutting down");
  if (sweeper_.joinable()) sweeper_.join();
  control_.Stop();
}

void JobCoordinator::Start() {
  control_.Start();
  sweeper_ = std::thread([this] {
    const absl::Duration period = Ms(std::max(1u, config_.cluster().heartbeat_ms() / 2));
    while (!stop_) {
      absl::SleepFor(period);
      Sweep(absl::Now());
    }
  });
}

uint64_t JobCoordinator::generation() const {
  MutexLock lock(&state_.mu);
  return state_.generation;
}

void JobCoordinator::RequestCheckpoint() {
  MutexLock lock(&state_.mu);
  state_.cuts.Request();
  state_.changed.SignalAll();
}

absl::StatusOr<uint64_t> JobCoordinator::CheckpointNow(absl::Time deadline) {
  MutexLock lock(&state_.mu);
  if (!checkpoints_on_) {
    return absl::FailedPreconditionError(
        "checkpoints are off for this job (set checkpoint.dir in the job config)");
  }
  const uint64_t mine = state_.cuts.Request();
  state_.changed.SignalAll();
  while (!state_.cuts.Served(mine)) {
    if (state_.Ended() || state_.control_over) {
      return absl::FailedPreconditionError(
          "the job ended before the requested checkpoint could be taken");
    }
    if (!state_.changed.WaitUntil(&state_.mu, deadline) && !state_.cuts.Served(mine)) {
      return absl::DeadlineExceededError(
          "no checkpoint completed before the deadline (workers may be slow to "
          "reach the cut, or a recovery runs); it will still be taken");
    }
  }
  return state_.cuts.LastCut();
}

absl::StatusOr<ReshardResponse> JobCoordinator::Reshard(uint32_t servers, absl::Time deadline) {
  const ClusterConfig& k = config_.cluster();
  if (servers == 0 || servers > k.max_servers()) {
    return absl::InvalidArgumentError(absl::StrCat("reshard: ", servers,
                                                   " servers; the job may run on 1 to ",
                                                   k.max_servers(), " (cluster.max_servers)"));
  }
  MutexLock lock(&state_.mu);
  if (!checkpoints_on_) {
    return absl::FailedPreconditionError(
        "reshard: a move restores partitions from a cut, and checkpoints are off for this job "
        "(set checkpoint.dir in the job config)");
  }
  state_.reshard.target = servers;
  const uint64_t mine = ++state_.reshard.requested;
  state_.changed.SignalAll();
  while (state_.reshard.served < mine) {
    if (state_.Ended() || state_.control_over) {
      return absl::FailedPreconditionError("reshard: the job ended before the move");
    }
    if (!state_.changed.WaitUntil(&state_.mu, deadline) && state_.reshard.served < mine) {
      return absl::DeadlineExceededError(
          absl::StrCat("reshard to ", servers,
                       " servers: not done before the deadline (workers may be slow "
                       "to reach the clock boundary, or a recovery runs); it may still happen"));
    }
  }
  if (!state_.reshard.error.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("reshard: ", state_.reshard.error));
  }
  ReshardResponse response;
  response.set_clock(state_.reshard.clock);
  response.set_map_version(members_.MapVersion());
  response.set_partitions_moved(state_.reshard.last_moved);
  return response;
}

std::vector<uint64_t> JobCoordinator::Checkpoints() const {
  MutexLock lock(&state_.mu);
  return state_.cuts.written();
}

absl::Status JobCoordinator::CheckCheckpointDir() {
  if (!checkpoints_on_) return absl::OkStatus();
  const std::string& root = config_.checkpoint().dir();
  absl::Status st = ProbeCheckpointDir(root);
  if (st.ok()) {
    MutexLock lock(&state_.mu);
    if (state_.evals.on()) st = state_.evals.Load();  // The persisted evaluations.
  }
  if (st.ok()) return st;
  st = absl::Status(st.code(),
                    absl::StrCat("checkpoint.dir ", root, " is unusable: ", st.message()));
  MutexLock lock(&state_.mu);
  state_.Fail(std::string(st.message()));
  return st;
}

void JobCoordinator::Sweep(absl::Time now) {
  const ClusterConfig& k = config_.cluster();
  const std::vector<Member> died = members_.Sweep(now, Ms(k.dead_after_ms()));
  bool workers_changed = false;
  {
    MutexLock lock(&state_.mu);
    for (const Member& m : died) {
      if (m.role == WORKER) {
        LOG(WARNING) << "worker " << m.index << " missed heartbeats: declared dead; "
                     << (state_.loss.LeavesClock() ? "it leaves the clock minimum"
                                                   : "the clocks wait for it")
                     << " (cluster.on_worker_loss " << state_.loss.policy_name() << ")";
        workers_changed |= state_.WorkerLost(m.index);
      } else if (state_.formed && !state_.Ended()) {
        state_.ServerFailed(m.index,
                            absl::StrCat("server ", m.index, " (", m.address,
                                         ") missed heartbeats for ", k.dead_after_ms(), " ms"),
                            m.last_heartbeat, now, /*lost=*/false);
      }
    }
    if (state_.takeover.active() && now - start_time_ > Ms(k.dead_after_ms())) {
      // A worker that has not rejoined by now is gone (it may have finished
      // and exited while there was no scheduler): it counts as dead.
      for (uint32_t rank : members_.ExpireUnregistered(WORKER, now)) {
        LOG(WARNING) << "worker " << rank << " did not rejoin the restarted scheduler within "
                     << k.dead_after_ms() << " ms: declared dead";
        workers_changed |= state_.WorkerLost(rank);
      }
    }
    const std::vector<Member> members = members_.Members();
    if (!state_.formed && now - start_time_ > Ms(k.start_deadline_ms())) {
      std::vector<uint32_t> missing;
      for (const Member& m : members) {
        if (m.role == SERVER && m.state != ALIVE) missing.push_back(m.index);
      }
      if (!missing.empty()) {
        state_.Fail(absl::StrCat("servers [", absl::StrJoin(missing, ","),
                                 "] did not register within start_deadline_ms (",
                                 k.start_deadline_ms(), " ms)"));
      }
    }
    for (const Member& s : members) {
      if (s.role == SERVER && s.state == DEAD && now - s.state_since > Ms(k.server_deadline_ms())) {
        state_.Fail(absl::StrCat("server ", s.index, " (", s.address, ") dead for more than ",
                                 k.server_deadline_ms(), " ms: no replacement registered"));
      }
    }
    state_.CheckWorkerDeadlines(members, now);
    workers_changed |= state_.ResumeAfterRewind(now);
    state_.Update();
    state_.changed.SignalAll();
  }
  if (workers_changed) state_.Notify();
}

absl::Status JobCoordinator::WaitDone(absl::Time deadline) {
  MutexLock lock(&state_.mu);
  while (!state_.Ended()) {
    if (!state_.changed.WaitUntil(&state_.mu, deadline) && !state_.Ended()) {
      return absl::DeadlineExceededError("job still running");
    }
  }
  if (state_.phase == JobState::Phase::kFailed)
    return absl::AbortedError(absl::StrCat("job failed: ", state_.failure));
  return absl::OkStatus();
}

void JobCoordinator::JobStatus(JobStatusResponse* response) const {
  const absl::Time now = absl::Now();
  const std::vector<uint64_t> clocks = clock_.Clocks();
  // Members of the map and spares alike (a spare has registered, so it has
  // a state and a heartbeat; it is a server, so it has no clock).
  auto fill = [&](const Member& m, MemberStatus* s) {
    s->set_role(m.role);
    s->set_index(m.index);
    s->set_address(m.address);
    s->set_state(m.state);
    s->set_reason(m.reason);
    s->set_restarts(m.registrations > 1 ? m.registrations - 1 : 0);
    if (m.role == WORKER) s->set_clock(clocks[m.index]);
    if (m.state != STATE_UNSPECIFIED) {
      s->set_last_heartbeat_age_sec(absl::ToDoubleSeconds(now - m.last_heartbeat));
    }
  };
  for (const Member& m : members_.Members()) fill(m, response->add_members());
  for (const Member& m : members_.Spares()) fill(m, response->add_spares());
  response->set_job_name(config_.name());
  response->set_min_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  response->set_max_clock(clock_.MaxClock());
  response->set_max_spread(clock_.MaxSpread());
  response->set_elapsed_sec(absl::ToDoubleSeconds(now - start_time_));
  MutexLock lock(&state_.mu);
  switch (state_.phase) {
    case JobState::Phase::kWaiting:
      response->set_state("waiting");
      break;
    case JobState::Phase::kRunning:
      response->set_state(state_.recovery.idle() ? "running" : "recovering");
      break;
    case JobState::Phase::kDone:
      response->set_state("done");
      break;
    case JobState::Phase::kFailed:
      response->set_state("failed: " + state_.failure);
      break;
  }
  response->set_generation(state_.generation);
  response->set_map_version(members_.MapVersion());
  response->set_map_servers(members_.MapServers());
  response->set_reshards(state_.reshard.moves);
  response->set_partitions_moved(state_.reshard.partitions_moved);
  response->set_reshard_rows_moved(state_.reshard.rows_moved);
  response->set_reshard_bytes_moved(state_.reshard.bytes_moved);
  response->set_last_reshard_sec(state_.reshard.last_sec);
  for (const RecoveryReport& r : state_.recovery.reports()) *response->add_recoveries() = r;
  response->set_last_checkpoint_hold_sec(state_.cuts.last_hold_sec());
  response->set_last_checkpoint_write_sec(state_.cuts.last_write_sec());
  response->set_versions(state_.cuts.versions());
  response->set_last_version(state_.cuts.last_version());
  response->set_last_version_hold_sec(state_.cuts.last_version_hold_sec());
  double sps = 0, loss = 0, train_auc = 0;
  uint64_t samples = 0;
  // Per worker the larger of its latest report and its latest tick.
  std::map<uint32_t, uint64_t> share = state_.loss.tick_samples();
  for (const auto& [rank, r] : state_.reports) share[rank] = std::max(share[rank], r.samples());
  for (const auto& [rank, s] : share) {
    // Saturating: reports are validated, the sum must not wrap either.
    samples = s > UINT64_MAX - samples ? UINT64_MAX : samples + s;
  }
  int n = 0;
  for (const auto& [rank, r] : state_.reports) {
    if (!r.done()) sps += r.samples_per_sec();
    loss += r.train_loss();
    train_auc += r.train_auc();
    ++n;
    if (r.final() && r.eval_examples() > 0) {
      response->set_eval_auc(r.eval_auc());
      response->set_eval_loss(r.eval_loss());
    }
  }
  state_.EvalStatus(response);
  response->set_samples_per_sec(sps);
  response->set_total_samples(samples);
  if (n > 0) response->set_train_loss(loss / n);
  if (n > 0) response->set_train_auc(train_auc / n);
  response->set_summary(state_.Summary());
  response->set_untrained_samples(state_.UntrainedSamples());
}

void JobCoordinator::ApplyRejoinLocked(const RegisterRequest& request, uint32_t index) {
  const Rejoin& r = request.rejoin();
  if (request.role() != WORKER) return;
  clock_.Revive(index, r.clock());
  if (r.has_granted_step()) clock_.NoteGranted(r.granted_step(), index);
  state_.positions[index] = {r.clock(), r.position()};
  if (r.has_last_report()) state_.reports[index] = r.last_report();
  if (r.finished()) {
    members_.MarkFinished(index, absl::Now());
    clock_.MarkFinished(index);
    state_.reported_final[index] = r.has_last_report() && r.last_report().final();
  }
}

absl::Status JobCoordinator::Register(const RegisterRequest& request, RegisterResponse* response) {
  if (request.has_rejoin() && !request.has_requested_index()) {
    return absl::InvalidArgumentError("rejoin: requested_index is required");
  }
  if (request.role() == WORKER && request.rejoin().has_last_report()) {
    // The report a rejoining worker carries is judged as a live one would be.
    const Rejoin& r = request.rejoin();
    uint64_t max_step = r.clock();
    if (r.has_granted_step() && r.granted_step() < UINT64_MAX) {
      max_step = std::max(max_step, r.granted_step() + 1);
    }
    RETURN_IF_ERROR(ValidateReport(r.last_report(), max_step));
  }
  const absl::Time now = absl::Now();
  if (request.role() == SERVER && request.rejoin().partition_owner_size() > 0) {
    RETURN_IF_ERROR(AdoptRejoinedMap(request));
  }
  auto reg = members_.Register(request, now);
  if (!reg.ok()) {
    LOG_EVERY_N(WARNING, 20) << "refused registration: " << reg.status();
    return reg.status();
  }
  const Member& m = reg->member;
  response->set_index(m.index);
  response->set_job_id(fingerprint_);
  if (auto map = members_.Map()) *response->mutable_map() = *map;
  if (request.role() == WORKER) {
    response->mutable_shard()->set_worker_rank(m.index);
    response->mutable_shard()->set_num_workers(config_.cluster().num_workers());
  }
  if (reg->repeat) return absl::OkStatus();
  if (reg->spare) {  // Outside the map: nothing waits for it, nothing recovers it.
    LOG(INFO) << "server " << m.index << " registered at " << m.address
              << " as a spare (cluster.max_servers): it owns no partitions until a move";
    MutexLock lock(&state_.mu);
    if (!state_.formed) {  // A rejoining server's map may still make it one of the map's.
      if (request.has_rejoin()) {
        state_.takeover.Rejoined(SERVER, m.index, request.rejoin());
      } else {
        state_.takeover.Fresh(SERVER, m.index);
      }
    }
    return absl::OkStatus();
  }
  bool notify;
  {
    MutexLock lock(&state_.mu);
    notify = AdmitLocked(request, *reg, now);
    state_.Update();
    state_.changed.SignalAll();
  }
  if (notify) state_.Notify();
  return absl::OkStatus();
}

absl::Status JobCoordinator::AdoptRejoinedMap(const RegisterRequest& request) {
  MutexLock lock(&state_.mu);                  // Formation reads the map under it.
  if (state_.formed) return absl::OkStatus();  // This scheduler's map holds.
  const Rejoin& r = request.rejoin();
  const std::vector<uint32_t> owner(r.partition_owner().begin(), r.partition_owner().end());
  absl::StatusOr<bool> adopted = members_.AdoptOwners(r.owner_map_version(), owner);
  if (!adopted.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("rejoin of server ", request.requested_index(),
                                                   ": ", adopted.status().message()));
  }
  if (*adopted) {
    LOG(INFO) << "server " << request.requested_index() << " rejoined holding map version "
              << r.owner_map_version() << " on " << members_.MapServers()
              << " servers: the job goes on with its owners";
  }
  return absl::OkStatus();
}

bool JobCoordinator::AdmitLocked(const RegisterRequest& request, const Registration& reg,
                                 absl::Time now) {
  const Member& m = reg.member;
  const std::string who = absl::StrCat(RoleName(request.role()), " ", m.index);
  bool notify = request.role() == SERVER;
  if (request.has_rejoin()) {
    const Rejoin& r = request.rejoin();
    members_.RaiseMapVersionAbove(r.map_version());
    LOG(INFO) << who << " rejoined (generation " << r.generation() << ", clock " << r.clock()
              << ", map version " << r.map_version() << ")";
    if (!state_.formed) {
      // A process of an earlier scheduler: this one takes its job over.
      state_.takeover.Rejoined(request.role(), m.index, r);
      ApplyRejoinLocked(request, m.index);
    } else if (request.role() == SERVER) {
      if (reg.new_process || r.generation() != state_.generation) {
        state_.ServerFailed(m.index, absl::StrCat(who, " came back with another state"),
                            reg.previous_heartbeat, now, /*lost=*/true);
      } else if (state_.recovery.pending() &&
                 state_.recovery.pending()->silent.erase(m.index) > 0) {
        LOG(INFO) << who << " was declared dead and came back with its state";
      }
    } else if (r.generation() == state_.generation) {  // A worker that was silent.
      ApplyRejoinLocked(request, m.index);
      notify = true;
    } else {  // It rewinds itself (WaitStart) from its slot's clock.
      clock_.Revive(m.index, clock_.Clocks()[m.index]);
      notify = true;
    }
  } else if (!state_.formed) {
    state_.takeover.Fresh(request.role(), m.index);
    LOG(INFO) << who << " registered" << (m.address.empty() ? "" : " at ") << m.address;
  } else if (request.role() == SERVER) {
    LOG(INFO) << who << " registered at " << m.address << " (a new process)";
    if (reg.previous_state != STATE_UNSPECIFIED) {
      state_.ServerFailed(m.index,
                          absl::StrCat(who, " restarted (a new process at ", m.address, ")"),
                          reg.previous_heartbeat, now, /*lost=*/true);
    }
  } else {
    // A restarted worker: it resumes at its last acknowledged clock from
    // the data position it recorded there (WaitStart).
    LOG(INFO) << who << " registered"
              << (reg.previous_state == STATE_UNSPECIFIED ? ""
                                                          : " (restarted: takes its rank back)");
    clock_.Revive(m.index, clock_.Clocks()[m.index]);
    notify = true;
  }
  return notify;
}

absl::Status JobCoordinator::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response) {
  if (request.job_id() != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "heartbeat: ", RoleName(request.role()), " ", request.index(), " names job ",
        absl::Hex(request.job_id(), absl::kZeroPad16), "; this scheduler runs job ",
        absl::Hex(fingerprint_, absl::kZeroPad16), " (RegisterResponse.job_id); refused"));
  }
  auto verdict =
      members_.Heartbeat(request.role(), request.index(), request.incarnation(), absl::Now());
  if (!verdict.ok()) return verdict.status();
  response->set_map_version(members_.MapVersion());
  MutexLock lock(&state_.mu);
  response->set_generation(state_.generation);
  response->set_stop(state_.Ended());
  if (state_.phase == JobState::Phase::kFailed) response->set_failure(state_.failure);
  if (*verdict == HeartbeatVerdict::kRejoin) response->set_rejoin(true);
  if (*verdict == HeartbeatVerdict::kReplaced) {
    return absl::FailedPreconditionError(
        absl::StrCat(RoleName(request.role()), " ", request.index(),
                     " was replaced by a newer process (another incarnation holds the slot)"));
  }
  return absl::OkStatus();
}

}  // namespace shardps

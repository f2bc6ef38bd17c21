#include "scheduler/job.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace {

absl::Duration Ms(uint64_t ms) { return absl::Milliseconds(ms); }

absl::Time DeadlineFromMs(uint32_t timeout_ms) {
  return absl::Now() + (timeout_ms == 0 ? absl::Seconds(30) : Ms(timeout_ms));
}

}  // namespace

JobCoordinator::JobCoordinator(JobConfig config, ServerNotifier notifier)
    : config_(std::move(config)),
      fingerprint_(ConfigFingerprint(config_)),
      notifier_(std::move(notifier)),
      start_time_(absl::Now()),
      members_(config_, fingerprint_),
      clock_(config_.cluster().num_workers(),
             EffectiveStaleness(config_.cluster()) == UINT32_MAX
                 ? ClockService::kUnbounded
                 : EffectiveStaleness(config_.cluster())),
      final_(config_.cluster().num_workers(), false) {}

JobCoordinator::~JobCoordinator() {
  stop_ = true;
  if (sweeper_.joinable()) sweeper_.join();
  if (checkpointer_thread_.joinable()) checkpointer_thread_.join();
  MutexLock lock(&partial_mu_);
  if (partial_thread_.joinable()) partial_thread_.join();
}

void JobCoordinator::SetCheckpointer(Checkpointer checkpointer) {
  checkpointer_ = std::move(checkpointer);
}

void JobCoordinator::SetResume(Resume resume) {
  for (uint32_t r = 0; r < final_.size(); ++r) clock_.Revive(r, resume.clock);
  MutexLock lock(&mu_);
  for (const auto& [rank, position] : resume.positions) {
    positions_[rank] = {resume.clock, position};
  }
  resume_ = std::move(resume);
}

void JobCoordinator::SetPartialRecovery(ServerRestorer restore) {
  partial_restore_ = std::move(restore);
}

void JobCoordinator::SetRecover(uint64_t last_checkpoint) {
  recover_ = last_checkpoint;
  clock_.SetPaused(true);  // No new step until every process has rejoined.
}

absl::Status JobCoordinator::CheckRejoined(uint32_t rank) const {
  if (!recover_ || members_.Registered(WORKER, rank)) return absl::OkStatus();
  return absl::UnavailableError(absl::StrCat(
      "the scheduler restarted; worker ", rank, " must rejoin first"));
}

void JobCoordinator::ApplyRejoin(const RegisterRequest& request, uint32_t index) {
  const Rejoin& r = request.rejoin();
  members_.RaiseMapVersionAbove(r.map_version());
  if (request.role() != WORKER) return;
  clock_.Revive(index, r.clock());
  if (r.has_granted_step()) clock_.NoteGranted(r.granted_step());
  MutexLock lock(&mu_);
  positions_[index] = {r.clock(), r.position()};
}

void JobCoordinator::RequestCheckpoint() {
  MutexLock lock(&mu_);
  ++requested_seq_;
}

absl::StatusOr<uint64_t> JobCoordinator::CheckpointNow(absl::Time deadline) {
  MutexLock lock(&mu_);
  if (!checkpointer_) {
    return absl::FailedPreconditionError(
        "checkpoints are off for this job (set checkpoint.dir in the job config)");
  }
  const uint64_t mine = ++requested_seq_;
  while (completed_seq_ < mine) {
    if (state_ == State::kDone || state_ == State::kFailed || cut_loop_over_) {
      return absl::FailedPreconditionError(
          "the job ended before the requested checkpoint could be taken");
    }
    if (!changed_.WaitUntil(&mu_, deadline) && completed_seq_ < mine) {
      return absl::DeadlineExceededError(
          "no checkpoint completed before the deadline (workers may be slow to "
          "reach the cut); it will still be taken");
    }
  }
  if (!last_cut_status_.ok()) return last_cut_status_;
  return last_cut_clock_;
}

std::vector<uint64_t> JobCoordinator::Checkpoints() const {
  MutexLock lock(&mu_);
  return checkpoints_;
}

bool JobCoordinator::ReadyLocked() const { return !resume_ || restored_; }

void JobCoordinator::CheckpointLoop() {
  const CheckpointConfig& cc = config_.checkpoint();
  if (resume_) {  // Restore every server before any worker starts.
    while (!stop_ && members_.MapVersion() == 0) absl::SleepFor(absl::Milliseconds(20));
    if (stop_) return;
    const absl::Status st = resume_->restore();
    MutexLock lock(&mu_);
    if (!st.ok()) {
      state_ = State::kFailed;
      failure_ = absl::StrCat("restoring the checkpoint at clock ", resume_->clock,
                              " failed: ", st.message());
      LOG(ERROR) << failure_;
      clock_.Abort(failure_);
    } else {
      LOG(INFO) << "every server restored the checkpoint at clock " << resume_->clock;
      HoldFirstCut();  // Before any worker can start (they wait for restored_).
      restored_ = true;
    }
    changed_.SignalAll();
  }
  if (!checkpointer_) return;
  if (recover_) {  // Cut only once every process has rejoined.
    while (!stop_) {
      {
        MutexLock lock(&mu_);
        if (state_ != State::kWaiting) break;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    HoldFirstCut();
  }
  absl::Time last = absl::Now();
  uint64_t serving = 0;  // requested_seq_ when the current cut was placed.
  uint64_t last_cut = resume_ ? resume_->clock : recover_.value_or(0);
  // Writes the checkpoint at `clock` (every worker held there or finished).
  auto cut = [&](uint64_t clock) {
    std::map<uint32_t, std::string> positions;
    {
      MutexLock lock(&mu_);
      for (const auto& [rank, p] : positions_) positions[rank] = p.second;
    }
    const absl::Time start = absl::Now();
    const absl::Status st = checkpointer_(clock, positions);
    MutexLock lock(&mu_);
    if (st.ok()) {
      LOG(INFO) << "checkpoint at clock " << clock << " written in "
                << absl::FormatDuration(absl::Now() - start) << " (workers held meanwhile)";
      checkpoints_.push_back(clock);
      last_cut = clock;
    } else {
      LOG(ERROR) << "checkpoint at clock " << clock << " failed: " << st;
    }
    last_cut_status_ = st;
    last_cut_clock_ = clock;
    completed_seq_ = serving;
    changed_.SignalAll();
  };
  while (!stop_) {
    absl::SleepFor(absl::Milliseconds(10));
    {
      MutexLock lock(&mu_);
      if (state_ == State::kDone || state_ == State::kFailed) break;
      const bool due = cc.every_seconds() > 0 &&
                       absl::Now() - last >= absl::Seconds(cc.every_seconds());
      if (requested_seq_ > serving) {  // On demand: the first unstarted clock.
        clock_.HoldFirstUnstarted(1);
        serving = requested_seq_;
      } else if (due && !clock_.HeldClock()) {
        clock_.HoldFirstUnstarted(1);
      }
    }
    if (!clock_.MinClock()) {
      // Every worker is finished or dead. When all finished training (their
      // last pushes acknowledged, servers still up for the evaluation), the
      // end is a consistent cut too: the final checkpoint of the job.
      const auto states = clock_.States();
      const bool all_finished =
          std::all_of(states.begin(), states.end(),
                      [](auto s) { return s == ClockService::WorkerState::kFinished; });
      if (all_finished && clock_.MaxClock() > last_cut) cut(clock_.MaxClock());
      clock_.Release();
      break;  // The tail below lets the job end.
    }
    const std::optional<uint64_t> held = clock_.HeldClock();
    if (!held || !clock_.AllReachedHold()) continue;
    cut(*held);
    last = absl::Now();
    const uint64_t k = cc.every_steps();
    if (k > 0) {
      clock_.Hold((*held / k + 1) * k);  // The next multiple (and wakes).
    } else {
      clock_.Release();
    }
  }
  MutexLock lock(&mu_);
  cut_loop_over_ = true;
  UpdateStateLocked();  // The job may end now (it waited for the final cut).
  changed_.SignalAll();
}

void JobCoordinator::HoldFirstCut() {
  const uint64_t k = config_.checkpoint().every_steps();
  if (!checkpointer_ || k == 0) return;
  // The first multiple of every_steps no worker has started, after the
  // resumed clock (which is already a checkpoint).
  const uint64_t after = resume_ ? resume_->clock : recover_.value_or(0);
  clock_.HoldFirstUnstarted(k, after + 1);
}

void JobCoordinator::Start() {
  // Without a resume the first cut is held here, synchronously: a fast ASP
  // worker could otherwise pass it before the checkpoint thread runs.
  if (!resume_ && !recover_) HoldFirstCut();
  if (resume_ || checkpointer_) {
    checkpointer_thread_ = std::thread([this] { CheckpointLoop(); });
  }
  sweeper_ = std::thread([this] {
    const absl::Duration period = Ms(std::max(1u, config_.cluster().heartbeat_ms() / 2));
    while (!stop_) {
      absl::SleepFor(period);
      Sweep(absl::Now());
    }
  });
}

absl::Status JobCoordinator::Register(const RegisterRequest& request,
                                      RegisterResponse* response) {
  const bool was_dead_server =
      request.role() == SERVER && !members_.DeadServers().empty();
  if (request.has_rejoin() && (!recover_ || !request.has_requested_index())) {
    return absl::FailedPreconditionError(
        !recover_ ? "rejoin: this scheduler was not started with --recover"
                  : "rejoin: requested_index is required");
  }
  auto member = members_.Register(request, absl::Now());
  if (!member.ok()) {
    LOG(WARNING) << "refused registration: " << member.status();
    return member.status();
  }
  if (request.has_rejoin()) {
    ApplyRejoin(request, member->index);
    LOG(INFO) << (request.role() == SERVER ? "server " : "worker ") << member->index
              << " rejoined at clock " << request.rejoin().clock() << ", map version "
              << request.rejoin().map_version();
  }
  LOG(INFO) << (request.role() == SERVER ? "server " : "worker ") << member->index
            << " registered" << (member->address.empty() ? "" : " at ")
            << member->address
            << (member->registrations > 1 ? " (restarted, took its index back)" : "");
  response->set_index(member->index);
  response->set_job_id(fingerprint_);
  bool ready;
  {
    MutexLock lock(&mu_);
    ready = ReadyLocked();
  }
  if (auto map = members_.Map(); map && ready) *response->mutable_map() = *map;
  if (request.role() == WORKER) {
    response->mutable_shard()->set_worker_rank(member->index);
    response->mutable_shard()->set_num_workers(config_.cluster().num_workers());
    const uint64_t resume = clock_.Clocks()[member->index];
    response->set_resume_clock(resume);
    {
      MutexLock lock(&mu_);
      auto it = positions_.find(member->index);
      if (it != positions_.end() && it->second.first == resume) {
        response->set_resume_position(it->second.second);
      }
    }
    if (member->registrations > 1 && !request.has_rejoin()) {
      clock_.Revive(member->index, resume);
    }
  }
  const bool restore = request.role() == SERVER && member->registrations > 1 &&
                       partial_restore_ && !request.has_rejoin();
  if (was_dead_server && members_.DeadServers().empty()) {
    if (restore) {
      // The server serves already; it restores while the clocks stay paused
      // (no worker step sees it half restored), off this RPC's deadline.
      MutexLock lock(&partial_mu_);
      if (partial_thread_.joinable()) partial_thread_.join();
      partial_thread_ = std::thread([this, index = member->index, address = member->address] {
        const absl::Status st = partial_restore_(index, address);
        if (st.ok()) {
          LOG(INFO) << "every server is back: resuming clocks";
          clock_.SetPaused(false);
          return;
        }
        MutexLock lock(&mu_);
        failure_ = absl::StrCat("partial recovery failed: ", st.message());
        LOG(ERROR) << "job failed: " << failure_;
        state_ = State::kFailed;
        clock_.Abort(failure_);
        changed_.SignalAll();
      });
    } else {
      LOG(INFO) << "every server is back: resuming clocks";
      clock_.SetPaused(false);
    }
  }
  {
    MutexLock lock(&mu_);
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (request.role() == SERVER || member->registrations > 1) NotifyServers();
  return absl::OkStatus();
}

absl::Status JobCoordinator::Heartbeat(const HeartbeatRequest& request,
                                       HeartbeatResponse* response) {
  absl::Status st = members_.Heartbeat(request.role(), request.index(), absl::Now());
  response->set_map_version(members_.MapVersion());
  if (recover_ && absl::IsNotFound(st)) {  // A live process of the old scheduler.
    response->set_rejoin(true);
    st = absl::OkStatus();
  }
  MutexLock lock(&mu_);
  response->set_stop(state_ == State::kDone || state_ == State::kFailed);
  return st;
}

absl::Status JobCoordinator::GetPartitionMap(const GetPartitionMapRequest& request,
                                             PartitionMapProto* response) {
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  const uint64_t want = std::max<uint64_t>(1, request.min_version());
  MutexLock lock(&mu_);
  while (members_.MapVersion() < want || !ReadyLocked()) {
    if (state_ == State::kFailed) return absl::AbortedError(failure_);
    if (!changed_.WaitUntil(&mu_, deadline) &&
        (members_.MapVersion() < want || !ReadyLocked())) {
      return absl::DeadlineExceededError(absl::StrCat(
          "partition map version ", want, " not ready: waiting for servers"));
    }
  }
  *response = *members_.Map();
  return absl::OkStatus();
}

absl::Status JobCoordinator::WaitClock(const WaitClockRequest& request,
                                       WaitClockResponse* response) {
  // timeout_ms 0 asks without waiting (a worker deciding whether to prefetch).
  RETURN_IF_ERROR(CheckRejoined(request.rank()));
  auto min = clock_.WaitToStart(request.rank(), request.step(),
                                absl::Now() + Ms(request.timeout_ms()));
  if (!min.ok()) return min.status();
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::Tick(const TickRequest& request, TickResponse* response) {
  RETURN_IF_ERROR(CheckRejoined(request.rank()));
  auto min = clock_.Tick(request.rank(), request.clock());
  if (!min.ok()) return min.status();
  if (!request.position().empty()) {
    MutexLock lock(&mu_);
    positions_[request.rank()] = {request.clock(), request.position()};
  }
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::Barrier(const BarrierRequest& request) {
  if (request.role() != WORKER || request.index() >= final_.size()) {
    return absl::InvalidArgumentError("barrier: only workers with a valid rank");
  }
  RETURN_IF_ERROR(CheckRejoined(request.index()));
  const absl::Time deadline = DeadlineFromMs(request.timeout_ms());
  MutexLock lock(&mu_);
  std::vector<bool>& entered = barriers_[request.name()];
  entered.resize(final_.size(), false);
  entered[request.index()] = true;
  changed_.SignalAll();
  while (true) {
    if (state_ == State::kFailed) return absl::AbortedError(failure_);
    bool all = true;
    const std::vector<Member> members = members_.Members();
    for (const Member& m : members) {
      // A worker that finished (reported done) or died no longer counts.
      if (m.role == WORKER && !entered[m.index] && m.state != DEAD &&
          m.state != FINISHED) {
        all = false;
      }
    }
    if (all) return absl::OkStatus();
    if (!changed_.WaitUntil(&mu_, deadline)) {
      return absl::DeadlineExceededError(
          absl::StrCat("barrier \"", request.name(), "\" timed out"));
    }
  }
}

absl::Status JobCoordinator::ReportMetrics(const MetricsReport& report) {
  if (report.rank() >= final_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("metrics: bad rank ", report.rank()));
  }
  RETURN_IF_ERROR(CheckRejoined(report.rank()));
  if (report.done()) {
    members_.MarkFinished(report.rank(), absl::Now());
    clock_.MarkFinished(report.rank());
  }
  {
    MutexLock lock(&mu_);
    reports_[report.rank()] = report;
    if (report.final()) final_[report.rank()] = true;
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (report.done()) NotifyServers();
  return absl::OkStatus();
}

void JobCoordinator::Sweep(absl::Time now) {
  const std::vector<Member> died =
      members_.Sweep(now, Ms(config_.cluster().dead_after_ms()));
  bool workers_changed = false;
  for (const Member& m : died) {
    if (m.role == WORKER) {
      LOG(WARNING) << "worker " << m.index << " missed heartbeats: declared dead"
                   << "; it leaves the clock minimum";
      clock_.MarkDead(m.index);
      workers_changed = true;
    } else {
      LOG(WARNING) << "server " << m.index << " (" << m.address
                   << ") missed heartbeats: declared dead; pausing clocks for up to "
                   << config_.cluster().server_deadline_ms() << " ms";
      clock_.SetPaused(true);
    }
  }
  if (recover_ && now - start_time_ > Ms(config_.cluster().dead_after_ms())) {
    // A worker that has not rejoined by now is gone (it may have finished
    // and exited while there was no scheduler): it counts as dead.
    for (uint32_t rank : members_.ExpireUnregistered(WORKER, now)) {
      LOG(WARNING) << "worker " << rank << " did not rejoin the restarted scheduler within "
                   << config_.cluster().dead_after_ms() << " ms: declared dead";
      clock_.MarkDead(rank);
      workers_changed = true;
    }
  }
  if (recover_ && now - start_time_ > Ms(config_.cluster().server_deadline_ms())) {
    MutexLock lock(&mu_);
    if (state_ == State::kWaiting) {
      failure_ = absl::StrCat("not every server rejoined the restarted scheduler within ",
                              config_.cluster().server_deadline_ms(), " ms:\n",
                              SummaryLocked());
      LOG(ERROR) << "job failed: " << failure_;
      state_ = State::kFailed;
      clock_.Abort(failure_);
      changed_.SignalAll();
    }
  }
  for (const Member& s : members_.DeadServers()) {
    if (now - s.state_since > Ms(config_.cluster().server_deadline_ms())) {
      const std::string why = absl::StrCat(
          "server ", s.index, " (", s.address, ") dead for more than ",
          config_.cluster().server_deadline_ms(), " ms");
      clock_.Abort(absl::StrCat("job failed: ", why));
      MutexLock lock(&mu_);
      if (state_ != State::kFailed) {
        LOG(ERROR) << "job failed: " << why;
        state_ = State::kFailed;
        failure_ = why;
      }
      changed_.SignalAll();
    }
  }
  {
    MutexLock lock(&mu_);
    UpdateStateLocked();
    changed_.SignalAll();
  }
  if (workers_changed) NotifyServers();
}

void JobCoordinator::NotifyServers() {
  auto map = members_.Map();
  if (!map || !notifier_) return;
  std::vector<uint32_t> active;
  const auto states = clock_.States();
  for (uint32_t r = 0; r < states.size(); ++r) {
    if (states[r] == ClockService::WorkerState::kLive) active.push_back(r);
  }
  notifier_(*map, active);
}

bool JobCoordinator::AllRegisteredOnce() const {
  for (const Member& m : members_.Members()) {
    if (m.state == STATE_UNSPECIFIED) return false;
  }
  return true;
}

void JobCoordinator::UpdateStateLocked() {
  if (state_ == State::kDone || state_ == State::kFailed) return;
  if (state_ == State::kWaiting && AllRegisteredOnce()) {
    LOG(INFO) << "every server and worker registered: job running";
    state_ = State::kRunning;
    if (recover_) {  // Spreads seen while processes rejoined are not real.
      clock_.ResetMaxSpread();
      clock_.SetPaused(false);
    }
  }
  bool any_final = false, all_over = true;
  const std::vector<Member> members = members_.Members();
  for (const Member& m : members) {
    if (m.role != WORKER) continue;
    if (final_[m.index]) any_final = true;
    else if (m.state != DEAD) all_over = false;
  }
  // With checkpoints on, the job ends after the checkpoint thread took the
  // final cut (servers exit when it ends).
  const bool cuts_settled = !checkpointer_ || cut_loop_over_;
  if (all_over && any_final && cuts_settled) {
    state_ = State::kDone;
    LOG(INFO) << "job done\n" << SummaryLocked();
    clock_.Abort("job done");
  }
}

std::string JobCoordinator::SummaryLocked() const {
  std::string out;
  for (const Member& m : members_.Members()) {
    if (m.role != WORKER) continue;
    auto it = reports_.find(m.index);
    const uint64_t step = it == reports_.end() ? 0 : it->second.step();
    absl::StrAppend(&out, "  worker ", m.index, ": ",
                    final_[m.index] ? "finished" : "DEAD, data unfinished",
                    " after ", step, " steps");
    if (!final_[m.index]) absl::StrAppend(&out, " (its shard from step ", step, " on was not trained)");
    absl::StrAppend(&out, "\n");
  }
  return out;
}

absl::Status JobCoordinator::WaitDone(absl::Time deadline) {
  MutexLock lock(&mu_);
  while (state_ != State::kDone && state_ != State::kFailed) {
    if (!changed_.WaitUntil(&mu_, deadline) && state_ != State::kDone &&
        state_ != State::kFailed) {
      return absl::DeadlineExceededError("job still running");
    }
  }
  if (state_ == State::kFailed) return absl::AbortedError(absl::StrCat("job failed: ", failure_));
  return absl::OkStatus();
}

void JobCoordinator::JobStatus(JobStatusResponse* response) const {
  const absl::Time now = absl::Now();
  const std::vector<uint64_t> clocks = clock_.Clocks();
  for (const Member& m : members_.Members()) {
    MemberStatus* s = response->add_members();
    s->set_role(m.role);
    s->set_index(m.index);
    s->set_address(m.address);
    s->set_state(m.state);
    if (m.role == WORKER) s->set_clock(clocks[m.index]);
    if (m.state != STATE_UNSPECIFIED) {
      s->set_last_heartbeat_age_sec(absl::ToDoubleSeconds(now - m.last_heartbeat));
    }
  }
  response->set_job_name(config_.name());
  response->set_min_clock(clock_.MinClock().value_or(clock_.MaxClock()));
  response->set_max_clock(clock_.MaxClock());
  response->set_max_spread(clock_.MaxSpread());
  response->set_elapsed_sec(absl::ToDoubleSeconds(now - start_time_));
  MutexLock lock(&mu_);
  switch (state_) {
    case State::kWaiting: response->set_state("waiting"); break;
    case State::kRunning: response->set_state("running"); break;
    case State::kDone: response->set_state("done"); break;
    case State::kFailed: response->set_state("failed: " + failure_); break;
  }
  double sps = 0, loss = 0, train_auc = 0;
  uint64_t samples = 0;
  int n = 0;
  for (const auto& [rank, r] : reports_) {
    if (!r.done()) sps += r.samples_per_sec();
    samples += r.samples();
    loss += r.train_loss();
    train_auc += r.train_auc();
    ++n;
    if (r.final() && r.eval_examples() > 0) {
      response->set_eval_auc(r.eval_auc());
      response->set_eval_loss(r.eval_loss());
    }
  }
  response->set_samples_per_sec(sps);
  response->set_total_samples(samples);
  if (n > 0) response->set_train_loss(loss / n);
  if (n > 0) response->set_train_auc(train_auc / n);
  response->set_summary(SummaryLocked());
}

}  // namespace shardps

#include "scheduler/job.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
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

void JobCoordinator::RequestCheckpoint() {
  MutexLock lock(&mu_);
  checkpoint_requested_ = true;
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
  absl::Time last = absl::Now();
  while (!stop_) {
    absl::SleepFor(absl::Milliseconds(10));
    {
      MutexLock lock(&mu_);
      if (state_ == State::kDone || state_ == State::kFailed) return;
      const bool due = cc.every_seconds() > 0 &&
                       absl::Now() - last >= absl::Seconds(cc.every_seconds());
      if ((due || checkpoint_requested_) && !clock_.HeldClock()) {
        clock_.Hold(clock_.MaxGranted() + 1);
      }
      checkpoint_requested_ = false;
    }
    const std::optional<uint64_t> held = clock_.HeldClock();
    if (!held || !clock_.AllReachedHold()) continue;
    if (!clock_.MinClock()) {  // Every worker finished before the hold.
      clock_.Release();
      return;
    }
    std::map<uint32_t, std::string> positions;
    {
      MutexLock lock(&mu_);
      for (const auto& [rank, p] : positions_) positions[rank] = p.second;
    }
    const absl::Time start = absl::Now();
    const absl::Status st = checkpointer_(*held, positions);
    if (st.ok()) {
      LOG(INFO) << "checkpoint at clock " << *held << " written in "
                << absl::FormatDuration(absl::Now() - start) << " (workers held meanwhile)";
      MutexLock lock(&mu_);
      checkpoints_.push_back(*held);
    } else {
      LOG(ERROR) << "checkpoint at clock " << *held << " failed: " << st;
    }
    last = absl::Now();
    if (cc.every_steps() > 0) {
      clock_.Hold(*held + cc.every_steps());  // Moves the hold on (and wakes).
    } else {
      clock_.Release();
    }
  }
}

void JobCoordinator::HoldFirstCut() {
  const uint64_t k = config_.checkpoint().every_steps();
  if (!checkpointer_ || k == 0) return;
  // The first multiple of every_steps no worker has started yet.
  const uint64_t base = std::max(clock_.MaxGranted(), clock_.MinClock().value_or(0));
  clock_.Hold((base / k + 1) * k);
}

void JobCoordinator::Start() {
  // Without a resume the first cut is held here, synchronously: a fast ASP
  // worker could otherwise pass it before the checkpoint thread runs.
  if (!resume_) HoldFirstCut();
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
  auto member = members_.Register(request, absl::Now());
  if (!member.ok()) {
    LOG(WARNING) << "refused registration: " << member.status();
    return member.status();
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
    if (member->registrations > 1) clock_.Revive(member->index, resume);
  }
  if (was_dead_server && members_.DeadServers().empty()) {
    LOG(INFO) << "every server is back: resuming clocks";
    clock_.SetPaused(false);
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
  const absl::Status st = members_.Heartbeat(request.role(), request.index(), absl::Now());
  response->set_map_version(members_.MapVersion());
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
  auto min = clock_.WaitToStart(request.rank(), request.step(),
                                absl::Now() + Ms(request.timeout_ms()));
  if (!min.ok()) return min.status();
  response->set_min_clock(*min);
  return absl::OkStatus();
}

absl::Status JobCoordinator::Tick(const TickRequest& request, TickResponse* response) {
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
  }
  bool any_final = false, all_over = true;
  const std::vector<Member> members = members_.Members();
  for (const Member& m : members) {
    if (m.role != WORKER) continue;
    if (final_[m.index]) any_final = true;
    else if (m.state != DEAD) all_over = false;
  }
  if (all_over && any_final) {
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

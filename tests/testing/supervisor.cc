#include "tests/testing/supervisor.h"

#include <signal.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "tests/testing/netbox.h"

namespace shardps::testing {

Supervisor::Supervisor(Options options) : options_(options) {
  monitor_ = std::thread([this] { Monitor(); });
}

Supervisor::~Supervisor() {
  StopAll();
  stop_ = true;
  monitor_.join();
}

absl::Status Supervisor::StartLocked(Entry* e) {
  e->process = std::make_unique<Subprocess>();
  return e->process->Start(
      e->spec.netns.empty() ? e->spec.argv : InNetns(e->spec.netns, e->spec.argv),
      e->spec.log_path);
}

absl::StatusOr<int> Supervisor::Add(Spec spec) {
  MutexLock lock(&mu_);
  auto e = std::make_unique<Entry>();
  e->spec = std::move(spec);
  absl::Status st = StartLocked(e.get());
  if (!st.ok()) return st;
  entries_.push_back(std::move(e));
  return static_cast<int>(entries_.size() - 1);
}

void Supervisor::Signal(int id, int sig) {
  MutexLock lock(&mu_);
  Entry& e = *entries_[id];
  if (e.process && !e.process->Poll()) e.process->Signal(sig);
}

void Supervisor::SetNextRestartDelay(int id, absl::Duration delay) {
  MutexLock lock(&mu_);
  entries_[id]->next_delay = delay;
}

void Supervisor::KeepDown(int id) {
  MutexLock lock(&mu_);
  Entry& e = *entries_[id];
  e.keep_down = true;
  if (!e.process && !e.final) {  // Waiting for a restart: down for good now.
    e.final = true;
    changed_.SignalAll();
  }
}

absl::Status Supervisor::Restart(int id, std::vector<std::string> argv) {
  MutexLock lock(&mu_);
  Entry& e = *entries_[id];
  if (stopped_ || !e.final) {
    return absl::FailedPreconditionError(
        absl::StrCat(e.spec.name, stopped_ ? ": the supervisor stopped" : " is not down for good"));
  }
  if (!argv.empty()) e.spec.argv = std::move(argv);
  e.final = false;
  e.last_code = -1;
  e.next_delay.reset();
  absl::Status st = StartLocked(&e);
  if (!st.ok()) {
    e.process.reset();
    e.final = true;
  }
  changed_.SignalAll();
  return st;
}

pid_t Supervisor::Pid(int id) const {
  MutexLock lock(&mu_);
  const Entry& e = *entries_[id];
  return e.process ? e.process->pid() : -1;
}

int Supervisor::Restarts(int id) const {
  MutexLock lock(&mu_);
  return entries_[id]->restarts;
}

std::string Supervisor::Output(int id) const {
  MutexLock lock(&mu_);
  const Entry& e = *entries_[id];
  return e.output + (e.process ? e.process->output() : "");
}

absl::StatusOr<int> Supervisor::WaitFinal(int id, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  MutexLock lock(&mu_);
  while (!entries_[id]->final) {
    if (!changed_.WaitUntil(&mu_, deadline) && !entries_[id]->final) {
      return absl::DeadlineExceededError(
          absl::StrCat(entries_[id]->spec.name, " still runs (or waits for a restart)"));
    }
  }
  return entries_[id]->last_code;
}

void Supervisor::StopAll() {
  MutexLock lock(&mu_);
  stopped_ = true;
  for (auto& e : entries_) {
    if (!e->process) continue;
    if (!e->process->Poll()) e->process->Signal(SIGKILL);
    (void)e->process->Wait(absl::Seconds(10));
    e->final = true;
  }
  changed_.SignalAll();
}

void Supervisor::Monitor() {
  while (!stop_) {
    absl::SleepFor(absl::Milliseconds(20));
    MutexLock lock(&mu_);
    if (stopped_) continue;
    const absl::Time now = absl::Now();
    for (auto& e : entries_) {
      if (e->final) continue;
      if (e->process) {
        const std::optional<int> code = e->process->Poll();
        if (!code) continue;
        e->last_code = *code;
        e->output += e->process->output();
        e->process.reset();
        if (e->spec.final_codes.count(*code) || e->restarts >= options_.max_restarts ||
            e->keep_down) {
          e->final = true;
          changed_.SignalAll();
          continue;
        }
        e->restart_at = now + e->next_delay.value_or(options_.restart_delay);
        e->next_delay.reset();
      } else if (now >= e->restart_at) {
        ++e->restarts;
        if (!StartLocked(e.get()).ok()) e->final = true;
        changed_.SignalAll();
      }
    }
  }
}

}  // namespace shardps::testing

// Supervisor: what Kubernetes, Slurm or a systemd unit do for a job's
// processes, for the fault tests: it starts each process and, when one dies
// (a signal, or an exit status its spec does not call final), starts it
// again with exactly the same argv after `restart_delay`, up to
// `max_restarts` times. It never changes a flag: recovery is the
// scheduler's business, as on a cluster.
//
// Every incarnation's stdout is kept (Output) and its stderr appended to the
// spec's log file. A spec may name a network namespace to run in (a host of
// tests/testing/netbox.h). Thread-safe; one monitor thread polls the children every
// 20 ms. The destructor SIGKILLs whatever still runs.
#ifndef SHARDPS_TESTS_TESTING_SUPERVISOR_H_
#define SHARDPS_TESTS_TESTING_SUPERVISOR_H_

#include <sys/types.h>

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "tests/testing/subprocess.h"

namespace shardps::testing {

class Supervisor {
 public:
  struct Options {
    int max_restarts = 5;  // Per process.
    absl::Duration restart_delay = absl::Seconds(1);
  };
  struct Spec {
    std::string name;  // For messages, e.g. "server-1".
    std::vector<std::string> argv;
    std::string log_path;  // stderr of every incarnation, appended.
    // Exit statuses after which the process stays down (the job ended for
    // it). {0} for servers and workers; {0, 1, 2} for the scheduler (done,
    // failed, bad flags).
    std::set<int> final_codes = {0};
    // If set, every incarnation runs inside this network namespace (a host
    // of a NetBox, tests/testing/netbox.h: `ip netns exec`, which execs, so
    // Pid() is the program's own).
    std::string netns;
  };

  explicit Supervisor(Options options);
  ~Supervisor();
  Supervisor(const Supervisor&) = delete;
  Supervisor& operator=(const Supervisor&) = delete;

  // Starts the process now; returns its id.
  absl::StatusOr<int> Add(Spec spec);
  // Sends `sig` to the current incarnation (a no-op if it is down).
  void Signal(int id, int sig);
  // The next restart of `id` waits `delay` instead of Options::restart_delay
  // (once: later restarts wait the usual delay). Set it before the kill.
  void SetNextRestartDelay(int id, absl::Duration delay);
  // `id` is not started again: its next death (or a restart it waits for)
  // is final, whatever its exit status (a worker that never comes back).
  void KeepDown(int id);
  // Starts `id` again now, once it is down for good (WaitFinal answered):
  // with `argv` instead of its spec's if not empty (kept for its later
  // restarts), its log, output and restart count carried on. A test's own
  // restart, e.g. with max_restarts = 0 (nothing restarts by itself) or a
  // scheduler started again with other flags. FAILED_PRECONDITION if it
  // still runs or waits for a restart, or after StopAll.
  absl::Status Restart(int id, std::vector<std::string> argv = {});
  pid_t Pid(int id) const;
  int Restarts(int id) const;
  // Waits until the process is down for good (a final exit status, or it
  // died with no restart left); returns the last exit status (128 + signal
  // for a signal death), or DEADLINE_EXCEEDED.
  absl::StatusOr<int> WaitFinal(int id, absl::Duration timeout);
  // Every incarnation's stdout so far.
  std::string Output(int id) const;
  // SIGKILLs every process and stops restarting.
  void StopAll();

 private:
  struct Entry {
    Spec spec;
    std::unique_ptr<Subprocess> process;  // Null while waiting for a restart.
    std::string output;                   // Of finished incarnations.
    int restarts = 0;
    bool final = false;
    int last_code = -1;
    absl::Time restart_at;
    std::optional<absl::Duration> next_delay;  // SetNextRestartDelay.
    bool keep_down = false;                    // KeepDown.
  };
  void Monitor();
  absl::Status StartLocked(Entry* e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const Options options_;
  mutable Mutex mu_;
  CondVar changed_;
  std::vector<std::unique_ptr<Entry>> entries_ ABSL_GUARDED_BY(mu_);
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  std::atomic<bool> stop_{false};
  std::thread monitor_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_SUPERVISOR_H_

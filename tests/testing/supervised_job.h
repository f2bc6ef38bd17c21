// SupervisedJob: one job of the bare binaries as a cluster runs it: one
// ps_scheduler, N ps_server and M ps_worker, each kept up by a Supervisor
// (tests/testing/supervisor.h) that starts whatever dies again with exactly
// the same flags, on fixed addresses so that a restarted process comes back
// where it was (as a StatefulSet pod does) and finds the scheduler again.
//
// Placement:
//   - no box: everything on 127.0.0.1, on free ports below the ephemeral
//     range (no other test's outgoing connection takes one while its
//     process is down);
//   - on a NetBox (tests/testing/netbox.h): the scheduler on host 0 at
//     Ip(0):7000, server i on host 1 + i at Ip:7001 (--listen and
//     --advertise), worker r on host 1 + N + r unless Options::worker_host
//     moves it (e.g. onto a server's host: a node holding both). The box
//     needs 1 + N + M hosts and must outlive the job.
//
// The job's directory is TestDir(name): job.pbtxt, <role>-<i>.log (stderr of
// every incarnation) and ckpt/. Finish() reads the outcome the way the fault
// tests compare runs: the scheduler's exit status and PS_JOB_RESULT, and the
// XOR of each server's last weights_checksum (the job's weights fingerprint,
// bit-identical across BSP runs that lost nothing).
//
// With Supervisor::Options::max_restarts = 0 nothing restarts by itself:
// the test kills and starts again what it means to (RestartScheduler, e.g.
// with --recover; sup().Restart for a server or worker), and reads the
// parts of the outcome it asserts on (WaitScheduler, SchedulerResult,
// WaitWorkers, WaitServersChecksum).
//
// Not thread-safe (the Supervisor inside is). Start-up failures come back
// from Start(); Finish() reports missing results as test failures.
#ifndef SHARDPS_TESTS_TESTING_SUPERVISED_JOB_H_
#define SHARDPS_TESTS_TESTING_SUPERVISED_JOB_H_

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"
#include "tests/testing/netbox.h"
#include "tests/testing/supervisor.h"

namespace shardps::testing {

// The clock of the newest checkpoint under `root` with a MANIFEST (0 if
// none), and whether a newer one is being written (its directory without
// MANIFEST).
struct CheckpointState {
  uint64_t complete = 0;
  bool writing = false;
};
CheckpointState Checkpoints(const std::string& root);

struct JobOutcome {
  int code = -1;                              // The scheduler's last exit status.
  std::string result;                         // The PS_JOB_RESULT line ("" if none).
  std::map<std::string, std::string> fields;  // Its key=value pairs.
  uint64_t checksum = 0;                      // XOR of the servers' last weights checksums.
  double auc = 0;                             // eval_auc.
  int recoveries = 0;
};

class SupervisedJob {
 public:
  struct Options {
    std::string name;    // Of the job's directory, TestDir(name).
    std::string config;  // Job config text; "@CKPT@" becomes <dir>/ckpt.
    int servers = 2;
    int workers = 2;
    std::vector<std::string> scheduler_flags;
    std::vector<std::string> server_flags;               // Every server.
    std::vector<std::string> worker_flags;               // Every worker.
    std::map<int, std::vector<std::string>> per_worker;  // Rank -> more flags.
    std::map<int, int> worker_host;                      // Rank -> box host (box only).
    Supervisor::Options supervisor;
    NetBox* box = nullptr;
    // Every process (and JobStatus's ps_status) gets --job_secret_file, a
    // new secret in the job's directory, as a deployed job's processes do.
    bool job_secret = true;
    // false: no scheduler; the servers run alone (no --scheduler) for a
    // test that plays the scheduler itself, and there are no workers. The
    // scheduler's methods (WaitScheduler, SchedulerResult, ...) then answer
    // FAILED_PRECONDITION or nothing.
    bool scheduler = true;
  };

  explicit SupervisedJob(Options options);
  SupervisedJob(const SupervisedJob&) = delete;
  SupervisedJob& operator=(const SupervisedJob&) = delete;

  // Writes the config and starts every process under the supervisor.
  absl::Status Start();

  Supervisor& sup() { return *sup_; }
  int scheduler() const { return scheduler_; }
  int server(int i) const { return servers_[i]; }
  int worker(int r) const { return workers_[r]; }
  // Box hosts (meaningful with a box).
  int scheduler_host() const { return 0; }
  int server_host(int i) const { return 1 + i; }
  int worker_host(int r) const;

  const std::string& address() const { return address_; }  // The scheduler's.
  const std::string& server_address(int i) const { return server_addresses_[i]; }
  const std::string& dir() const { return dir_; }
  const std::string& ckpt() const { return ckpt_; }
  std::string config_path() const { return dir_ + "/job.pbtxt"; }
  // Whether the scheduler is down for good (the job ended).
  bool Ended();
  // Waits until the scheduler and every server printed its LISTENING line
  // (they serve); FAILED_PRECONDITION naming the first that ended before,
  // DEADLINE_EXCEEDED after `timeout`.
  absl::Status WaitListening(absl::Duration timeout);

  // The scheduler's JobStatus: over gRPC on loopback; on a box, from
  // `ps_status --json` run inside the scheduler's host (the test process
  // stays in the root namespace, which has no route into the box).
  absl::StatusOr<JobStatusResponse> JobStatus() const;
  // Polls JobStatus (every 50 ms on loopback, 250 ms on a box; answers
  // missing while the scheduler is down or cut off are skipped) until
  // `condition` holds, and returns that status. FAILED_PRECONDITION if the
  // job ended first, DEADLINE_EXCEEDED after `timeout`; both name `what`
  // and the last status seen. Faults are placed with it, by the job's
  // progress, never by time.
  absl::StatusOr<JobStatusResponse> WaitFor(
      const std::string& what, const std::function<bool(const JobStatusResponse&)>& condition,
      absl::Duration timeout) const;
  // WaitFor every live worker to have completed `clock` steps while the job
  // runs, within `timeout`; the status names the clock.
  absl::StatusOr<JobStatusResponse> WaitForClock(uint64_t clock,
                                                 absl::Duration timeout = absl::Minutes(3)) const;
  // As WaitForClock, for a test: false after a test failure naming the
  // clock, the last status seen and every process's log tail.
  bool ExpectClock(uint64_t clock) const;

  // Starts the scheduler again, once it is down for good, on its address
  // with `flags` instead of Options::scheduler_flags (e.g. --recover).
  absl::Status RestartScheduler(const std::vector<std::string>& flags);
  // Waits until the scheduler is down for good; its last exit status.
  absl::StatusOr<int> WaitScheduler(absl::Duration timeout);
  // The scheduler's last PS_JOB_RESULT line ("" if none so far).
  std::string SchedulerResult() const;
  // Waits for every worker to end (its last incarnation's exit); returns
  // their last PS_WORKER_RESULT lines parsed, by rank. NOT_FOUND naming the
  // ranks (and their log tails) that printed no result within `timeout` or
  // did not exit 0; every worker is waited for (each up to 30 s more to
  // exit once it printed its result).
  absl::StatusOr<std::map<int, std::map<std::string, std::string>>> WaitWorkers(
      absl::Duration timeout);
  // Waits for every server to end; returns the XOR of their last weights
  // checksums (the job's weights fingerprint). NOT_FOUND if one printed none.
  absl::StatusOr<uint64_t> WaitServersChecksum(absl::Duration timeout);
  // SIGKILLs every process; nothing is started again after.
  void KillAll() { sup_->StopAll(); }

  // The last `lines` lines of <dir>/<name>.log (e.g. "worker-1"), and of
  // every process's log, for failure messages.
  std::string LogTail(const std::string& name, int lines = 30) const;
  std::string Logs(int lines = 25) const;
  std::string SchedulerLog() const;

  // Waits up to `timeout` for the scheduler's end, then for the servers and
  // workers, and reads the outcome. `trained`: the job must have ended with
  // its results (eval_auc, recoveries, each server's checksum); a missing
  // one is a test failure rather than a 0.
  JobOutcome Finish(absl::Duration timeout, bool trained = true);

 private:
  std::string Host(int host) const;  // The box host's IP, or 127.0.0.1.
  std::string Netns(int host) const;
  int Add(Supervisor::Spec spec, absl::Status* status);
  // Server i's last weights_checksum (each incarnation that ends cleanly
  // prints one at exit; a SIGKILLed one prints none).
  std::optional<uint64_t> LastChecksum(int i) const;

  const Options o_;
  const std::string dir_, ckpt_;
  std::unique_ptr<Supervisor> sup_;
  std::string address_;
  std::vector<std::string> scheduler_argv_;  // Without Options::scheduler_flags.
  std::vector<std::string> member_flags_;    // --job_secret_file, if Options::job_secret.
  std::vector<std::string> server_addresses_;
  int scheduler_ = -1;
  std::vector<int> servers_;
  std::vector<int> workers_;
};

// Options of a job on loopback that the test runs by hand, as one started
// without a supervisor: nothing restarts by itself (max_restarts 0) and no
// job secret; `worker_flags` go to every worker.
SupervisedJob::Options ManualJob(std::string name, std::string config, int servers, int workers,
                                 std::vector<std::string> worker_flags = {});

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_SUPERVISED_JOB_H_

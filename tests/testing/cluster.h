// LocalCluster: a whole job of real processes for integration tests: one
// ps_scheduler, N ps_server and M ps_worker on 127.0.0.1 with free ports.
// The helpers around it (synthetic data, results, WaitForJob) are in
// job_util.h.
//
// Every process's stderr goes to <dir>/<role>-<index>.log (appended, so a
// restarted process adds to its log); the test's failure messages quote the
// tails. Not thread-safe.
#ifndef SHARDPS_TESTS_TESTING_CLUSTER_H_
#define SHARDPS_TESTS_TESTING_CLUSTER_H_

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"

namespace shardps::testing {

class LocalCluster {
 public:
  struct Options {
    std::string config_path;  // Every process loads it.
    std::string dir;          // Logs.
    int servers = 1;
    int workers = 1;
    std::vector<std::string> worker_flags;               // Every worker.
    std::map<int, std::vector<std::string>> per_worker;  // By rank.
    std::vector<std::string> scheduler_flags;            // E.g. --resume.
    std::vector<std::string> all_flags;                  // Every process, e.g. --tls_cert=...
  };

  explicit LocalCluster(Options options) : o_(std::move(options)) {}
  ~LocalCluster() = default;

  // Starts the scheduler, then servers and workers.
  absl::Status Start();
  // Starts a new scheduler on the old one's address (after it died), with
  // `flags` (e.g. --recover) instead of Options::scheduler_flags.
  absl::Status RestartScheduler(const std::vector<std::string>& flags);
  // Starts worker `rank` / server `index` again (after it died), with its
  // usual flags (a new port for the server).
  absl::Status RestartWorker(int rank);
  absl::Status RestartServer(int index);
  // Waits for the scheduler to exit; returns its exit code.
  absl::StatusOr<int> WaitScheduler(absl::Duration timeout);
  // Waits for every worker to print its PS_WORKER_RESULT line and exit;
  // returns the lines by rank, one for every worker. NOT_FOUND naming the
  // ranks (and their log tails) if a worker printed no result within
  // `timeout` or did not exit 0; every worker is still waited for (each up
  // to 30 s more to exit).
  absl::StatusOr<std::map<int, std::map<std::string, std::string>>> WaitWorkers(
      absl::Duration timeout);
  // WaitForJob on this cluster's scheduler.
  absl::StatusOr<JobStatusResponse> WaitForJob(
      const std::string& what, const std::function<bool(const JobStatusResponse&)>& condition,
      absl::Duration timeout) const;

  Subprocess& scheduler() { return *scheduler_; }
  Subprocess& server(int i) { return *servers_[i]; }
  Subprocess& worker(int i) { return *workers_[i]; }
  const std::string& scheduler_address() const { return scheduler_address_; }
  std::string SchedulerResult() const;
  // Waits for every server to exit; returns the XOR of their
  // PS_SERVER_RESULT weights checksums (the job's weights fingerprint).
  absl::StatusOr<uint64_t> WaitServersChecksum(absl::Duration timeout);
  // SIGKILLs every process still running.
  void KillAll();
  // The last lines of a process's log, for failure messages.
  std::string LogTail(const std::string& name, int lines = 30) const;
  std::string AllLogTails() const;

 private:
  absl::Status StartScheduler(const std::vector<std::string>& flags);
  absl::Status StartWorker(int rank);
  absl::Status StartServer(int index);

  Options o_;
  std::unique_ptr<Subprocess> scheduler_;
  std::vector<std::unique_ptr<Subprocess>> servers_;
  std::vector<std::unique_ptr<Subprocess>> workers_;
  std::string scheduler_address_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_CLUSTER_H_

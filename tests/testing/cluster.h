// LocalCluster: a whole job of real processes for integration tests: one
// ps_scheduler, N ps_server and M ps_worker on 127.0.0.1 with free ports,
// plus helpers to make synthetic data and to run local mode.
//
// Every process's stderr goes to <dir>/<role>-<index>.log (appended, so a
// restarted process adds to its log); the test's failure messages quote the
// tails. Not thread-safe.
//
// Faults are gated on the job's progress, never on time: WaitForJob polls
// the scheduler's JobStatus until a condition on it holds (e.g. a worker's
// clock reached the step a kill is planned at), and says so when the job
// ended first, so that a test whose job is too short fails by name instead
// of passing without its fault.
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
#include "tests/testing/subprocess.h"

namespace shardps::testing {

// The tables and model of a small DLRM job as job config text: a sparse
// "categorical" table (dim 8, Adagrad) and the dense "mlp" table the model
// sizes (Adam). A test appends name, data, training, cluster, checkpoint.
inline constexpr char kSmallDlrmTables[] = R"pb(
tables {
  id: 1 name: "categorical" kind: SPARSE dim: 8 seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { adagrad { learning_rate: 0.05 } }
}
tables {
  id: 2 name: "mlp" kind: DENSE seed: 18 init { kind: MODEL }
  optimizer { adam { learning_rate: 0.002 } }
}
model { kind: DLRM bottom_mlp: [16, 8] top_mlp: [16] dense_table: "mlp" }
)pb";

// kSmallDlrmTables with other optimizers, MLP widths or sparse-table
// settings; the defaults give kSmallDlrmTables itself.
struct SmallDlrm {
  std::string sparse_optimizer = "adagrad { learning_rate: 0.05 }";  // "categorical"'s.
  std::string sparse_extra;  // More "categorical" fields, e.g. "admission { min_count: 2 }".
  std::string dense_optimizer = "adam { learning_rate: 0.002 }";  // "mlp"'s.
  std::string bottom_mlp = "16, 8";
  std::string top_mlp = "16";
};
std::string SmallDlrmTables(const SmallDlrm& options);

// The tables of the end-to-end jobs (e2e_test, tls_test): kSmallDlrmTables
// with row-wise Adagrad embeddings (lr 0.05), Adagrad MLPs (lr 0.02) and
// wider MLPs (bottom 32, 8; top 32).
std::string WideSmallDlrmTables();

// Writes a synthetic data set (ps_datagen) to `dir` unless one is there.
absl::Status MakeSyntheticData(const std::string& dir, uint64_t train_lines, uint64_t eval_lines,
                               int train_shards = 1);

// <TEST_TMPDIR>/<name>, created if missing.
std::string TestDir(const std::string& name);

// The whole file, or "" if it cannot be read.
std::string ReadFile(const std::string& path);

// "key=value" pairs of a PS_*_RESULT line.
std::map<std::string, std::string> ParseResult(const std::string& line);

// Runs ps_worker --local on `config_path`; returns its PS_WORKER_RESULT.
absl::StatusOr<std::map<std::string, std::string>> RunLocal(
    const std::string& config_path, const std::vector<std::string>& extra_flags,
    const std::string& log_path);

// Polls the JobStatus of the scheduler at `address` (every 20 ms; answers
// UNAVAILABLE while it is down or restarting are skipped) until
// `condition(status)` holds, and returns that status. FAILED_PRECONDITION
// if the job ended (done or failed) before the condition held,
// DEADLINE_EXCEEDED after `timeout`; both name `what` (what the caller
// waited for) and the last status seen.
absl::StatusOr<JobStatusResponse> WaitForJob(
    const std::string& address, const std::string& what,
    const std::function<bool(const JobStatusResponse&)>& condition, absl::Duration timeout);

// Worker `rank`'s completed clock in `status` (0 if it is not listed).
uint64_t WorkerClock(const JobStatusResponse& status, uint32_t rank);

// "state=running min_clock=5 max_clock=7 generation=1 worker 0: alive clock 7 ...",
// for failure messages.
std::string Describe(const JobStatusResponse& status);

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

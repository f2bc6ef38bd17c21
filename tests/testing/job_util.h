// What process tests share besides the job fixture (SupervisedJob,
// supervised_job.h): the small DLRM job config (kSmallDlrmTables, the one
// copy C++ and Python tests use), synthetic data, the test's directory,
// results lines, local-mode runs, and waiting on the scheduler's JobStatus.
//
// Faults are gated on the job's progress, never on time: WaitForJob polls
// the scheduler's JobStatus until a condition on it holds (e.g. a worker's
// clock reached the step a kill is planned at), and says so when the job
// ended first, so that a test whose job is too short fails by name instead
// of passing without its fault.
#ifndef SHARDPS_TESTS_TESTING_JOB_UTIL_H_
#define SHARDPS_TESTS_TESTING_JOB_UTIL_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.pb.h"

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
// The same with the JobStatus read by `read` (e.g. ps_status inside a
// NetBox host), every `poll`.
absl::StatusOr<JobStatusResponse> WaitForJobStatus(
    const std::function<absl::StatusOr<JobStatusResponse>()>& read, const std::string& what,
    const std::function<bool(const JobStatusResponse&)>& condition, absl::Duration timeout,
    absl::Duration poll);

// Worker `rank`'s completed clock in `status` (0 if it is not listed).
uint64_t WorkerClock(const JobStatusResponse& status, uint32_t rank);

// "state=running min_clock=5 max_clock=7 generation=1 worker 0: alive clock 7 ...",
// for failure messages.
std::string Describe(const JobStatusResponse& status);

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_JOB_UTIL_H_

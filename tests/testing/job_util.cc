#include "tests/testing/job_util.h"

#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace shardps::testing {

std::string SmallDlrmTables(const SmallDlrm& o) {
  // Each default is text of kSmallDlrmTables, the one copy of the tables:
  // found in it, then replaced from the last to the first.
  const SmallDlrm d;
  const std::string text = kSmallDlrmTables;
  const std::pair<std::string, std::string> edits[] = {
      {"init { kind: UNIFORM scale: 0.05 }",
       "init { kind: UNIFORM scale: 0.05 }" +
           (o.sparse_extra.empty() ? "" : "\n  " + o.sparse_extra)},
      {"optimizer { " + d.sparse_optimizer + " }", "optimizer { " + o.sparse_optimizer + " }"},
      {"optimizer { " + d.dense_optimizer + " }", "optimizer { " + o.dense_optimizer + " }"},
      {"bottom_mlp: [" + d.bottom_mlp + "] top_mlp: [" + d.top_mlp + "]",
       "bottom_mlp: [" + o.bottom_mlp + "] top_mlp: [" + o.top_mlp + "]"},
  };
  std::map<size_t, const std::pair<std::string, std::string>*> at;
  for (const auto& edit : edits) {
    const size_t pos = text.find(edit.first);
    EXPECT_NE(pos, std::string::npos) << "\"" << edit.first << "\" is not in kSmallDlrmTables";
    if (pos != std::string::npos) at[pos] = &edit;
  }
  std::string out = text;
  for (auto it = at.rbegin(); it != at.rend(); ++it) {
    out.replace(it->first, it->second->first.size(), it->second->second);
  }
  return out;
}

std::string WideSmallDlrmTables() {
  SmallDlrm t;
  t.sparse_optimizer = "rowwise_adagrad { learning_rate: 0.05 }";
  t.dense_optimizer = "adagrad { learning_rate: 0.02 }";
  t.bottom_mlp = "32, 8";
  t.top_mlp = "32";
  return SmallDlrmTables(t);
}

absl::Status MakeSyntheticData(const std::string& dir, uint64_t train_lines, uint64_t eval_lines,
                               int train_shards) {
  struct stat st;
  if (stat((dir + "/best.txt").c_str(), &st) == 0) return absl::OkStatus();
  Subprocess gen;
  absl::Status s = gen.Start({RunfilePath("worker/data/ps_datagen"), "--out_dir=" + dir,
                              absl::StrCat("--train_lines=", train_lines),
                              absl::StrCat("--eval_lines=", eval_lines),
                              absl::StrCat("--train_shards=", train_shards)});
  if (!s.ok()) return s;
  auto code = gen.Wait(absl::Minutes(5));
  if (!code.ok()) return code.status();
  if (*code != 0) return absl::InternalError(absl::StrCat("ps_datagen exited ", *code));
  return absl::OkStatus();
}

std::string TestDir(const std::string& name) {
  const std::string dir = ::testing::TempDir() + "/" + name;
  mkdir(dir.c_str(), 0755);
  return dir;
}

std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

std::map<std::string, std::string> ParseResult(const std::string& line) {
  std::map<std::string, std::string> out;
  for (absl::string_view part : absl::StrSplit(line, ' ', absl::SkipEmpty())) {
    const size_t eq = part.find('=');
    if (eq != absl::string_view::npos) {
      out[std::string(part.substr(0, eq))] = std::string(part.substr(eq + 1));
    }
  }
  return out;
}

absl::StatusOr<std::map<std::string, std::string>> RunLocal(
    const std::string& config_path, const std::vector<std::string>& extra_flags,
    const std::string& log_path) {
  Subprocess worker;
  std::vector<std::string> argv = {RunfilePath("worker/ps_worker"), "--config=" + config_path,
                                   "--local"};
  argv.insert(argv.end(), extra_flags.begin(), extra_flags.end());
  absl::Status s = worker.Start(argv, log_path);
  if (!s.ok()) return s;
  auto line = worker.WaitForLine("PS_WORKER_RESULT ", absl::Minutes(20));
  if (!line.ok()) return line.status();
  auto code = worker.Wait(absl::Minutes(1));
  if (!code.ok() || *code != 0) return absl::InternalError("local worker failed");
  return ParseResult(*line);
}

uint64_t WorkerClock(const JobStatusResponse& status, uint32_t rank) {
  for (const MemberStatus& m : status.members()) {
    if (m.role() == WORKER && m.index() == rank) return m.clock();
  }
  return 0;
}

std::string Describe(const JobStatusResponse& status) {
  std::string out =
      absl::StrCat("state=", status.state(), " min_clock=", status.min_clock(),
                   " max_clock=", status.max_clock(), " generation=", status.generation());
  for (const MemberStatus& m : status.members()) {
    absl::StrAppend(&out, "; ", m.role() == WORKER ? "worker " : "server ", m.index(), ": ",
                    MemberState_Name(m.state()));
    if (m.role() == WORKER) absl::StrAppend(&out, " clock ", m.clock());
  }
  for (const RecoveryReport& r : status.recoveries()) {
    absl::StrAppend(&out, "; recovery ", r.kind(), " to generation ", r.generation(),
                    r.complete() ? " (complete)" : " (running)");
  }
  return out;
}

absl::StatusOr<JobStatusResponse> WaitForJob(
    const std::string& address, const std::string& what,
    const std::function<bool(const JobStatusResponse&)>& condition, absl::Duration timeout) {
  SchedulerClient client(address);
  return WaitForJobStatus([&client] { return client.JobStatus(); }, what, condition, timeout,
                          absl::Milliseconds(20));
}

absl::StatusOr<JobStatusResponse> WaitForJobStatus(
    const std::function<absl::StatusOr<JobStatusResponse>()>& read, const std::string& what,
    const std::function<bool(const JobStatusResponse&)>& condition, absl::Duration timeout,
    absl::Duration poll) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no answer from the scheduler";
  while (true) {
    auto status = read();
    if (status.ok()) {
      if (condition(*status)) return *status;
      last = Describe(*status);
      if (status->state() == "done" || absl::StartsWith(status->state(), "failed")) {
        return absl::FailedPreconditionError(
            absl::StrCat("the job ended before ", what, ": ", last));
      }
    } else if (!absl::IsUnavailable(status.status()) &&
               !absl::IsDeadlineExceeded(status.status())) {
      last = status.status().ToString();
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(timeout),
                                                      " for ", what, "; last status: ", last));
    }
    absl::SleepFor(poll);  // Polls; bounded by `deadline`.
  }
}

}  // namespace shardps::testing

#include "tests/testing/cluster.h"

#include <signal.h>
#include <sys/stat.h>

#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "gtest/gtest.h"

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

absl::Status LocalCluster::StartScheduler(const std::vector<std::string>& flags) {
  scheduler_ = std::make_unique<Subprocess>();
  std::vector<std::string> argv = {RunfilePath("scheduler/ps_scheduler"),
                                   "--config=" + o_.config_path};
  if (!scheduler_address_.empty()) argv.push_back("--listen=" + scheduler_address_);
  argv.insert(argv.end(), flags.begin(), flags.end());
  argv.insert(argv.end(), o_.all_flags.begin(), o_.all_flags.end());
  absl::Status s = scheduler_->Start(argv, o_.dir + "/scheduler.log");
  if (!s.ok()) return s;
  auto address = scheduler_->WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
  if (!address.ok()) return address.status();
  scheduler_address_ = *address;
  return absl::OkStatus();
}

absl::Status LocalCluster::RestartScheduler(const std::vector<std::string>& flags) {
  return StartScheduler(flags);
}

absl::Status LocalCluster::RestartWorker(int rank) { return StartWorker(rank); }

absl::Status LocalCluster::RestartServer(int index) { return StartServer(index); }

absl::Status LocalCluster::StartServer(int index) {
  servers_[index] = std::make_unique<Subprocess>();
  std::vector<std::string> argv = {RunfilePath("server/ps_server"), "--config=" + o_.config_path,
                                   "--scheduler=" + scheduler_address_,
                                   absl::StrCat("--index=", index)};
  argv.insert(argv.end(), o_.all_flags.begin(), o_.all_flags.end());
  return servers_[index]->Start(argv, absl::StrCat(o_.dir, "/server-", index, ".log"));
}

absl::Status LocalCluster::Start() {
  absl::Status s = StartScheduler(o_.scheduler_flags);
  if (!s.ok()) return s;
  for (int i = 0; i < o_.servers; ++i) {
    servers_.push_back(nullptr);
    s = StartServer(i);
    if (!s.ok()) return s;
  }
  for (int r = 0; r < o_.workers; ++r) {
    workers_.push_back(nullptr);
    s = StartWorker(r);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status LocalCluster::StartWorker(int rank) {
  workers_[rank] = std::make_unique<Subprocess>();
  std::vector<std::string> argv = {RunfilePath("worker/ps_worker"), "--config=" + o_.config_path,
                                   "--scheduler=" + scheduler_address_,
                                   absl::StrCat("--rank=", rank)};
  argv.insert(argv.end(), o_.all_flags.begin(), o_.all_flags.end());
  argv.insert(argv.end(), o_.worker_flags.begin(), o_.worker_flags.end());
  auto it = o_.per_worker.find(rank);
  if (it != o_.per_worker.end()) argv.insert(argv.end(), it->second.begin(), it->second.end());
  return workers_[rank]->Start(argv, absl::StrCat(o_.dir, "/worker-", rank, ".log"));
}

absl::StatusOr<int> LocalCluster::WaitScheduler(absl::Duration timeout) {
  return scheduler_->Wait(timeout);
}

absl::StatusOr<std::map<int, std::map<std::string, std::string>>> LocalCluster::WaitWorkers(
    absl::Duration timeout) {
  std::map<int, std::map<std::string, std::string>> results;
  std::string missing;
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < static_cast<int>(workers_.size()); ++r) {
    auto line = workers_[r]->WaitForLine("PS_WORKER_RESULT ", deadline - absl::Now());
    auto code = workers_[r]->Wait(absl::Seconds(30));
    // Wait read what was left on stdout: the line may have come late.
    if (!line.ok()) line = workers_[r]->WaitForLine("PS_WORKER_RESULT ", absl::ZeroDuration());
    if (line.ok()) results[r] = ParseResult(*line);
    if (!line.ok()) {
      absl::StrAppend(&missing, "worker ", r,
                      " printed no PS_WORKER_RESULT: ", line.status().message(), "\n",
                      LogTail(absl::StrCat("worker-", r), 15));
    } else if (!code.ok() || *code != 0) {
      absl::StrAppend(&missing, "worker ", r, " did not exit 0: ",
                      code.ok() ? absl::StrCat("exit status ", *code) : code.status().ToString(),
                      "\n", LogTail(absl::StrCat("worker-", r), 15));
    }
  }
  if (!missing.empty()) return absl::NotFoundError(missing);
  return results;
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
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no answer from the scheduler";
  while (true) {
    auto status = client.JobStatus();
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
    absl::SleepFor(absl::Milliseconds(20));  // Polls; bounded by `deadline`.
  }
}

absl::StatusOr<JobStatusResponse> LocalCluster::WaitForJob(
    const std::string& what, const std::function<bool(const JobStatusResponse&)>& condition,
    absl::Duration timeout) const {
  return testing::WaitForJob(scheduler_address_, what, condition, timeout);
}

absl::StatusOr<uint64_t> LocalCluster::WaitServersChecksum(absl::Duration timeout) {
  uint64_t h = 0;
  for (auto& server : servers_) {
    auto code = server->Wait(timeout);
    if (!code.ok()) return code.status();
    const std::string& out = server->output();
    const size_t at = out.find("weights_checksum=");
    if (at == std::string::npos) return absl::NotFoundError("a server printed no checksum");
    h ^= std::stoull(out.substr(at + 17, 16), nullptr, 16);
  }
  return h;
}

void LocalCluster::KillAll() {
  for (auto& w : workers_)
    if (w) w->Signal(SIGKILL);
  for (auto& s : servers_) s->Signal(SIGKILL);
  if (scheduler_) scheduler_->Signal(SIGKILL);
  for (auto& w : workers_)
    if (w) (void)w->Wait(absl::Seconds(10));
  for (auto& s : servers_) (void)s->Wait(absl::Seconds(10));
  if (scheduler_) (void)scheduler_->Wait(absl::Seconds(10));
}

std::string LocalCluster::SchedulerResult() const {
  const std::string& out = scheduler_->output();
  const size_t at = out.find("PS_JOB_RESULT ");
  if (at == std::string::npos) return "";
  return out.substr(at, out.find('\n', at) - at);
}

std::string LocalCluster::LogTail(const std::string& name, int lines) const {
  std::ifstream in(o_.dir + "/" + name + ".log");
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  std::vector<std::string> tail(all.begin() + from, all.end());
  return absl::StrCat("--- ", name, " ---\n", absl::StrJoin(tail, "\n"), "\n");
}

std::string LocalCluster::AllLogTails() const {
  std::string out = LogTail("scheduler");
  for (int i = 0; i < o_.servers; ++i) out += LogTail(absl::StrCat("server-", i));
  for (int i = 0; i < o_.workers; ++i) out += LogTail(absl::StrCat("worker-", i));
  return out;
}

}  // namespace shardps::testing

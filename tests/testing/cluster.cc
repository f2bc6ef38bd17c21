#include "tests/testing/cluster.h"

#include <signal.h>

#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"

namespace shardps::testing {

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

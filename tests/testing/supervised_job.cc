#include "tests/testing/supervised_job.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/client/scheduler_client.h"
#include "common/job_secret.h"
#include "google/protobuf/util/json_util.h"
#include "gtest/gtest.h"
#include "tests/testing/free_port.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"

namespace shardps::testing {

CheckpointState Checkpoints(const std::string& root) {
  CheckpointState s;
  std::vector<uint64_t> incomplete;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) != 0) continue;
    const uint64_t clock = std::stoull(name.substr(5));
    if (std::filesystem::exists(e.path() / "MANIFEST", ec)) {
      s.complete = std::max(s.complete, clock);
    } else {
      incomplete.push_back(clock);
    }
  }
  for (uint64_t c : incomplete) s.writing |= c > s.complete;
  return s;
}

SupervisedJob::SupervisedJob(Options options)
    : o_(std::move(options)),
      dir_(TestDir(o_.name)),
      ckpt_(TestDir(o_.name + "/ckpt")),
      sup_(std::make_unique<Supervisor>(o_.supervisor)) {}

std::string SupervisedJob::Host(int host) const { return o_.box ? o_.box->Ip(host) : "127.0.0.1"; }

std::string SupervisedJob::Netns(int host) const { return o_.box ? o_.box->Namespace(host) : ""; }

int SupervisedJob::worker_host(int r) const {
  auto it = o_.worker_host.find(r);
  return it != o_.worker_host.end() ? it->second : 1 + o_.servers + r;
}

int SupervisedJob::Add(Supervisor::Spec spec, absl::Status* status) {
  auto id = sup_->Add(std::move(spec));
  if (!id.ok() && status->ok()) *status = id.status();
  return id.value_or(-1);
}

absl::Status SupervisedJob::Start() {
  if (!o_.scheduler && o_.workers > 0) {
    return absl::InvalidArgumentError("workers need a scheduler");
  }
  if (o_.box && o_.box->hosts() < 1 + o_.servers + o_.workers) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the box has ", o_.box->hosts(), " hosts; the job needs ", 1 + o_.servers + o_.workers));
  }
  const std::string config = dir_ + "/job.pbtxt";
  std::ofstream(config) << absl::StrReplaceAll(o_.config, {{"@CKPT@", ckpt_}});
  std::vector<std::string> member;  // What makes a process a member of the job.
  if (o_.job_secret) {
    const std::string secret = dir_ + "/job.secret";
    if (absl::Status st = WriteJobSecretFile(secret); !st.ok()) return st;
    member.push_back("--job_secret_file=" + secret);
  }
  member_flags_ = member;
  auto port = [this](int fixed) { return o_.box ? fixed : FreePort(); };
  address_ = absl::StrCat(Host(scheduler_host()), ":", port(7000));
  absl::Status status;
  scheduler_argv_ = {RunfilePath("scheduler/ps_scheduler"), "--config=" + config,
                     "--listen=" + address_};
  scheduler_argv_.insert(scheduler_argv_.end(), member.begin(), member.end());
  std::vector<std::string> argv = scheduler_argv_;
  argv.insert(argv.end(), o_.scheduler_flags.begin(), o_.scheduler_flags.end());
  if (o_.scheduler) {
    scheduler_ = Add(
        {"scheduler", argv, dir_ + "/scheduler.log", {0, 1, 2}, Netns(scheduler_host())}, &status);
  }
  for (int i = 0; i < o_.servers; ++i) {
    server_addresses_.push_back(absl::StrCat(Host(server_host(i)), ":", port(7001)));
    argv = {RunfilePath("server/ps_server"), "--config=" + config, absl::StrCat("--index=", i),
            "--listen=" + server_addresses_[i], "--advertise=" + server_addresses_[i]};
    if (o_.scheduler) argv.push_back("--scheduler=" + address_);
    argv.insert(argv.end(), member.begin(), member.end());
    argv.insert(argv.end(), o_.server_flags.begin(), o_.server_flags.end());
    servers_.push_back(Add({absl::StrCat("server-", i),
                            argv,
                            absl::StrCat(dir_, "/server-", i, ".log"),
                            {0},
                            Netns(server_host(i))},
                           &status));
  }
  for (int r = 0; r < o_.workers; ++r) {
    argv = {RunfilePath("worker/ps_worker"), "--config=" + config, "--scheduler=" + address_,
            absl::StrCat("--rank=", r)};
    argv.insert(argv.end(), member.begin(), member.end());
    argv.insert(argv.end(), o_.worker_flags.begin(), o_.worker_flags.end());
    if (auto it = o_.per_worker.find(r); it != o_.per_worker.end()) {
      argv.insert(argv.end(), it->second.begin(), it->second.end());
    }
    workers_.push_back(Add({absl::StrCat("worker-", r),
                            argv,
                            absl::StrCat(dir_, "/worker-", r, ".log"),
                            {0},
                            Netns(worker_host(r))},
                           &status));
  }
  return status;
}

bool SupervisedJob::Ended() {
  return scheduler_ >= 0 && sup_->WaitFinal(scheduler_, absl::ZeroDuration()).ok();
}

absl::Status SupervisedJob::WaitListening(absl::Duration timeout) {
  struct Wait {
    int id;
    std::string name, line;
  };
  std::vector<Wait> waits;
  if (scheduler_ >= 0) waits.push_back({scheduler_, "the scheduler", "PS_SCHEDULER_LISTENING "});
  for (size_t i = 0; i < servers_.size(); ++i) {
    waits.push_back({servers_[i], absl::StrCat("server ", i), "PS_SERVER_LISTENING "});
  }
  const absl::Time deadline = absl::Now() + timeout;
  for (const Wait& w : waits) {
    while (!absl::StrContains(sup_->Output(w.id), w.line)) {
      if (sup_->WaitFinal(w.id, absl::ZeroDuration()).ok()) {
        return absl::FailedPreconditionError(w.name + " ended before it listened");
      }
      if (absl::Now() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("waited ", absl::FormatDuration(timeout), " for ", w.name, " to listen"));
      }
      absl::SleepFor(absl::Milliseconds(20));  // Polls; bounded by `deadline`.
    }
  }
  return absl::OkStatus();
}

std::string SupervisedJob::LogTail(const std::string& name, int lines) const {
  std::ifstream in(dir_ + "/" + name + ".log");
  std::vector<std::string> all;
  for (std::string line; std::getline(in, line);) all.push_back(line);
  std::string out = absl::StrCat("--- ", name, " ---\n");
  const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
  for (size_t i = from; i < all.size(); ++i) out += all[i] + "\n";
  return out;
}

std::string SupervisedJob::Logs(int lines) const {
  std::string out = LogTail("scheduler", lines);
  for (int i = 0; i < o_.servers; ++i) out += LogTail(absl::StrCat("server-", i), lines);
  for (int r = 0; r < o_.workers; ++r) out += LogTail(absl::StrCat("worker-", r), lines);
  return out;
}

absl::StatusOr<JobStatusResponse> SupervisedJob::JobStatus() const {
  if (o_.box == nullptr && member_flags_.empty()) return SchedulerClient(address_).JobStatus();
  std::vector<std::string> argv = {RunfilePath("scheduler/ps_status"), "--scheduler=" + address_,
                                   "--json"};
  argv.insert(argv.end(), member_flags_.begin(), member_flags_.end());
  Subprocess status;
  absl::Status st =
      status.Start(o_.box ? o_.box->Wrap(scheduler_host(), argv) : argv, dir_ + "/ps_status.log");
  if (!st.ok()) return st;
  auto code = status.Wait(absl::Seconds(30));
  if (!code.ok()) return code.status();
  if (*code != 0) return absl::UnavailableError(absl::StrCat("ps_status exited ", *code));
  JobStatusResponse response;
  const auto parsed = google::protobuf::util::JsonStringToMessage(status.output(), &response);
  if (!parsed.ok()) {
    return absl::InternalError(absl::StrCat("ps_status printed no JobStatus: ", status.output()));
  }
  return response;
}

absl::StatusOr<JobStatusResponse> SupervisedJob::WaitFor(
    const std::string& what, const std::function<bool(const JobStatusResponse&)>& condition,
    absl::Duration timeout) const {
  return WaitForJobStatus([this] { return JobStatus(); }, what, condition, timeout,
                          o_.box ? absl::Milliseconds(250) : absl::Milliseconds(50));
}

absl::StatusOr<JobStatusResponse> SupervisedJob::WaitForClock(uint64_t clock,
                                                              absl::Duration timeout) const {
  return WaitFor(
      absl::StrCat("every worker at clock ", clock),
      [clock](const JobStatusResponse& s) {
        return s.state() == "running" && s.min_clock() >= clock;
      },
      timeout);
}

bool SupervisedJob::ExpectClock(uint64_t clock) const {
  auto status = WaitForClock(clock);
  if (!status.ok()) ADD_FAILURE() << status.status() << "\n" << Logs();
  return status.ok();
}

std::string SupervisedJob::SchedulerLog() const { return ReadFile(dir_ + "/scheduler.log"); }

absl::Status SupervisedJob::RestartScheduler(const std::vector<std::string>& flags) {
  if (scheduler_ < 0) return absl::FailedPreconditionError("the job has no scheduler");
  std::vector<std::string> argv = scheduler_argv_;
  argv.insert(argv.end(), flags.begin(), flags.end());
  return sup_->Restart(scheduler_, argv);
}

absl::StatusOr<int> SupervisedJob::WaitScheduler(absl::Duration timeout) {
  if (scheduler_ < 0) return absl::FailedPreconditionError("the job has no scheduler");
  return sup_->WaitFinal(scheduler_, timeout);
}

namespace {

// The last line of `output` that starts with `prefix` ("" if none).
std::string LastLine(const std::string& output, const std::string& prefix) {
  const size_t at = output.rfind(prefix);
  if (at == std::string::npos) return "";
  return output.substr(at, output.find('\n', at) - at);
}

}  // namespace

std::string SupervisedJob::SchedulerResult() const {
  return scheduler_ < 0 ? "" : LastLine(sup_->Output(scheduler_), "PS_JOB_RESULT ");
}

absl::StatusOr<std::map<int, std::map<std::string, std::string>>> SupervisedJob::WaitWorkers(
    absl::Duration timeout) {
  std::map<int, std::map<std::string, std::string>> results;
  std::string missing;
  const absl::Time deadline = absl::Now() + timeout;
  for (int r = 0; r < static_cast<int>(workers_.size()); ++r) {
    auto code =
        sup_->WaitFinal(workers_[r], std::max(deadline - absl::Now(), absl::ZeroDuration()));
    std::string line = LastLine(sup_->Output(workers_[r]), "PS_WORKER_RESULT ");
    if (!code.ok() && !line.empty()) code = sup_->WaitFinal(workers_[r], absl::Seconds(30));
    line = LastLine(sup_->Output(workers_[r]), "PS_WORKER_RESULT ");
    const std::string name = absl::StrCat("worker-", r);
    if (line.empty()) {
      absl::StrAppend(&missing, "worker ", r, " printed no PS_WORKER_RESULT (",
                      code.ok() ? absl::StrCat("exit status ", *code) : code.status().ToString(),
                      ")\n", LogTail(name, 15));
      continue;
    }
    results[r] = ParseResult(line);
    if (!code.ok() || *code != 0) {
      absl::StrAppend(&missing, "worker ", r, " did not exit 0: ",
                      code.ok() ? absl::StrCat("exit status ", *code) : code.status().ToString(),
                      "\n", LogTail(name, 15));
    }
  }
  if (!missing.empty()) return absl::NotFoundError(missing);
  return results;
}

std::optional<uint64_t> SupervisedJob::LastChecksum(int i) const {
  const std::string output = sup_->Output(servers_[i]);
  const size_t c = output.rfind("weights_checksum=");
  if (c == std::string::npos || c + 17 + 16 > output.size()) return std::nullopt;
  return std::stoull(output.substr(c + 17, 16), nullptr, 16);
}

absl::StatusOr<uint64_t> SupervisedJob::WaitServersChecksum(absl::Duration timeout) {
  uint64_t h = 0;
  for (size_t i = 0; i < servers_.size(); ++i) {
    auto code = sup_->WaitFinal(servers_[i], timeout);
    if (!code.ok()) return code.status();
    const std::optional<uint64_t> checksum = LastChecksum(i);
    if (!checksum) return absl::NotFoundError(absl::StrCat("server ", i, " printed no checksum"));
    h ^= *checksum;
  }
  return h;
}

JobOutcome SupervisedJob::Finish(absl::Duration timeout, bool trained) {
  JobOutcome out;
  auto code = WaitScheduler(timeout);
  EXPECT_TRUE(code.ok()) << "the job did not end: " << code.status() << "\n" << Logs();
  out.code = code.value_or(-1);
  out.result = SchedulerResult();
  out.fields = ParseResult(out.result);
  if (out.fields.count("eval_auc")) {
    out.auc = std::stod(out.fields["eval_auc"]);
  } else if (trained) {
    ADD_FAILURE() << "no eval_auc in the job's result: \"" << out.result << "\"\n" << Logs();
  }
  if (out.fields.count("recoveries")) {
    out.recoveries = std::stoi(out.fields["recoveries"]);
  } else if (trained) {
    ADD_FAILURE() << "no recoveries in the job's result: \"" << out.result << "\"";
  }
  // The servers and workers end once the scheduler did (or give up on it
  // after 3 x dead_after_ms and are restarted); bounded either way.
  for (size_t i = 0; i < servers_.size(); ++i) {
    auto server_code = sup_->WaitFinal(servers_[i], absl::Seconds(60));
    EXPECT_TRUE(server_code.ok() && *server_code == 0)
        << "server " << i << ": " << server_code.status() << " " << server_code.value_or(-1);
    if (const std::optional<uint64_t> checksum = LastChecksum(i)) {
      out.checksum ^= *checksum;
    } else if (trained) {
      ADD_FAILURE() << "server " << i << " printed no weights checksum:\n"
                    << sup_->Output(servers_[i]);
    }
  }
  for (int w : workers_) (void)sup_->WaitFinal(w, absl::Seconds(60));
  return out;
}

SupervisedJob::Options ManualJob(std::string name, std::string config, int servers, int workers,
                                 std::vector<std::string> worker_flags) {
  SupervisedJob::Options o;
  o.name = std::move(name);
  o.config = std::move(config);
  o.servers = servers;
  o.workers = workers;
  o.worker_flags = std::move(worker_flags);
  o.supervisor.max_restarts = 0;
  o.job_secret = false;
  return o;
}

}  // namespace shardps::testing

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
  std::vector<std::string> argv = {RunfilePath("scheduler/ps_scheduler"), "--config=" + config,
                                   "--listen=" + address_};
  argv.insert(argv.end(), member.begin(), member.end());
  argv.insert(argv.end(), o_.scheduler_flags.begin(), o_.scheduler_flags.end());
  scheduler_ = Add({"scheduler", argv, dir_ + "/scheduler.log", {0, 1, 2}, Netns(scheduler_host())},
                   &status);
  for (int i = 0; i < o_.servers; ++i) {
    server_addresses_.push_back(absl::StrCat(Host(server_host(i)), ":", port(7001)));
    argv = {RunfilePath("server/ps_server"),    "--config=" + config,
            "--scheduler=" + address_,          absl::StrCat("--index=", i),
            "--listen=" + server_addresses_[i], "--advertise=" + server_addresses_[i]};
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
    workers_.push_back(Add({absl::StrCat("worker-", r),
                            argv,
                            absl::StrCat(dir_, "/worker-", r, ".log"),
                            {0},
                            Netns(worker_host(r))},
                           &status));
  }
  return status;
}

bool SupervisedJob::Ended() { return sup_->WaitFinal(scheduler_, absl::ZeroDuration()).ok(); }

std::string SupervisedJob::Logs(int lines) const {
  std::vector<std::string> names = {"scheduler"};
  for (int i = 0; i < o_.servers; ++i) names.push_back(absl::StrCat("server-", i));
  for (int r = 0; r < o_.workers; ++r) names.push_back(absl::StrCat("worker-", r));
  std::string out;
  for (const std::string& name : names) {
    std::ifstream in(dir_ + "/" + name + ".log");
    std::vector<std::string> all;
    for (std::string line; std::getline(in, line);) all.push_back(line);
    out += absl::StrCat("--- ", name, " ---\n");
    const size_t from = all.size() > static_cast<size_t>(lines) ? all.size() - lines : 0;
    for (size_t i = from; i < all.size(); ++i) out += all[i] + "\n";
  }
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
  const absl::Time deadline = absl::Now() + timeout;
  std::string last = "no answer from the scheduler";
  while (true) {
    auto status = JobStatus();
    if (status.ok()) {
      if (condition(*status)) return *status;
      last = absl::StrCat("state=", status->state(), " min_clock=", status->min_clock(),
                          " max_clock=", status->max_clock(), " generation=", status->generation());
      if (status->state() == "done" || absl::StartsWith(status->state(), "failed")) {
        return absl::FailedPreconditionError(
            absl::StrCat("the job ended before ", what, ": ", last));
      }
    }
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("waited ", absl::FormatDuration(timeout),
                                                      " for ", what, "; last status: ", last));
    }
    absl::SleepFor(o_.box ? absl::Milliseconds(250) : absl::Milliseconds(50));  // Polls.
  }
}

std::string SupervisedJob::SchedulerLog() const { return ReadFile(dir_ + "/scheduler.log"); }

JobOutcome SupervisedJob::Finish(absl::Duration timeout, bool trained) {
  JobOutcome out;
  auto code = sup_->WaitFinal(scheduler_, timeout);
  EXPECT_TRUE(code.ok()) << "the job did not end: " << code.status() << "\n" << Logs();
  out.code = code.value_or(-1);
  const std::string sched = sup_->Output(scheduler_);
  const size_t at = sched.rfind("PS_JOB_RESULT ");
  if (at != std::string::npos) out.result = sched.substr(at, sched.find('\n', at) - at);
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
    const std::string output = sup_->Output(servers_[i]);
    // The last incarnation's checksum (each incarnation that ends cleanly
    // prints one at exit; a SIGKILLed one prints none).
    const size_t c = output.rfind("weights_checksum=");
    if (c != std::string::npos && c + 17 + 16 <= output.size()) {
      out.checksum ^= std::stoull(output.substr(c + 17, 16), nullptr, 16);
    } else if (trained) {
      ADD_FAILURE() << "server " << i << " printed no weights checksum:\n" << output;
    }
  }
  for (int w : workers_) (void)sup_->WaitFinal(w, absl::Seconds(60));
  return out;
}

}  // namespace shardps::testing

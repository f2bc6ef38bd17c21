// ps_scheduler: one per job. Servers and workers register with it; it owns
// the partition map and the clocks, detects failures, runs recoveries and
// ends the job.
//
//   ps_scheduler --config job.pbtxt [--listen 127.0.0.1:0] [--port_file F]
//
// Restart it with the same flags whatever happened (a supervisor does): a
// scheduler that finds live servers and workers of the job takes it over
// (they rejoin with their state; nothing rolls back unless some state was
// lost), and one that finds only fresh processes resumes the job from the
// latest complete checkpoint in checkpoint.dir, if there is one.
//
// Prints "PS_SCHEDULER_LISTENING host:port" once serving, and at the end
// "PS_JOB_RESULT state=... recoveries=N recovery_sec=S ... reshards=M
// partitions_moved=P" (the moves of partitions, docs/design.md "Resharding"),
// with periodic
// evaluation also "evaluations=N best_clock=C best_auc=A early_stopped_at=S"
// (the checkpoint kept as the best one; S = 0: not stopped early), and with
// cluster.on_worker_loss DROP "untrained_samples=N" when a lost worker's
// share was left untrained (an estimate: job.h). Exit status: 0
// when the job is done, 1 when it failed, 2 on bad flags or config, or a
// checkpoint.dir another scheduler holds (--checkpoint_lock_wait).
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/config.h"
#include "common/eval_cadence.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/peer_limits.h"
#include "common/testing_stall.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_client.h"
#include "scheduler/checkpoint_guard.h"
#include "scheduler/job.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/status_page.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config (text-format shardps.JobConfig). Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, listen, shardps::EnvOr("SHARDPS_LISTEN", "127.0.0.1:0"),
          "Address to serve on; port 0 picks a free port. Env: SHARDPS_LISTEN.");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port here once serving.");
ABSL_FLAG(std::string, operator_names, shardps::EnvOr("SHARDPS_OPERATOR_NAMES", ""),
          "With TLS: the certificate common names (comma-separated) allowed to ask for "
          "a checkpoint (ps_status --checkpoint); empty = any member of the job. "
          "Without TLS only callers on this host may.");
ABSL_FLAG(std::string, status_listen, shardps::EnvOr("SHARDPS_STATUS_LISTEN", ""),
          "Serve the status page (/) and its JSON (/status.json) here; port 0 "
          "picks a free port and prints PS_STATUS_LISTENING host:port; empty = "
          "off. Env: SHARDPS_STATUS_LISTEN.");
ABSL_FLAG(absl::Duration, checkpoint_lock_wait, absl::Seconds(60),
          "How long to wait for checkpoint.dir's lock while another scheduler holds it "
          "(an old one still shutting down) before exiting 2 naming the holder.");

ABSL_FLAG(std::string, testing_stall_at, "",
          "Testing: POINT:MARKER[,POINT:MARKER...]: the scheduler stalls once at each named "
          "point of a partition move until killed (reshard_added: every destination added its "
          "partitions, before the switch; reshard_switching: server 0 has taken the new map, "
          "the others not yet; common/testing_stall.h).");

namespace {

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted = true; }

// The status page's checkpoint list: the ckpt-<clock> directories of the
// checkpoint root that have their MANIFEST (written last), oldest first;
// empty when checkpoints are off or none was written yet.
std::vector<std::string> CheckpointNames(const std::string& dir) {
  std::vector<std::string> names;
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) return names;
  for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 && std::filesystem::exists(entry.path() / "MANIFEST", ec)) {
      names.push_back(name);
    }
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string HostOf(const std::string& address) { return address.substr(0, address.rfind(':')); }

// The PS_JOB_RESULT fields of periodic evaluation ("" without).
std::string EvaluationFields(const shardps::JobStatusResponse& status) {
  if (status.evaluations_size() == 0) return "";
  return absl::StrCat(" evaluations=", status.evaluations_size(),
                      " best_clock=", status.best_eval_clock(),
                      " best_auc=", absl::StrFormat("%.6f", status.best_eval_auc()),
                      " early_stopped_at=", status.early_stopped_at());
}

// The scheduler's gRPC server on --listen, or nullptr (logged) if it cannot
// listen; sets *port and *address.
std::unique_ptr<grpc::Server> StartRpcServer(const shardps::JobConfig& config,
                                             shardps::SchedulerService* service, int* port,
                                             std::string* address) {
  grpc::ServerBuilder builder;
  const int max_bytes =
      static_cast<int>(std::min<uint64_t>(config.cluster().max_message_bytes(), INT32_MAX));
  // What the scheduler receives is small (registrations, ticks, reports): a
  // larger request is refused from its length prefix, before its body is
  // buffered (never-finished 16 MB Register bodies held 170 MB).
  constexpr int kMaxRequestBytes = 4 << 20;
  builder.SetMaxReceiveMessageSize(std::min(max_bytes, kMaxRequestBytes));
  builder.SetMaxSendMessageSize(max_bytes);
  // Calls per connection, the memory of what is being received, keepalive
  // (docs/security.md, "What a peer may hold").
  shardps::ApplyPeerLimits(config.cluster(), "ps_scheduler",
                           config.cluster().scheduler_grpc_memory_bytes(),
                           /*max_threads=*/0, /*own_parsers=*/{}, &builder);
  shardps::ConfigureListener(absl::GetFlag(FLAGS_listen), "ps_scheduler", &builder);
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           *shardps::ServerCredentialsFromFlags() /* checked in main */, port);
  builder.RegisterService(service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || *port == 0) {
    LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen)
               << " (in use by another process, or not an address of this host)";
    return nullptr;
  }
  *address = HostOf(absl::GetFlag(FLAGS_listen)) + ":" + std::to_string(*port);
  return server;
}

// The status page on --status_listen (none if the flag is empty).
absl::StatusOr<std::unique_ptr<shardps::StatusPage>> StartStatusPage(
    const shardps::JobConfig& config, shardps::JobCoordinator* job) {
  shardps::StatusPage::Options page_options;
  page_options.listen = absl::GetFlag(FLAGS_status_listen);
  page_options.status = [job] {
    shardps::JobStatusResponse status;
    job->JobStatus(&status);
    return status;
  };
  page_options.checkpoints = [dir = config.checkpoint().dir()] { return CheckpointNames(dir); };
  auto page = shardps::StatusPage::Start(std::move(page_options));
  if (page.ok() && !(*page)->address().empty()) {
    LOG(INFO) << "status page on http://" << (*page)->address() << "/";
  }
  return page;
}

// An unusable checkpoint directory fails the job now, with the reason (the
// result line says it and every process that registers is told to stop). A
// checkpoint directory of another job is refused now (false), not after the
// servers registered.
bool CheckCheckpointsAtStart(const shardps::JobConfig& config, const std::string& address,
                             shardps::JobCoordinator* job, shardps::ServerOps* ops,
                             std::unique_ptr<shardps::CheckpointDirLock>* held) {
  if (!job->CheckCheckpointDir().ok()) return true;  // Reported as the job's failure.
  const std::string& dir = config.checkpoint().dir();
  if (!dir.empty()) {
    char host[256] = "?";
    gethostname(host, sizeof host - 1);
    auto lock =
        shardps::CheckpointDirLock::Acquire(dir,
                                            absl::StrCat("job ", config.name(), ", pid ", getpid(),
                                                         " on host ", host, ", serving ", address),
                                            absl::GetFlag(FLAGS_checkpoint_lock_wait));
    if (!lock.ok()) {
      LOG(ERROR) << lock.status().message();
      return false;
    }
    if (!(*lock)->locked()) {
      LOG(WARNING) << "checkpoint.dir " << dir << ": the file system has no flock, so nothing "
                   << "stops another job from writing this directory";
    }
    *held = std::move(*lock);
  }
  auto points = ops->RestorePoints();
  if (!points.ok()) {
    LOG(ERROR) << points.status().message();
    return false;
  }
  if (!points->empty()) {
    LOG(INFO) << "checkpoint.dir holds a complete checkpoint at clock " << points->front().clock
              << ": unless the job's processes are still running (they rejoin), it resumes "
                 "from there";
  }
  return true;
}

// Servers and live workers learn the end from the answer to their next
// heartbeat: waits until each has sent one since the end (on a loaded
// machine a fixed pause was too short, and a server that then found the
// scheduler gone exited as for a failure), at most 3 x dead_after_ms. A
// `failed` job also waits for the members that never registered (a job that
// failed at start, processes still starting): their registration is
// answered with the failure and they exit saying so, instead of retrying an
// address nobody answers until their start_deadline_ms. Returns the job's
// last status.
shardps::JobStatusResponse WaitUntilMembersHeard(const shardps::JobConfig& config,
                                                 shardps::JobCoordinator* job, bool failed) {
  const absl::Time ended = absl::Now();
  const absl::Time heard_deadline =
      ended + absl::Milliseconds(3 * uint64_t{config.cluster().dead_after_ms()});
  shardps::JobStatusResponse status;
  while (true) {
    status.Clear();
    job->JobStatus(&status);
    const absl::Time now = absl::Now();
    std::vector<std::string> unheard;
    if (failed) {
      int never = 0;  // Slots nobody registered for.
      for (const shardps::MemberStatus& m : status.members()) {
        never += m.state() == shardps::STATE_UNSPECIFIED;
      }
      if (never > 0) unheard.push_back(absl::StrCat(never, " members that never registered"));
    }
    std::vector<shardps::MemberStatus> members(status.members().begin(), status.members().end());
    members.insert(members.end(), status.spares().begin(), status.spares().end());
    for (const shardps::MemberStatus& m : members) {  // Spares too: they exit on it as well.
      if (m.state() != shardps::ALIVE) continue;
      if (now - absl::Seconds(m.last_heartbeat_age_sec()) <= ended) {
        unheard.push_back(
            absl::StrCat(m.role() == shardps::SERVER ? "server " : "worker ", m.index()));
      }
    }
    if (unheard.empty() || g_interrupted) break;
    if (now >= heard_deadline) {
      LOG(WARNING) << "exiting before " << absl::StrJoin(unheard, ", ")
                   << " heard that the job ended (no heartbeat for 3 x dead_after_ms)";
      break;
    }
    absl::SleepFor(absl::Milliseconds(50));  // Polls the members' heartbeats.
  }
  return status;
}

// training.eval_every_epochs into clocks (common/eval_cadence.h); false
// (logged) if it cannot be.
bool ResolveEvalCadence(shardps::JobConfig* config) {
  const double epochs = config->training().eval_every_epochs();
  if (epochs <= 0) return true;
  uint64_t clocks_per_epoch = 0;
  if (absl::Status st = shardps::ResolveEvalEveryEpochs(config, &clocks_per_epoch); !st.ok()) {
    LOG(ERROR) << "training.eval_every_epochs: " << st.message();
    return false;
  }
  LOG(INFO) << "training.eval_every_epochs " << epochs << ": an epoch is " << clocks_per_epoch
            << " clocks, so a checkpoint is evaluated every "
            << config->training().eval_every_steps() << " clocks";
  return true;
}

// Logs the recoveries and prints the PS_JOB_RESULT line.
void PrintJobResult(const shardps::JobStatusResponse& status) {
  // Recoveries that rolled something back or restored a server (a job
  // resumed at its start and a scheduler takeover are listed, not counted).
  int recoveries = 0;
  double recovery_sec = 0;
  for (const shardps::RecoveryReport& r : status.recoveries()) {
    LOG(INFO) << "recovery: " << r.kind() << " (" << r.cause() << "): generation " << r.generation()
              << ", restarted at clock " << r.clock() << ", " << r.total_sec() << " s (detect "
              << r.detect_sec() << " s, wait " << r.wait_sec() << " s, restore " << r.restore_sec()
              << " s, rewind " << r.rewind_sec() << " s)";
    if (r.kind() == "rollback" || r.kind() == "partial" || r.kind() == "rejoin") {
      ++recoveries;
      recovery_sec += r.total_sec();
    }
  }
  std::printf(
      "PS_JOB_RESULT state=%s samples=%llu samples_per_sec=%.0f eval_auc=%.6f eval_logloss=%.6f "
      "max_clock=%llu max_spread=%llu elapsed_sec=%.1f recoveries=%d recovery_sec=%.2f "
      "generation=%llu reshards=%u partitions_moved=%llu%s%s\n",
      status.state().c_str(), static_cast<unsigned long long>(status.total_samples()),
      status.elapsed_sec() > 0 ? status.total_samples() / status.elapsed_sec() : 0.0,
      status.eval_auc(), status.eval_loss(), static_cast<unsigned long long>(status.max_clock()),
      static_cast<unsigned long long>(status.max_spread()), status.elapsed_sec(), recoveries,
      recovery_sec, static_cast<unsigned long long>(status.generation()), status.reshards(),
      static_cast<unsigned long long>(status.partitions_moved()), EvaluationFields(status).c_str(),
      status.untrained_samples() > 0
          ? absl::StrCat(" untrained_samples=", status.untrained_samples()).c_str()
          : "");
  std::fflush(stdout);
}

// Runs the started job to its end (or SIGINT/SIGTERM), waits for the
// members to hear of it, stops serving and prints PS_JOB_RESULT. Returns the
// exit status: 0 when the job is done, 1 otherwise.
int RunToTheEnd(const shardps::JobConfig& config, shardps::JobCoordinator* job,
                grpc::Server* server) {
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  absl::Status result = absl::DeadlineExceededError("");
  while (absl::IsDeadlineExceeded(result) && !g_interrupted) {
    result = job->WaitDone(absl::Now() + absl::Milliseconds(200));
  }
  if (g_interrupted) result = absl::CancelledError("interrupted");
  const shardps::JobStatusResponse status =
      WaitUntilMembersHeard(config, job, /*failed=*/!result.ok() && !g_interrupted);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  PrintJobResult(status);
  if (!result.ok()) {
    LOG(ERROR) << result.message() << "\n" << status.summary();
    return 1;
  }
  LOG(INFO) << "job done\n" << status.summary();
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_scheduler --config job.pbtxt");
  if (absl::Status st = shardps::InitTlsFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  if (absl::Status st = shardps::InitJobSecretFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  auto config = shardps::LoadJobConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    LOG(ERROR) << config.status().message();
    return 2;
  }
  if (!ResolveEvalCadence(&*config)) return 2;
  constexpr const char* kStallPoints[] = {"reshard_added", "reshard_switching"};
  auto stalls = shardps::ParseTestingStalls("--testing_stall_at",
                                            absl::GetFlag(FLAGS_testing_stall_at), kStallPoints);
  if (!stalls.ok()) {
    LOG(ERROR) << stalls.status().message();
    return 2;
  }
  shardps::SetProcessTestingStalls(*std::move(stalls));
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  // Servers accept control RPCs only with this token (docs/security.md).
  const uint64_t control_token = shardps::NewControlToken();
  shardps::ServerNotifierClient notifier(control_token);
  const std::unique_ptr<shardps::ServerOps> ops =
      shardps::MakeGrpcServerOps(*config, control_token);
  shardps::JobCoordinator job(
      *config,
      [&notifier](const shardps::PartitionMapProto& map, const std::vector<uint32_t>& active) {
        notifier.Notify(map, active);
      },
      ops.get());
  shardps::SchedulerService service(
      &job, control_token,
      absl::StrSplit(absl::GetFlag(FLAGS_operator_names), ',', absl::SkipEmpty()));
  int port = 0;
  std::string address;
  std::unique_ptr<grpc::Server> server = StartRpcServer(*config, &service, &port, &address);
  if (server == nullptr) return 2;
  // Atomically (a reader never sees half of it); an empty flag writes nothing.
  if (absl::Status st = shardps::WritePortFile(absl::GetFlag(FLAGS_port_file), port); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  if (absl::Status st = shardps::metrics::StartExposerFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  auto status_page = StartStatusPage(*config, &job);
  if (!status_page.ok()) {
    LOG(ERROR) << status_page.status();
    return 2;
  }
  std::printf("PS_SCHEDULER_LISTENING %s\n", address.c_str());
  std::fflush(stdout);
  LOG(INFO) << "job \"" << config->name() << "\": waiting for " << config->cluster().num_servers()
            << " servers and " << config->cluster().num_workers() << " workers on " << address;
  std::unique_ptr<shardps::CheckpointDirLock> dir_lock;  // Held until the process exits.
  if (!CheckCheckpointsAtStart(*config, address, &job, ops.get(), &dir_lock)) return 2;
  job.Start();
  return RunToTheEnd(*config, &job, server.get());
}

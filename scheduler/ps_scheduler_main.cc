// ps_scheduler: one per job. Servers and workers register with it; it owns
// the partition map and the clocks, detects failures and ends the job.
//
//   ps_scheduler --config job.pbtxt [--listen 127.0.0.1:0] [--port_file F]
//                [--resume | --recover]
//
// --resume starts the job again from its last complete checkpoint (every
// process restarted). --recover replaces a scheduler that died while the
// servers and workers kept running: start it on the same --listen address;
// the live processes rejoin with their state and nothing is rolled back.
//
// Prints "PS_SCHEDULER_LISTENING host:port" once serving. Exit status: 0 when
// the job is done, 1 when it failed, 2 on bad flags or config.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/init.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "scheduler/checkpoint_client.h"
#include "scheduler/job.h"
#include "scheduler/scheduler_service.h"
#include "scheduler/status_page.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config (text-format shardps.JobConfig). Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, listen, shardps::EnvOr("SHARDPS_LISTEN", "127.0.0.1:0"),
          "Address to serve on; port 0 picks a free port. Env: SHARDPS_LISTEN.");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port here once serving.");
ABSL_FLAG(bool, resume, false,
          "Resume the job from the latest complete checkpoint in checkpoint.dir "
          "(servers restore their partitions, workers their data positions).");
ABSL_FLAG(bool, recover, false,
          "Take over a running job whose scheduler died: listen on the old "
          "scheduler's address; live servers and workers rejoin with their clocks "
          "and data positions (no rollback). Checkpoints continue after the last "
          "complete one in checkpoint.dir.");
ABSL_FLAG(std::string, status_listen, shardps::EnvOr("SHARDPS_STATUS_LISTEN", ""),
          "Serve the status page (/) and its JSON (/status.json) here; port 0 "
          "picks a free port and prints PS_STATUS_LISTENING host:port; empty = "
          "off. Env: SHARDPS_STATUS_LISTEN.");

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

std::string HostOf(const std::string& address) {
  return address.substr(0, address.rfind(':'));
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_scheduler --config job.pbtxt");
  if (absl::Status st = shardps::InitTlsFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  auto config = shardps::LoadJobConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    LOG(ERROR) << config.status().message();
    return 2;
  }
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();

  shardps::ServerNotifierClient notifier;
  shardps::JobCoordinator job(
      *config, [&notifier](const shardps::PartitionMapProto& map,
                           const std::vector<uint32_t>& active) {
        notifier.Notify(map, active);
      });
  shardps::SchedulerService service(&job);
  int port = 0;
  grpc::ServerBuilder builder;
  const int max_bytes = static_cast<int>(
      std::min<uint64_t>(config->cluster().max_message_bytes(), INT32_MAX));
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  builder.AddListeningPort(absl::GetFlag(FLAGS_listen),
                           *shardps::ServerCredentialsFromFlags() /* checked above */, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    LOG(ERROR) << "cannot listen on " << absl::GetFlag(FLAGS_listen);
    return 2;
  }
  const std::string address = HostOf(absl::GetFlag(FLAGS_listen)) + ":" + std::to_string(port);
  if (!absl::GetFlag(FLAGS_port_file).empty()) {
    std::ofstream(absl::GetFlag(FLAGS_port_file)) << port << "\n";
  }
  if (absl::Status st = shardps::metrics::StartExposerFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  shardps::StatusPage::Options page_options;
  page_options.listen = absl::GetFlag(FLAGS_status_listen);
  page_options.status = [&job] {
    shardps::JobStatusResponse status;
    job.JobStatus(&status);
    return status;
  };
  page_options.checkpoints = [dir = config->checkpoint().dir()] { return CheckpointNames(dir); };
  auto status_page = shardps::StatusPage::Start(std::move(page_options));
  if (!status_page.ok()) {
    LOG(ERROR) << status_page.status();
    return 2;
  }
  if (!(*status_page)->address().empty()) {
    LOG(INFO) << "status page on http://" << (*status_page)->address() << "/";
  }
  std::printf("PS_SCHEDULER_LISTENING %s\n", address.c_str());
  std::fflush(stdout);
  LOG(INFO) << "job \"" << config->name() << "\": waiting for "
            << config->cluster().num_servers() << " servers and "
            << config->cluster().num_workers() << " workers on " << address;
  if (absl::GetFlag(FLAGS_resume) && absl::GetFlag(FLAGS_recover)) {
    LOG(ERROR) << "--resume and --recover exclude each other";
    return 2;
  }
  if (absl::GetFlag(FLAGS_recover)) {
    uint64_t last = 0;
    if (!config->checkpoint().dir().empty()) {
      auto latest = shardps::FindResume(*config, [] { return std::nullopt; });
      if (latest.ok()) {
        last = latest->clock;
      } else if (!absl::IsNotFound(latest.status())) {
        LOG(ERROR) << "--recover: " << latest.status();
        return 2;
      }
    }
    LOG(INFO) << "--recover: waiting for the job's live servers and workers to rejoin"
              << (last ? absl::StrCat(" (last checkpoint at clock ", last, ")") : "");
    job.SetRecover(last);
  }
  if (!config->checkpoint().dir().empty()) {
    auto get_map = [&job] { return job.Map(); };
    job.SetCheckpointer(shardps::MakeCheckpointer(*config, get_map));
    if (config->checkpoint().recovery() == shardps::CheckpointConfig::PARTIAL) {
      job.SetPartialRecovery(shardps::MakeServerRestorer(*config));
    }
    if (absl::GetFlag(FLAGS_resume)) {
      auto resume = shardps::FindResume(*config, get_map);
      if (resume.ok()) {
        job.SetResume(*std::move(resume));
      } else if (absl::IsNotFound(resume.status())) {
        LOG(WARNING) << "--resume: no complete checkpoint in " << config->checkpoint().dir()
                     << " yet; starting from the beginning";
      } else {
        LOG(ERROR) << "--resume: " << resume.status();
        return 2;
      }
    }
  }
  job.Start();
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);

  absl::Status result = absl::DeadlineExceededError("");
  while (absl::IsDeadlineExceeded(result) && !g_interrupted) {
    result = job.WaitDone(absl::Now() + absl::Milliseconds(200));
  }
  if (g_interrupted) result = absl::CancelledError("interrupted");
  // Let servers and workers see stop in their next heartbeat before we go.
  absl::SleepFor(absl::Milliseconds(2 * config->cluster().heartbeat_ms() + 200));
  shardps::JobStatusResponse status;
  job.JobStatus(&status);
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  std::printf("PS_JOB_RESULT state=%s samples=%llu samples_per_sec=%.0f eval_auc=%.6f eval_logloss=%.6f "
              "max_clock=%llu max_spread=%llu elapsed_sec=%.1f\n",
              status.state().c_str(),
              static_cast<unsigned long long>(status.total_samples()),
              status.elapsed_sec() > 0 ? status.total_samples() / status.elapsed_sec() : 0.0,
              status.eval_auc(), status.eval_loss(),
              static_cast<unsigned long long>(status.max_clock()),
              static_cast<unsigned long long>(status.max_spread()),
              status.elapsed_sec());
  std::fflush(stdout);
  if (!result.ok()) {
    LOG(ERROR) << result.message() << "\n" << status.summary();
    return 1;
  }
  LOG(INFO) << "job done\n" << status.summary();
  return 0;
}

// ps_replica: a serving replica of a job's model that follows the job's
// servers' delta stream or its checkpoint directory (replica/replica.h;
// docs/operations.md "Serving replicas").
//
//   ps_replica --config job.pbtxt [--checkpoint_dir DIR] [--listen 127.0.0.1:0]
//              [--port N] [--port_file F] [--poll_ms 100] [--metrics_listen H:P]
//              [--scheduler H:P --job_secret_file F] [TLS flags]
//
// Serves shardps.Replica (Predict, Lookup, Status; proto/replica.proto), the
// gRPC health service (NOT_SERVING until the first version is loaded) and
// reflection. It bootstraps from the newest complete
// checkpoint of --checkpoint_dir (default: the config's checkpoint.dir),
// waiting for one if there is none yet, then moves to each later cut as a
// new version: from the servers' stream with --scheduler (the job's
// scheduler names them), else to each newer complete checkpoint (FULL or
// DELTA) in the directory. Prints
//
//   PS_REPLICA_LISTENING <host:port>
//
// once serving, and a line per version in its log. With --metrics_listen
// (env SHARDPS_METRICS_LISTEN) it serves Prometheus metrics on /metrics
// (replica/replica.h lists them) and prints PS_METRICS_LISTENING first. Exit status: 0 after
// SIGINT/SIGTERM, 2 bad flags or config or cannot listen.
#include <grpcpp/ext/proto_server_reflection_plugin.h>
#include <grpcpp/grpcpp.h>
#include <grpcpp/health_check_service_interface.h>

#include <atomic>
#include <csignal>
#include <cstdio>
#include <memory>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/metrics.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "replica/replica.h"
#include "replica/replica_service.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config of the job to follow. Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, checkpoint_dir, "",
          "Checkpoint root to follow (default: the config's checkpoint.dir).");
ABSL_FLAG(std::string, listen, shardps::EnvOr("SHARDPS_LISTEN", "127.0.0.1:0"),
          "Address to serve on (host:port; port 0 picks a free one). Env: SHARDPS_LISTEN.");
ABSL_FLAG(int, port, -1, "If >= 0: the port to serve on, replacing --listen's.");
ABSL_FLAG(std::string, port_file, "", "Write the chosen port here once serving.");
ABSL_FLAG(int, poll_ms, 100, "How often to look for a new complete checkpoint (ms).");
ABSL_FLAG(std::string, scheduler, shardps::EnvOr("SHARDPS_SCHEDULER", ""),
          "The job's scheduler (host:port): follow the servers' delta stream, reading "
          "checkpoint files only to load one (replica/replica.h). Empty: follow the files. "
          "Needs the job's --job_secret_file when the job has one.");
ABSL_FLAG(bool, verify_stream, false,
          "With --scheduler: check each stream version against the servers' hash of their rows "
          "at the cut before serving it (costs the servers a full copy a cut; an audit).");

ABSL_FLAG(int, build_nice, 0,
          "Nice value (-20..19) of the thread that follows the job and builds versions; answers "
          "keep the process's. 19 on a host shared with training: versions are built on the CPU "
          "training leaves idle.");

namespace {

std::atomic<bool> g_interrupted{false};
void OnSignal(int) { g_interrupted = true; }

std::string ListenAddress() {
  std::string listen = absl::GetFlag(FLAGS_listen);
  if (absl::GetFlag(FLAGS_port) >= 0) {
    listen = absl::StrCat(listen.substr(0, listen.rfind(':')), ":", absl::GetFlag(FLAGS_port));
  }
  return listen;
}

int Run() {
  auto config = shardps::LoadJobConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    LOG(ERROR) << config.status().message();
    return 2;
  }
  shardps::replica::ReplicaOptions options;
  options.config = *config;
  options.checkpoint_dir = absl::GetFlag(FLAGS_checkpoint_dir);
  options.poll_interval = absl::Milliseconds(absl::GetFlag(FLAGS_poll_ms));
  options.scheduler = absl::GetFlag(FLAGS_scheduler);
  options.verify_stream = absl::GetFlag(FLAGS_verify_stream);
  options.build_nice = absl::GetFlag(FLAGS_build_nice);
  auto replica = shardps::replica::Replica::Create(std::move(options));
  if (!replica.ok()) {
    LOG(ERROR) << replica.status();
    return 2;
  }
  if (absl::Status st = shardps::metrics::StartExposerFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  (*replica)->Start();
  shardps::replica::ReplicaService service(replica->get());
  grpc::EnableDefaultHealthCheckService(true);
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  const std::string listen = ListenAddress();
  grpc::ServerBuilder builder;
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(std::min<uint64_t>(config->cluster().max_message_bytes(), INT32_MAX)));
  shardps::ConfigureListener(listen, "ps_replica", &builder);
  int port = 0;
  builder.AddListeningPort(listen, *shardps::ServerCredentialsFromFlags() /* checked */, &port);
  builder.RegisterService(&service);
  std::unique_ptr<grpc::Server> server = builder.BuildAndStart();
  if (server == nullptr || port == 0) {
    LOG(ERROR) << "cannot listen on " << listen
               << " (in use by another process, or not an address of this host)";
    return 2;
  }
  if (absl::Status st = shardps::WritePortFile(absl::GetFlag(FLAGS_port_file), port); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  std::printf("PS_REPLICA_LISTENING %s:%d\n", listen.substr(0, listen.rfind(':')).c_str(), port);
  std::fflush(stdout);
  std::signal(SIGINT, OnSignal);
  std::signal(SIGTERM, OnSignal);
  // The health service says SERVING once a version is loaded (a readiness
  // probe, deploy/k8s/base/replica.yaml), NOT_SERVING before.
  grpc::HealthCheckServiceInterface* health = server->GetHealthCheckService();
  bool serving = false;
  if (health != nullptr) health->SetServingStatus(false);
  while (!g_interrupted) {
    const bool loaded = (*replica)->Status().loaded;
    if (health != nullptr && loaded != serving) {
      health->SetServingStatus(loaded);
      serving = loaded;
    }
    absl::SleepFor(absl::Milliseconds(200));
  }
  server->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(2));
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_replica --config job.pbtxt [--checkpoint_dir DIR]");
  if (absl::Status st = shardps::InitTlsFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  if (absl::Status st = shardps::InitJobSecretFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  return Run();
}

#include "server/ps_server.h"

#include <algorithm>
#include <thread>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/peer_limits.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "grpcpp/ext/proto_server_reflection_plugin.h"

namespace shardps {
namespace {

bool HasEviction(const JobConfig& config) {
  for (const TableConfig& t : config.tables()) {
    if (t.eviction().ttl_clocks() > 0 || t.eviction().ttl_seconds() > 0) {
      return true;
    }
  }
  return false;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PsServer>> PsServer::Start(const PsServerOptions& options) {
  CoreOptions core_options;
  core_options.config = options.config;
  core_options.server_index = options.server_index;
  core_options.map = options.map;
  core_options.checkpoint_write_delay = options.checkpoint_write_delay;
  core_options.testing_stalls = options.testing_stalls;
  std::unique_ptr<PsServer> s(new PsServer());
  ASSIGN_OR_RETURN(s->core_, ParameterServerCore::Create(core_options));
  s->service_ = std::make_unique<PsService>(s->core_.get());

  // Our own health service, not gRPC's (health_service.h says why).
  s->health_ = std::make_unique<HealthService>();
  grpc::reflection::InitProtoReflectionServerBuilderPlugin();
  grpc::ServerBuilder builder;
  const int max_bytes =
      static_cast<int>(std::min<uint64_t>(options.config.cluster().max_message_bytes(), INT32_MAX));
  builder.SetMaxReceiveMessageSize(max_bytes);
  builder.SetMaxSendMessageSize(max_bytes);
  // What one peer may hold (docs/security.md).
  // Pull and Push parse their requests themselves (PsService).
  ApplyPeerLimits(options.config.cluster(), "ps_server",
                  options.config.cluster().grpc_memory_bytes(), options.threads,
                  {"/shardps.ParameterServer/Pull", "/shardps.ParameterServer/Push"}, &builder);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ServerCredentials> credentials,
                   ServerCredentialsFromFlags());
  ConfigureListener(options.listen, "ps_server", &builder);
  builder.AddListeningPort(options.listen, credentials, &s->port_);
  builder.RegisterService(s->service_.get());
  builder.RegisterService(s->health_.get());
  const int data_threads = options.data_threads > 0
                               ? options.data_threads
                               : std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  std::vector<std::unique_ptr<grpc::ServerCompletionQueue>> cqs;
  for (int i = 0; i < data_threads; ++i) cqs.push_back(builder.AddCompletionQueue());
  s->server_ = builder.BuildAndStart();
  // A started server owns the queues from here on, also on the error below
  // (Shutdown stops them); a server that did not start never used them.
  if (s->server_ != nullptr) s->service_->ServeDataPath(std::move(cqs));
  if (s->server_ == nullptr || s->port_ == 0) {
    return absl::UnavailableError(
        absl::StrCat("cannot listen on ", options.listen,
                     " (in use by another process, or not an address of this host)"));
  }
  const size_t colon = options.listen.rfind(':');
  s->address_ = absl::StrCat(options.listen.substr(0, colon), ":", s->port_);
  if (HasEviction(options.config)) {
    s->evict_thread_ = std::thread(&PsServer::EvictLoop, s.get(), options.evict_every);
  }
  LOG(INFO) << "ps_server " << options.server_index << " serving " << options.config.tables_size()
            << " tables on " << s->address_;
  return s;
}

PsServer::~PsServer() {
  Shutdown();
  Wait();
}

void PsServer::EvictLoop(absl::Duration every) {
  while (true) {
    {
      MutexLock lock(&mu_);
      const absl::Time next = absl::Now() + every;
      while (!stopping_ && absl::Now() < next) changed_.WaitUntil(&mu_, next);
      if (stopping_) return;
    }
    const uint64_t dropped = core_->Evict();
    if (dropped > 0) LOG(INFO) << "evicted " << dropped << " idle rows";
  }
}

void PsServer::Shutdown() {
  {
    MutexLock lock(&mu_);
    if (stopping_) return;
    stopping_ = true;
    changed_.SignalAll();
  }
  // Start may have failed before the core or the gRPC server existed.
  if (health_ != nullptr) health_->SetNotServing();
  if (core_ != nullptr) core_->Shutdown();  // Waiting BSP pulls return first.
  if (server_ != nullptr) {
    server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(5));
  }
  if (service_ != nullptr) service_->StopDataPath();
  if (evict_thread_.joinable()) evict_thread_.join();
  MutexLock lock(&mu_);
  stopped_ = true;
  changed_.SignalAll();
}

void PsServer::Wait() {
  MutexLock lock(&mu_);
  while (!stopped_) changed_.Wait(&mu_);
}

}  // namespace shardps

// A running parameter server: the core, the gRPC service (plus the standard
// health and reflection services) on a listening port, and the periodic
// eviction sweep. ps_server_main.cc is flags around this class; a scheduler
// registration step can be added between Start and Wait.
//
// Thread-safety: Shutdown may be called from any thread, more than once;
// Wait returns once it has run.
#ifndef SHARDPS_SERVER_PS_SERVER_H_
#define SHARDPS_SERVER_PS_SERVER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "common/partition.h"
#include "grpcpp/grpcpp.h"
#include "proto/config.pb.h"
#include "server/health_service.h"
#include "server/parameter_server_core.h"
#include "server/ps_service.h"

namespace shardps {

struct PsServerOptions {
  JobConfig config;  // Finalized.
  uint32_t server_index = 0;
  std::string listen = "127.0.0.1:0";  // Port 0 picks a free port.
  int threads = 0;                     // Max gRPC threads; 0 = gRPC's default.
  int data_threads = 0;                // Threads serving Pull/Push; 0 = one per core.
  PartitionMap map;                    // Empty = contiguous map at version 1.
  absl::Duration evict_every = absl::Seconds(10);
  // Testing (fault tests): CoreOptions::checkpoint_write_delay.
  absl::Duration checkpoint_write_delay = absl::ZeroDuration();
  // Testing (fault tests): CoreOptions::testing_stalls.
  std::vector<TestingStall> testing_stalls;
};

class PsServer {
 public:
  // Builds the core and starts serving, with TLS when the --tls_* flags ask
  // for it (common/tls.h). INVALID_ARGUMENT for a bad config, index or TLS
  // files; UNAVAILABLE if the address cannot be bound.
  static absl::StatusOr<std::unique_ptr<PsServer>> Start(const PsServerOptions& options);

  ~PsServer();
  PsServer(const PsServer&) = delete;
  PsServer& operator=(const PsServer&) = delete;

  // host:port actually listening (the chosen port when asked for 0).
  const std::string& address() const { return address_; }
  int port() const { return port_; }
  ParameterServerCore* core() { return core_.get(); }
  // The token the scheduler's control RPCs carry (PsService).
  void set_control_token(uint64_t token) { service_->set_control_token(token); }
  // Registering with a scheduler: control RPCs wait up to `timeout` for the
  // token instead of being refused (PsService::await_control_token).
  void await_control_token(absl::Duration timeout) { service_->await_control_token(timeout); }
  PsService* service() { return service_.get(); }

  // Stops accepting, wakes waiting BSP pulls, finishes in-flight calls.
  void Shutdown();
  // Blocks until Shutdown has completed.
  void Wait();

 private:
  PsServer() = default;
  void EvictLoop(absl::Duration every);

  std::unique_ptr<ParameterServerCore> core_;
  std::unique_ptr<PsService> service_;
  std::unique_ptr<HealthService> health_;
  std::unique_ptr<grpc::Server> server_;
  std::string address_;
  int port_ = 0;
  std::thread evict_thread_;

  Mutex mu_;
  CondVar changed_;
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PS_SERVER_H_

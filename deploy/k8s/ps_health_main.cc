// ps_health: asks a gRPC server's health service (grpc.health.v1) whether it
// serves. Kubernetes exec probes run it (see deploy/README.md, "Health probes").
//
//   ps_health --addr=127.0.0.1:7000 [--service=NAME] [--timeout_ms=2000]
//
// Prints the status and exits 0 when SERVING, 1 when the server answered
// anything else (NOT_SERVING, UNKNOWN, unknown service), 2 when it could not
// be asked (nothing listening, timeout, bad flags).
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/status/status.h"
#include "absl/time/time.h"
#include "deploy/k8s/health_client.h"

ABSL_FLAG(std::string, addr, "", "host:port of the gRPC server to check.");
ABSL_FLAG(std::string, service, "", "Service name to check; empty = the whole server.");
ABSL_FLAG(int, timeout_ms, 2000, "Give up after this long.");

int main(int argc, char** argv) {
  absl::SetProgramUsageMessage("ps_health --addr=host:port [--service=NAME] [--timeout_ms=N]");
  absl::ParseCommandLine(argc, argv);
  const int timeout_ms = absl::GetFlag(FLAGS_timeout_ms);
  if (timeout_ms <= 0) {
    std::fprintf(stderr, "ps_health: --timeout_ms must be > 0\n");
    return 2;
  }
  auto status = shardps::CheckHealth(absl::GetFlag(FLAGS_addr), absl::GetFlag(FLAGS_service),
                                     absl::Milliseconds(timeout_ms));
  if (!status.ok()) {
    if (absl::IsNotFound(status.status())) {
      std::printf("SERVICE_UNKNOWN\n");
      return 1;
    }
    std::fprintf(stderr, "ps_health: %s\n", status.status().ToString().c_str());
    return 2;
  }
  std::printf("%s\n", shardps::ServingStatusName(*status));
  return *status == shardps::ServingStatus::kServing ? 0 : 1;
}

// A one-shot client of the standard gRPC health service (grpc.health.v1),
// used by ps_health for Kubernetes exec probes (Kubernetes 1.22 has no native
// gRPC probes) and by tests that wait for a process to come up.
//
// Thread-safe: CheckHealth keeps no state between calls.
#ifndef SHARDPS_DEPLOY_K8S_HEALTH_CLIENT_H_
#define SHARDPS_DEPLOY_K8S_HEALTH_CLIENT_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardps {

// The health service's answer (grpc.health.v1.HealthCheckResponse).
enum class ServingStatus { kUnknown = 0, kServing = 1, kNotServing = 2, kServiceUnknown = 3 };

// "SERVING", "NOT_SERVING", ...
const char* ServingStatusName(ServingStatus status);

// Calls grpc.health.v1.Health/Check on `address` (host:port) for `service`
// ("" = the whole server), waiting at most `timeout` for the connection and
// the answer. Blocks. Returns the serving status the server reported, or:
//   INVALID_ARGUMENT   `address` is empty or has no port;
//   UNAVAILABLE / DEADLINE_EXCEEDED   nothing answered in time;
//   NOT_FOUND          the server does not know `service`;
//   UNIMPLEMENTED      the server has no health service;
//   any other gRPC status the call ended with, with the server's message.
absl::StatusOr<ServingStatus> CheckHealth(const std::string& address, const std::string& service,
                                          absl::Duration timeout);

}  // namespace shardps

#endif  // SHARDPS_DEPLOY_K8S_HEALTH_CLIENT_H_

// What one peer may hold of a listening process (docs/security.md, "What a
// peer may hold"): ApplyPeerLimits sets, on a grpc::ServerBuilder, the
// limits of the job config's cluster section that gRPC enforces itself.
//
//  - max_concurrent_streams: calls in flight on one connection (HTTP/2
//    SETTINGS_MAX_CONCURRENT_STREAMS); a caller's further calls wait at the
//    caller, costing the server nothing.
//  - a memory quota (grpc::ResourceQuota::Resize): the buffers gRPC
//    allocates for what it receives (request bodies, also unfinished ones),
//    over every connection; past it gRPC cancels calls to get memory back.
//  - keepalive: a ping every answer_send_timeout_ms; a connection whose peer
//    does not answer within 20 s is closed with its calls and buffers.
//  - malformed requests: gRPC answers a request of a synchronous method it
//    cannot parse with INTERNAL and an empty message; an interceptor turns
//    that into INVALID_ARGUMENT naming the method.
//
// gRPC 1.51 has no bound on the number of connections
// (GRPC_ARG_MAX_ALLOWED_INCOMING_CONNECTIONS came later): connections are
// bounded by the quota's memory and by gRPC's handshake timeout (a peer that
// connects and never speaks HTTP/2 is closed after 120 s).
//
// Thread-safety: call while building the server, from one thread.
#ifndef SHARDPS_COMMON_PEER_LIMITS_H_
#define SHARDPS_COMMON_PEER_LIMITS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "grpcpp/grpcpp.h"
#include "proto/config.pb.h"

namespace shardps {

// Sets the limits above on `builder` for a process whose quota is
// `memory_bytes` (0: none) and whose synchronous server has at most
// `max_threads` threads (0: gRPC's default). Fields of `cluster` that are 0
// leave gRPC's defaults. `own_parsers` names methods ("/pkg.Service/Method")
// that parse their requests themselves (raw methods): they are not
// intercepted, which keeps the interceptor off a hot path.
void ApplyPeerLimits(const ClusterConfig& cluster, const char* name, uint64_t memory_bytes,
                     int max_threads, std::vector<std::string> own_parsers,
                     grpc::ServerBuilder* builder);

}  // namespace shardps

#endif  // SHARDPS_COMMON_PEER_LIMITS_H_

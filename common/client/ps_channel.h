// The one way to reach a parameter server: a ParameterServer stub over a
// channel with the process's credentials (mutual TLS when the --tls_* flags
// ask for it, common/tls.h) and, if given, message limits for the data path.
// The PS client, the scheduler's checkpoint/restore calls and its
// notifications all build their stubs here.
#ifndef SHARDPS_COMMON_CLIENT_PS_CHANNEL_H_
#define SHARDPS_COMMON_CLIENT_PS_CHANNEL_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "proto/ps.grpc.pb.h"

namespace shardps {

// `max_message_bytes` 0: gRPC's default limits (control RPCs). Errors: the
// TLS files of the flags cannot be read.
absl::StatusOr<std::unique_ptr<ParameterServer::Stub>> NewParameterServerStub(
    const std::string& address, uint64_t max_message_bytes = 0);

// The same, for callers that checked the TLS flags at start (a bad TLS
// setup is a fatal error here).
std::unique_ptr<ParameterServer::Stub> NewParameterServerStubOrDie(const std::string& address,
                                                                   uint64_t max_message_bytes = 0);

}  // namespace shardps

#endif  // SHARDPS_COMMON_CLIENT_PS_CHANNEL_H_

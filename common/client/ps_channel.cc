#include "common/client/ps_channel.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <climits>

#include "common/job_secret.h"
#include "common/tls.h"

namespace shardps {

namespace {

grpc::ChannelArguments Limits(uint64_t max_message_bytes) {
  grpc::ChannelArguments args;
  ConfigureChannel(&args);  // Reconnects within a second (common/tls.h).
  if (max_message_bytes > 0) {
    // Twice the limit: a part of a request may exceed the budget by a row.
    const int limit = static_cast<int>(std::min<uint64_t>(max_message_bytes * 2, INT32_MAX));
    args.SetMaxReceiveMessageSize(limit);
    args.SetMaxSendMessageSize(limit);
  }
  return args;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ParameterServer::Stub>> NewParameterServerStub(
    const std::string& address, uint64_t max_message_bytes) {
  auto credentials = ChannelCredentialsFromFlags();
  if (!credentials.ok()) return credentials.status();
  return ParameterServer::NewStub(
      CreateJobChannel(address, *credentials, Limits(max_message_bytes)));
}

std::unique_ptr<ParameterServer::Stub> NewParameterServerStubOrDie(const std::string& address,
                                                                   uint64_t max_message_bytes) {
  return ParameterServer::NewStub(
      CreateJobChannel(address, ChannelCredentialsFromFlagsOrDie(), Limits(max_message_bytes)));
}

}  // namespace shardps

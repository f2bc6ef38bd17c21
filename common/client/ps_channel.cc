#include "common/client/ps_channel.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <climits>

#include "common/tls.h"

namespace shardps {

namespace {

grpc::ChannelArguments Limits(uint64_t max_message_bytes) {
  grpc::ChannelArguments args;
  // Reach a restarted server within 100 ms of it listening (gRPC's default
  // reconnect backoff starts at 1 s and grows), as the scheduler channel.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 100);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
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
      grpc::CreateCustomChannel(address, *credentials, Limits(max_message_bytes)));
}


std::unique_ptr<ParameterServer::Stub> NewParameterServerStubOrDie(
    const std::string& address, uint64_t max_message_bytes) {
  return ParameterServer::NewStub(grpc::CreateCustomChannel(
      address, ChannelCredentialsFromFlagsOrDie(), Limits(max_message_bytes)));
}

}  // namespace shardps

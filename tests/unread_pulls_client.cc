// unread_pulls_client: the attack of issue 33 #3 on a parameter server, as
// a helper of tests/peer_limits_test. On one connection it starts `--pulls`
// EVAL pulls of `--keys` keys of table `--table` and never reads their
// answers: it asks only for each answer's initial metadata, which a server
// sends when it hands the answer (or a refusal) to gRPC, so the test knows
// when every answer is built. It then prints
//   UNREAD_PULLS_ANSWERED <n>
// and holds the connection, reading nothing, until it is killed.
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "grpcpp/generic/generic_stub.h"
#include "grpcpp/grpcpp.h"
#include "grpcpp/impl/codegen/proto_utils.h"
#include "proto/ps.pb.h"

ABSL_FLAG(std::string, server, "", "host:port of the ps_server.");
ABSL_FLAG(int, pulls, 10, "Pulls to start and leave unread.");
ABSL_FLAG(int, keys, 4096, "Keys per pull.");
ABSL_FLAG(uint32_t, table, 1, "Table id.");

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  shardps::PullRequest request;
  request.set_map_version(1);
  request.set_purpose(shardps::EVAL);
  shardps::TableKeys* tk = request.add_tables();
  tk->set_table_id(absl::GetFlag(FLAGS_table));
  for (int k = 0; k < absl::GetFlag(FLAGS_keys); ++k) tk->add_keys(k + 1);
  grpc::ByteBuffer bytes;
  bool own = false;
  if (!grpc::SerializationTraits<shardps::PullRequest>::Serialize(request, &bytes, &own).ok()) {
    return 2;
  }
  auto channel =
      grpc::CreateChannel(absl::GetFlag(FLAGS_server), grpc::InsecureChannelCredentials());
  grpc::GenericStub stub(channel);
  grpc::CompletionQueue cq;
  const int n = absl::GetFlag(FLAGS_pulls);
  std::vector<std::unique_ptr<grpc::ClientContext>> contexts;
  std::vector<std::unique_ptr<grpc::GenericClientAsyncResponseReader>> calls;
  for (int i = 0; i < n; ++i) {
    contexts.push_back(std::make_unique<grpc::ClientContext>());
    calls.push_back(
        stub.PrepareUnaryCall(contexts.back().get(), "/shardps.ParameterServer/Pull", bytes, &cq));
    calls.back()->StartCall();
    calls.back()->ReadInitialMetadata(reinterpret_cast<void*>(static_cast<intptr_t>(i + 1)));
  }
  int answered = 0;
  void* tag;
  bool ok;
  while (answered < n && cq.Next(&tag, &ok)) ++answered;
  std::printf("UNREAD_PULLS_ANSWERED %d\n", answered);
  std::fflush(stdout);
  while (true) pause();
}

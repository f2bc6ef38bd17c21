#include "common/peer_limits.h"

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "grpcpp/support/server_interceptor.h"

namespace shardps {
namespace {

using grpc::experimental::InterceptionHookPoints;

// A synchronous method's request that gRPC could not parse reaches the
// handler as a null message and is answered INTERNAL with an empty message
// (or the parser's own words). Seen at POST_RECV_MESSAGE, the answer's
// status is replaced at PRE_SEND_STATUS.
class MalformedRequestInterceptor final : public grpc::experimental::Interceptor {
 public:
  explicit MalformedRequestInterceptor(grpc::experimental::ServerRpcInfo* info)
      : method_(info->method() != nullptr ? info->method() : "") {}

  void Intercept(grpc::experimental::InterceptorBatchMethods* methods) override {
    if (methods->QueryInterceptionHookPoint(InterceptionHookPoints::POST_RECV_MESSAGE) &&
        methods->GetRecvMessage() == nullptr) {
      malformed_ = true;
    }
    if (malformed_ &&
        methods->QueryInterceptionHookPoint(InterceptionHookPoints::PRE_SEND_STATUS) &&
        methods->GetSendStatus().error_code() == grpc::StatusCode::INTERNAL) {
      methods->ModifySendStatus(
          grpc::Status(grpc::StatusCode::INVALID_ARGUMENT,
                       absl::StrCat(method_,
                                    " refused: the request is not a well-formed message of "
                                    "the method's request type")));
    }
    methods->Proceed();
  }

 private:
  const std::string method_;
  bool malformed_ = false;
};

// Intercepts every method but `own_parsers` (raw methods that parse their
// requests themselves: no interceptor on their path at all).
class MalformedRequestFactory final : public grpc::experimental::ServerInterceptorFactoryInterface {
 public:
  explicit MalformedRequestFactory(std::vector<std::string> own_parsers)
      : own_parsers_(std::move(own_parsers)) {}

  grpc::experimental::Interceptor* CreateServerInterceptor(
      grpc::experimental::ServerRpcInfo* info) override {
    const char* method = info->method();
    for (const std::string& own : own_parsers_) {
      if (method != nullptr && own == method) return nullptr;
    }
    return new MalformedRequestInterceptor(info);
  }

 private:
  const std::vector<std::string> own_parsers_;
};

}  // namespace

void ApplyPeerLimits(const ClusterConfig& cluster, const char* name, uint64_t memory_bytes,
                     int max_threads, std::vector<std::string> own_parsers,
                     grpc::ServerBuilder* builder) {
  grpc::ResourceQuota quota(name);
  if (memory_bytes > 0) quota.Resize(static_cast<size_t>(memory_bytes));
  if (max_threads > 0) quota.SetMaxThreads(max_threads);
  builder->SetResourceQuota(quota);
  if (cluster.max_concurrent_streams() > 0) {
    builder->AddChannelArgument(GRPC_ARG_MAX_CONCURRENT_STREAMS,
                                static_cast<int>(cluster.max_concurrent_streams()));
  }
  const int ping_every_ms = cluster.answer_send_timeout_ms() > 0
                                ? static_cast<int>(cluster.answer_send_timeout_ms())
                                : 60000;
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIME_MS, ping_every_ms);
  builder->AddChannelArgument(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 20000);
  std::vector<std::unique_ptr<grpc::experimental::ServerInterceptorFactoryInterface>> interceptors;
  interceptors.push_back(std::make_unique<MalformedRequestFactory>(std::move(own_parsers)));
  builder->experimental().SetInterceptorCreators(std::move(interceptors));
}

}  // namespace shardps

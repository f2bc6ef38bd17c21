#include "replica/stream_session.h"

#include <algorithm>
#include <deque>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/client/ps_channel.h"
#include "common/grpc_status.h"
#include "common/job_secret.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "proto/scheduler.grpc.pb.h"

namespace shardps {
namespace replica {
namespace {

// One FollowVersions call per server, from one version on, their parts in
// one queue.
class Session final : public StreamFollower::PartSource {
 public:
  Session(const std::vector<std::string>& addresses, const FollowVersionsRequest& request) {
    for (const std::string& address : addresses) {
      auto stream = std::make_unique<Stream>();
      stream->address = address;
      Stream* s = stream.get();
      streams_.push_back(std::move(stream));
      s->thread = std::thread([this, s, request] { Read(s, request); });
    }
  }

  ~Session() override {
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    changed_.SignalAll();
    for (auto& s : streams_) s->context.TryCancel();
    for (auto& s : streams_) s->thread.join();
  }

  std::shared_ptr<const VersionPart> Next(absl::Time deadline, std::string* broken) override {
    MutexLock lock(&mu_);
    while (queue_.empty() && broken_.empty() && absl::Now() < deadline) {
      changed_.WaitUntil(&mu_, deadline);
    }
    for (const auto& s : streams_) {
      if (broken_.empty() && queue_.empty() &&
          absl::Now() - s->heard > GrpcConnector::kSilentServer) {
        broken_ = absl::StrCat("the server at ", s->address, " sent nothing for ",
                               absl::FormatDuration(GrpcConnector::kSilentServer),
                               " (it sends a message every 2 s: cut off or stopped)");
      }
    }
    *broken = broken_;
    if (queue_.empty()) return nullptr;
    std::shared_ptr<const VersionPart> part = std::move(queue_.front());
    queue_.pop_front();
    changed_.SignalAll();
    return part;
  }

 private:
  struct Stream {
    std::string address;
    grpc::ClientContext context;
    std::thread thread;
    absl::Time heard = absl::Now();  // The last message (mu_).
  };

  void Read(Stream* s, const FollowVersionsRequest& request) {
    std::string why;
    absl::StatusOr<std::unique_ptr<ParameterServer::Stub>> stub =
        NewParameterServerStub(s->address, /*max_message_bytes=*/INT32_MAX);
    if (!stub.ok()) {
      why = stub.status().ToString();
    } else {
      std::unique_ptr<grpc::ClientReader<VersionPart>> reader =
          (*stub)->FollowVersions(&s->context, request);
      while (true) {
        auto part = std::make_shared<VersionPart>();
        if (!reader->Read(part.get())) break;
        MutexLock lock(&mu_);
        s->heard = absl::Now();
        if (part->idle()) continue;
        while (queue_.size() >= GrpcConnector::kMaxQueuedParts && !closed_) changed_.Wait(&mu_);
        if (closed_) break;
        queue_.push_back(std::move(part));
        changed_.SignalAll();
      }
      why = FromGrpcStatus(reader->Finish()).ToString();
    }
    MutexLock lock(&mu_);
    if (broken_.empty() && !closed_) {
      broken_ = absl::StrCat("the stream of the server at ", s->address, " ended: ", why);
      changed_.SignalAll();
    }
  }

  std::vector<std::unique_ptr<Stream>> streams_;
  Mutex mu_;
  CondVar changed_;
  std::deque<std::shared_ptr<const VersionPart>> queue_ ABSL_GUARDED_BY(mu_);
  std::string broken_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace

struct GrpcConnector::SchedulerStub {
  std::unique_ptr<Scheduler::Stub> stub;
};

GrpcConnector::GrpcConnector(std::string scheduler, bool verify)
    : scheduler_(std::move(scheduler)), verify_(verify) {}

GrpcConnector::~GrpcConnector() = default;

absl::StatusOr<std::unique_ptr<StreamFollower::PartSource>> GrpcConnector::Open(uint64_t generation,
                                                                                uint64_t clock) {
  // The job's partition map (its servers' addresses), one call.
  const auto unavailable = [this](const absl::Status& st) {
    return absl::UnavailableError(absl::StrCat("cannot get the servers from the scheduler at ",
                                               scheduler_, ": ", st.ToString()));
  };
  if (stub_ == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        ChannelCredentialsFromFlags();
    if (!credentials.ok()) return unavailable(credentials.status());
    grpc::ChannelArguments args;
    ConfigureChannel(&args);
    stub_ = std::make_unique<SchedulerStub>();
    stub_->stub = Scheduler::NewStub(CreateJobChannel(scheduler_, *credentials, args));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kSchedulerTimeout));
  GetPartitionMapRequest map_request;
  PartitionMapProto map;
  if (absl::Status st = FromGrpcStatus(stub_->stub->GetPartitionMap(&ctx, map_request, &map));
      !st.ok()) {
    return unavailable(st);
  }
  std::vector<std::string> addresses(map.server_addresses().begin(), map.server_addresses().end());
  addresses.erase(std::remove(addresses.begin(), addresses.end(), std::string()), addresses.end());
  FollowVersionsRequest request;
  request.set_after_generation(generation);
  request.set_after_clock(clock);
  request.set_verify(verify_);
  return std::make_unique<Session>(addresses, request);
}

}  // namespace replica
}  // namespace shardps

// The servers' delta stream over gRPC, for the StreamFollower
// (stream_follower.h): GrpcConnector asks the job's scheduler for the
// servers (GetPartitionMap, as a member: the job secret and TLS flags) and
// opens a session, one FollowVersions call per server from one version on
// (proto/ps.proto), each read by a thread of its own into one queue.
//
// A session ends (PartSource::Next says why) when a server's stream ends
// or when a server has sent nothing for kSilentServer: a server sends a
// message at least every 2 s (an idle one between cuts), so one silent that
// long is cut off or stopped; no read waits without end. The queue holds at
// most kMaxQueuedParts: a reader stops reading beyond it, so the server's
// sending thread waits, not training.
//
// Errors (Open): UNAVAILABLE naming the scheduler when it cannot be asked.
//
// Thread-safety: a connector is used by one thread (the follower's); a
// session's Next likewise, its readers being its own. Closing a session
// (its destructor) cancels the calls and joins the readers.
#ifndef SHARDPS_REPLICA_STREAM_SESSION_H_
#define SHARDPS_REPLICA_STREAM_SESSION_H_

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "replica/stream_follower.h"

namespace shardps {
namespace replica {

class GrpcConnector final : public StreamFollower::Connector {
 public:
  static constexpr absl::Duration kSchedulerTimeout = absl::Seconds(5);
  static constexpr absl::Duration kSilentServer = absl::Seconds(15);
  static constexpr size_t kMaxQueuedParts = 64;

  // `scheduler`: host:port. `verify`: ask for the servers' hash of their
  // rows at each cut (FollowVersionsRequest.verify).
  GrpcConnector(std::string scheduler, bool verify);
  ~GrpcConnector() override;

  absl::StatusOr<std::unique_ptr<StreamFollower::PartSource>> Open(uint64_t generation,
                                                                   uint64_t clock) override;

 private:
  struct SchedulerStub;

  const std::string scheduler_;
  const bool verify_;
  std::unique_ptr<SchedulerStub> stub_;  // Made at the first Open.
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_STREAM_SESSION_H_

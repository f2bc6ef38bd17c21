// StreamFollower: the replica's follower of the servers' delta stream
// (replica.h "Following the servers' delta stream"): from the version the
// replica serves, it reads the parts the servers send, puts them together
// into versions (version_assembler.h) and has the replica apply each
// complete one; it decides when to load a checkpoint from the files
// instead, and times the pushes of each version served ("Train to serve").
//
// States (state()):
//   kBootstrapping  nothing to follow from: no version served yet (a
//                   checkpoint is loaded from the files, every
//                   poll_interval, until one is), or a version the stream
//                   gave did not continue the one served or failed (a
//                   resync: the newest complete checkpoint is loaded once,
//                   whatever its clock). Then kFollowing.
//   kFollowing      a session is open (or being opened) from the version
//                   served; parts arrive and complete versions are served.
//                   A part of a version served already is skipped (each
//                   version is applied once, whatever a reconnect sends
//                   again); a part that does not fit the job, or a version
//                   whose parts disagree, is refused and recorded.
//   kLost           the session broke (a server restarted, moved, silent
//                   for 15 s; the scheduler unreachable): lost_reason()
//                   says why, each reason logged once while it lasts. The
//                   version served stays; a newer complete checkpoint from
//                   the files is taken meanwhile; the session is opened
//                   again after kReconnectWait, and the first part it
//                   brings makes the state kFollowing.
//
// The follower reaches the servers through a Connector (stream_session.h:
// the scheduler names them, one FollowVersions call each) and the replica
// through a Host; a test gives both without gRPC or models.
//
// Thread-safety: Run runs on one thread (the replica's follower thread)
// until Stop; Stop and the accessors are thread-safe. The follower calls
// the Host without holding its lock.
#ifndef SHARDPS_REPLICA_STREAM_FOLLOWER_H_
#define SHARDPS_REPLICA_STREAM_FOLLOWER_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/ps.pb.h"
#include "replica/latency_sketch.h"
#include "replica/served_model.h"
#include "replica/version_assembler.h"

namespace shardps {
namespace replica {

class StreamFollower {
 public:
  enum class State { kBootstrapping, kFollowing, kLost };

  // The wait before a lost stream is opened again.
  static constexpr absl::Duration kReconnectWait = absl::Milliseconds(500);

  // The parts of one session: every server's stream from one version on.
  class PartSource {
   public:
    virtual ~PartSource() = default;
    // The next part, nullptr at `deadline`. `broken` gets why the session
    // ended (a stream ended, a server silent too long); it then gives no
    // more parts.
    virtual std::shared_ptr<const VersionPart> Next(absl::Time deadline, std::string* broken) = 0;
  };

  class Connector {
   public:
    virtual ~Connector() = default;
    // A session of the versions after (generation, clock). An error says
    // why none opens (the stream is then lost).
    virtual absl::StatusOr<std::unique_ptr<PartSource>> Open(uint64_t generation,
                                                             uint64_t clock) = 0;
  };

  // What a served stream version gives the log.
  struct Applied {
    uint64_t rows = 0, table_hash = 0;
    uint64_t from = 0;  // The version served before.
    bool in_place = false;
    absl::Duration build;         // Its build.
    absl::Duration cut_to_serve;  // Its cut to its swap.
  };

  // The replica, as the follower uses it.
  class Host {
   public:
    virtual ~Host() = default;
    // The version served: (job generation, clock); nullopt before the first.
    virtual std::optional<std::pair<uint64_t, uint64_t>> Served() const = 0;
    // OK if `part` fits the job (ServedModel::CheckStreamPart).
    virtual absl::Status CheckPart(const VersionPart& part) const = 0;
    // Builds `version` on the version served and, if `check` of the built
    // version's table hash is OK, serves it; nullopt when it does not
    // continue the version served (nothing built). Errors: the build's, or
    // check's (the version is then not served).
    virtual absl::StatusOr<std::optional<Applied>> Apply(
        const VersionAssembler::Complete& version,
        absl::FunctionRef<absl::Status(uint64_t table_hash)> check) = 0;
    // Loads a checkpoint from the files: the newest complete one when
    // nothing is served (kFirst), or the stream cannot continue the version
    // served (kResync: whatever its clock), or one newer than the version
    // served (kNewer: the stream is lost). Whether the version changed.
    enum class Load { kFirst, kResync, kNewer };
    virtual bool LoadCheckpoint(Load load) = 0;
    // The replica's last error (Status.last_error).
    virtual void RecordError(const std::string& error) = 0;
  };

  struct Options {
    uint32_t num_partitions = 0;
    // How often nothing served looks for a checkpoint, and how long Next
    // waits before the follower looks at its stop flag.
    absl::Duration poll_interval = absl::Milliseconds(100);
  };
  // `host` and `connector` outlive the follower.
  StreamFollower(Options options, Host* host, Connector* connector);
  StreamFollower(const StreamFollower&) = delete;
  StreamFollower& operator=(const StreamFollower&) = delete;

  // Follows until Stop.
  void Run();
  // Makes Run return (after the version being applied, if any).
  void Stop();

  // What Status reports of the stream.
  struct StreamStatus {
    State state = State::kBootstrapping;
    std::string lost_reason;  // Empty unless kLost.
    // Versions checked against the servers' hash at their cut
    // (VersionPart.state_hash) and equal, and those that differed (not
    // served).
    uint64_t verified_versions = 0, hash_mismatches = 0;
    // Train to serve of the pushes in the versions served: how many, their
    // quantiles (within 2%) and maximum.
    uint64_t pushes_timed = 0;
    absl::Duration push_to_serve_p50, push_to_serve_p99, push_to_serve_max;
  };
  StreamStatus GetStatus() const;
  State state() const;

 private:
  bool stopping() const;
  // Waits `d`, or until Stop.
  void Wait(absl::Duration d);
  void SetState(State state, const std::string& lost_reason = "");
  // kBootstrapping: a checkpoint to follow from.
  void Bootstrap();
  // kFollowing or kLost: one session, until it breaks, a resync, or Stop.
  // False for a resync.
  bool FollowSession();
  // A part of the session: skipped, refused, or part of a version, applied
  // once complete. False when the stream cannot continue the version
  // served (a resync).
  bool TakePart(std::shared_ptr<const VersionPart> part, VersionAssembler* assembler);
  // Serves a complete version through the host; false for a resync.
  bool ApplyVersion(const VersionAssembler::Complete& complete,
                    const std::pair<uint64_t, uint64_t>& served);
  // OK if `table_hash` (of the version built) is the sum of the parts'
  // state_hash, or a part has none; else DATA_LOSS (counted). Counts the
  // verified ones.
  absl::Status Verify(const ServedModel::StreamVersion& version, uint64_t table_hash);
  // Times the pushes of `version` served at `served_at` (VersionPart
  // push_ages_micros plus its part's cut to served_at); the log's words.
  std::string TimePushes(const ServedModel::StreamVersion& version, absl::Time served_at);
  // The stream is lost for `why`.
  void Lose(const std::string& why);
  // A part or version refused: logged (every 10th) and the replica's last
  // error.
  void Record(const std::string& error);

  // Constant after construction.
  const Options options_;
  Host* const host_;
  Connector* const connector_;

  mutable Mutex mu_;
  CondVar stopped_;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  State state_ ABSL_GUARDED_BY(mu_) = State::kBootstrapping;
  std::string lost_reason_ ABSL_GUARDED_BY(mu_);
  uint64_t verified_versions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t hash_mismatches_ ABSL_GUARDED_BY(mu_) = 0;
  LatencySketch push_to_serve_ ABSL_GUARDED_BY(mu_);
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_STREAM_FOLLOWER_H_

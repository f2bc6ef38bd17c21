// Replica: a serving copy of a job's model that follows the job's servers'
// delta stream or its checkpoint directory (issue 34; docs/design.md
// "Serving replicas").
//
// ## What it serves
//
// A *version* is a checkpoint cut: from the files, a complete checkpoint
// (FULL, or DELTA with its chain; see common/checkpoint/checkpoint_dir.h);
// from the stream (below), the servers' parts of the cut. Version v holds
// exactly the rows of the cut at clock v, weights only for lookups, the
// whole model for predictions (ServedModel, served_model.h, over the
// trainer's own model code as ps_score has it: worker/export/local_model.h,
// the replica's one door into the worker role).
// Start() bootstraps from the newest complete checkpoint; a follower thread
// then follows the stream (options.scheduler set), or polls the directory
// every `poll_interval` and moves to the newest complete checkpoint newer
// than the one served, FULL or DELTA. Rows a delta deletes (evicted on the
// servers before the cut) are gone from the next version.
//
// The rest of this comment up to the stream's section is about versions
// from the files; a version from the stream is built the same way from the
// parts received (see "Following the servers' delta stream").
//
// ## Building a version
//
// The replica keeps two models (LeftRight, left_right.h): the served one and
// the *idle* one, the version before it. When the checkpoint is a DELTA whose
// chain is the served version's chain plus one or more deltas (each link
// identified by its clock and its manifest's created_unix_micros), only the
// new deltas' files are read (ServedModel::ReadDeltas: each verified before
// a row is applied), and the idle model is brought to the new version IN
// PLACE (ServedModel::CatchUp): first the links it lacks to equal the served
// model, kept parsed in memory from the build before (the served version's
// own deltas), written without reading a row; then the new ones, each
// link's deletions and rows, the weights each record replaces read first.
// The table hash and row count follow those records (a running sum from
// the served version's; served_model.h): no row is copied and no table
// walked, and a version costs the rows its deltas touch, written once in
// each model and read once. The new version is then served and the model
// served before becomes the idle one, lacking the new links.
//
// When there is no idle model (the version before was built from its
// chain), or readers still hold it after `reader_wait` (an answer begun
// before the last swap and still running), the new version is built on a
// copy of the served model (ServedModel::Copy: every row) plus the new
// deltas, and a held idle model is dropped from the pair (freed when its
// readers let go). Otherwise (a FULL checkpoint, a rollback, a chain that
// does not extend the served one, an incremental build that fails) the
// version is built from the files of its own chain alone, nothing carried
// over, and the served model is dropped, not kept as the idle one. Either
// way version v holds exactly the rows of checkpoint v's chain.
//
// ## Atomic versions
//
// A version is built on a model no reader can see (the idle one once its
// readers let go, a copy, or one loaded from files) while the current one
// keeps serving; then one pointer swap under a lock makes it current. A
// reader takes a handle to the current version (Current()) and answers from
// it alone, so an answer never mixes two versions; the model it holds is
// not changed while any handle to it is out (LeftRight lends a model from
// its swap until the last handle is dropped and hands it out for change
// only after that, the return ordered before the change by a mutex), and
// it stays alive while a reader holds it. Memory: two versions, plus one a
// reader still holds past `reader_wait` after the pair moved on, plus the
// parsed files of the deltas the idle model lacks.
//
// ## Rollbacks (generation fencing by checkpoint identity)
//
// After a rollback the job restores a complete checkpoint (the newest usable
// one) and writes the clocks after it again, in a new generation. The files
// show it in two ways, and the replica follows both:
//  - the checkpoint served is no longer on disk as it was loaded: set aside
//    (corrupt, checkpoint.on_corrupt FALL_BACK: renamed, never listed again)
//    or written again at the same clock after the rollback. A checkpoint is
//    identified by its clock AND its manifest's created_unix_micros; each
//    poll re-reads the served one's MANIFEST. When it is gone or changed,
//    the replica moves to the newest complete checkpoint on disk, even an
//    older clock (counted in `rollbacks`), and follows the new chain from
//    there;
//  - the new chain's deltas have the restore point as base: a version is
//    always exactly its own chain (built incrementally only when that chain
//    extends the served one link for link), so a pre-rollback delta (a checkpoint
//    the rollback discarded never got a MANIFEST, or was set aside) is never
//    part of a post-rollback version.
// A checkpoint refused once (does not load) is remembered by identity, so
// a good one written later at the same clock is still taken.
// Status reports the served checkpoint's generation as its MANIFEST records
// it (the job generation of the cut, rising at each rollback; 0 in manifests
// written before it was recorded), beside the rollbacks seen.
//
// ## Following the servers' delta stream (options.scheduler set)
//
// Every checkpoint cut is also a version the servers publish at once, from
// their copy, before any file is written (proto/ps.proto FollowVersions,
// server/version_log.h): per server the weights of the rows it copied and
// the keys it deleted, a FULL part or a DELTA on the cut at base_clock (of
// base_generation). The replica asks the scheduler for the servers
// (GetPartitionMap, as a member: the job secret and TLS flags), follows
// every server from the version it serves, and applies a version once parts
// holding every partition once have arrived (each checked first,
// ServedModel::CheckStreamPart): a FULL one as a new model, a DELTA one as
// the files' deltas are applied (on the idle model in place, catching up
// the version before first, or on a copy). A DELTA version applies when the
// version served is of the same job generation and at or after its base
// (a delta since the base holds every change since any later cut of the
// same history), or is exactly its base (clock and generation: the first
// delta after a rollback, on the restore point). Otherwise (a rollback: a
// newer generation; parts the servers no longer keep; a restarted server
// whose deltas the replica cannot place) the replica loads the newest
// complete checkpoint from the files, as at its start, and follows from
// there (counted in `resyncs`; also in `rollbacks` when that checkpoint is
// older than the version served).
// Files are read only then: a version so costs its rows once on the wire
// and no read, and is served without waiting for the files, the MANIFEST
// or a poll. A version so served is the trainer's state at the cut; when
// the cut's checkpoint completes, its files hold the same rows
// (ps_table_hash of it equals the version's table hash). A lost stream (a
// server restarted, moved, unreachable, or silent for 15 s: a server sends
// an idle message every 2 s between cuts) is opened again from the version
// served, after the scheduler names the servers again; meanwhile a newer
// complete checkpoint in the files is taken.
//
// With checkpoint.version_every_steps the servers also cut versions between
// checkpoints, each a delta on the last complete checkpoint: they apply as
// any delta does, and a replica that loads that checkpoint continues with
// any of them. With verify_stream each version's parts carry the hash of
// every row their server owned at the cut; the replica compares the
// version it built with their sum before serving it and, if they differ,
// serves nothing of it and loads a checkpoint (hash_mismatches).
//
// A checkpoint that fails to load (corrupt, removed by GC mid-read) is
// skipped, logged, and reported as last_error; the replica keeps serving the
// version it has and tries newer checkpoints as they appear.
//
// ## Metrics (common/metrics.h; the process's /metrics)
//
//   shardps_replica_version                   gauge: clock of the version served
//   shardps_replica_newest_checkpoint         gauge: newest clock with a MANIFEST on disk
//   shardps_replica_version_lag               gauge: newest - served (clocks, >= 0)
//   shardps_replica_versions_applied_total    counter
//   shardps_replica_versions_incremental_total counter: of those, built from the deltas after the
//                                             version before (in place or on a copy)
//   shardps_replica_versions_in_place_total   counter: of those, built in place on the idle model
//   shardps_replica_rollbacks_total           counter: moves to an older or rewritten checkpoint
//   shardps_replica_version_rows              gauge: rows of the version served
//   shardps_replica_version_bytes             gauge: bytes of its own checkpoint's files
//   shardps_replica_bytes_read_total          counter: file bytes read to build versions
//   shardps_replica_build_seconds             histogram: build of one version
//   shardps_replica_train_to_serve_seconds    histogram: the cut's time in the manifest
//                                             (cut_unix_micros, else created_unix_micros) to the
//                                             swap
//   shardps_replica_push_to_serve_seconds     histogram: stream versions: each push's apply on
//                                             its server to the swap (below)
//
// ## Train to serve
//
// Each server stamps the pushes it applies (a BSP clock as one) and sends,
// with its part of the next cut, how long before the cut each was applied
// (VersionPart.push_ages_micros, a sample of at most 4096 a cut). When a
// stream version is served, a push's train-to-serve is its age at its
// server's cut plus that cut's time to the swap: from the apply to the
// first version that shows it, the wait for the next cut included, with
// no reads added to the job. Only the first of the two terms spans hosts
// (the server's cut_unix_micros against the replica's clock), as the cut's
// own metric does. Versions loaded from files time no pushes.
//
// ## Components: who writes what
//
//   Replica          (this class) the version served and its swap
//                    (MakeCurrent: the handle readers take, its identity and
//                    generation, the status counters and metrics, in one
//                    critical section), the last error, the follower thread.
//   ModelPair        (model_pair.h) the two models, what the idle one lacks,
//                    the served version's chain; builds each version from the
//                    files or the stream. Guarded by the replica's build
//                    lock: one build at a time, from either source.
//   FilePoller       (file_poller.h) which checkpoint to move to, and the
//                    checkpoints refused; the newest on disk.
//   StreamFollower   (stream_follower.h) the stream's state (bootstrapping,
//                    following, lost) and why it is lost, the versions
//                    being received (version_assembler.h), the checks
//                    against the servers' hashes and the push timings; it
//                    reads the servers through stream_session.h.
//   ServedModel      (served_model.h) one version: its model, clock, hash.
// Locks, outermost first: the poller's poll lock, the replica's build lock,
// then the replica's status lock or the follower's own (its hash check runs
// in a build); the follower never calls the replica holding its own.
//
// Thread-safety: every method is thread-safe. Start and the destructor are
// called once each, by the owner.
#ifndef SHARDPS_REPLICA_REPLICA_H_
#define SHARDPS_REPLICA_REPLICA_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "replica/file_poller.h"
#include "replica/model_pair.h"
#include "replica/served_model.h"
#include "replica/stream_follower.h"
#include "replica/version_assembler.h"
#include "replica/version_id.h"

namespace shardps {
namespace replica {

struct ReplicaOptions {
  JobConfig config;            // Finalized (common/config.h LoadJobConfig).
  std::string checkpoint_dir;  // Empty: config.checkpoint().dir().
  // A poll that finds nothing new lists the directory and reads MANIFEST twice
  // (a few KiB); half an interval is added to train-to-serve on average.
  absl::Duration poll_interval = absl::Milliseconds(100);
  // How long a build waits for the readers of the idle model (answers
  // begun before the last swap) before it builds on a copy instead.
  absl::Duration reader_wait = absl::Milliseconds(200);
  // Non-empty: the job's scheduler (host:port); the replica follows the
  // servers' delta stream (see the top) and reads files only to load a
  // checkpoint. Empty: it follows the checkpoint files.
  std::string scheduler;
  // With scheduler: ask the servers for the hash of their rows at each cut
  // (FollowVersionsRequest.verify, a full copy a cut on every server) and
  // compare the version built with it before serving it; a version that
  // differs is not served (the replica loads a checkpoint instead). An
  // audit of exactness: tests, an operator's check.
  bool verify_stream = false;
  // The nice value (Linux, -20..19) of the thread that follows and builds
  // versions, and of the stream's readers; answers keep the process's. A
  // replica on training's cores with 19 builds on the CPU training leaves
  // idle, and a version takes longer when there is none.
  int build_nice = 0;
};

struct ReplicaStatus {
  bool loaded = false;
  uint64_t version = 0;
  uint64_t generation = 0;  // Of the served checkpoint's cut (0: unknown).
  uint64_t table_hash = 0;
  uint64_t rows = 0;
  std::string checkpoint_dir;  // Of the version served.
  uint64_t versions_applied = 0;
  uint64_t rollbacks = 0;           // Moves to an older or rewritten checkpoint.
  uint64_t newest_on_disk = 0;      // Newest clock with a MANIFEST at the last poll.
  uint64_t version_bytes = 0;       // Bytes of the served checkpoint's own files.
  int64_t created_unix_micros = 0;  // The served checkpoint's manifest.
  std::string last_error;
  // Following the stream: versions applied from it, their wire bytes, and
  // loads of a checkpoint to follow it from again (see the top).
  bool streaming = false;
  // Why the stream is not followed now (a server or the scheduler lost,
  // unreachable); empty while it is.
  std::string stream_error;
  uint64_t stream_versions = 0;
  uint64_t stream_bytes = 0;
  uint64_t resyncs = 0;
  // With verify_stream: stream versions whose table hash equalled the
  // servers' at the cut, and those that did not (not served).
  uint64_t verified_versions = 0;
  uint64_t hash_mismatches = 0;
  // Train to serve of the pushes in the stream versions served (see
  // "Train to serve" at the top): how many, and their quantiles (within
  // 2%) and maximum.
  uint64_t pushes_timed = 0;
  absl::Duration push_to_serve_p50, push_to_serve_p99, push_to_serve_max;
};

class Replica {
 public:
  // INVALID_ARGUMENT without a checkpoint directory or with a poll interval
  // <= 0. Loads nothing.
  static absl::StatusOr<std::unique_ptr<Replica>> Create(ReplicaOptions options);
  // Stops the follower (waits for a version being built to finish).
  ~Replica();
  Replica(const Replica&) = delete;
  Replica& operator=(const Replica&) = delete;

  // Loads the newest complete checkpoint, if there is one (none yet is not
  // an error: the follower waits for it), and starts the follower.
  void Start();

  // The version served, or nullptr before the first one. Hold it for the
  // whole of an answer.
  std::shared_ptr<ServedModel> Current() const;

  ReplicaStatus Status() const;

  // Moves to the newest complete checkpoint newer than the version served,
  // if there is one, or to the newest complete one at all when the served
  // checkpoint is gone or rewritten (a rollback; see the top); returns
  // whether it changed version. The follower calls it; tests may too. Never
  // returns an error: a checkpoint that fails is recorded.
  bool PollOnce();

  // Blocks until the version served is >= `version`. DEADLINE_EXCEEDED
  // naming both versions and the directory when `deadline` passes first.
  absl::Status WaitForVersion(uint64_t version, absl::Time deadline) const;

 private:
  // The poller's and the follower's view of the replica (replica.cc).
  class PollerHost;
  class FollowerHost;

  explicit Replica(ReplicaOptions options);
  // The follower thread following the files: a poll every poll_interval.
  void FollowFiles();
  std::optional<VersionId> ServedId() const;
  // The version served's (job generation, clock).
  std::optional<std::pair<uint64_t, uint64_t>> ServedKey() const;
  void RecordError(const std::string& error);

  // FilePoller::Host::ServeCheckpoint: builds and serves a checkpoint.
  absl::Status ServeCheckpoint(const checkpoint::CheckpointEntry& entry, int64_t created,
                               const FilePoller::Move& move) ABSL_LOCKS_EXCLUDED(build_mu_);
  // StreamFollower::Host::Apply: builds, checks and serves a stream version.
  absl::StatusOr<std::optional<StreamFollower::Applied>> ServeStreamVersion(
      const VersionAssembler::Complete& version,
      absl::FunctionRef<absl::Status(uint64_t table_hash)> check) ABSL_LOCKS_EXCLUDED(build_mu_);

  // What serving a built version records besides the model.
  struct ServedVersion {
    VersionId id;
    uint64_t bytes = 0;  // Its own files', or received from the stream.
    uint64_t generation = 0;
    absl::Time cut;        // When its cut began.
    absl::Duration build;  // Its build's time.
    bool incremental = false, in_place = false, rollback = false, resync = false, stream = false;
    uint64_t bytes_read = 0;         // Checkpoint files read.
    std::optional<uint64_t> newest;  // The newest checkpoint on disk (the lag), if polled.
  };
  // Makes `next` (ModelPair::Serve's result) the current version and counts
  // it in the status and the metrics, in one critical section; `next` then
  // holds the version served before. Returns cut to serve.
  absl::Duration MakeCurrent(std::shared_ptr<ServedModel>* next, const ServedVersion& v)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(build_mu_);

  // Constant after construction.
  const ReplicaOptions options_;
  const std::string root_;

  // One build at a time, from the files or the stream.
  Mutex build_mu_;
  ModelPair pair_ ABSL_GUARDED_BY(build_mu_);

  mutable Mutex mu_;
  mutable CondVar changed_;  // Signalled on a new version and on stop.
  std::shared_ptr<ServedModel> current_ ABSL_GUARDED_BY(mu_);
  VersionId current_id_ ABSL_GUARDED_BY(mu_);
  uint64_t current_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t current_generation_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t versions_applied_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rollbacks_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t resyncs_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stream_versions_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t stream_bytes_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  // The sources of versions; each owns its state (see the top). The
  // follower and its connector exist when following the stream.
  const std::unique_ptr<PollerHost> poller_host_;
  FilePoller poller_;
  std::unique_ptr<FollowerHost> follower_host_;
  std::unique_ptr<StreamFollower::Connector> connector_;
  std::unique_ptr<StreamFollower> follower_;

  std::thread thread_;
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_REPLICA_H_

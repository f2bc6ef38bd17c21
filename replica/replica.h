// Replica: a serving copy of a job's model that follows the job's checkpoint
// directory (issue 34, first slice; docs/design.md "Serving replicas").
//
// ## What it serves
//
// A *version* is a complete checkpoint (FULL, or DELTA with its chain; see
// common/checkpoint/checkpoint_dir.h): version v holds exactly the rows of the
// cut at clock v, weights only for lookups, the whole model for predictions
// (exporter::ServedModel, worker/export/served_model.h: the trainer's own
// model code, as ps_score). Start() bootstraps from the newest complete
// checkpoint; a follower thread then polls the directory every
// `poll_interval` and moves to the newest complete checkpoint newer than the
// one served, FULL or DELTA. Rows a delta deletes (evicted on the servers
// before the cut) are gone from the next version.
//
// ## Atomic versions
//
// The next version is built aside (its own tables and model, restored and
// verified file by file) while the current one keeps serving; then one
// pointer swap under a lock makes it current. A reader takes a shared
// reference to the current version (Current()) and answers from it alone, so
// an answer never mixes two versions and a version stays alive while a
// reader holds it. Memory: up to two versions (plus the ones readers hold).
//
// ## What this slice does not do
//
// It follows checkpoint FILES: a version appears once the scheduler has
// written its MANIFEST, so serving lags training by the checkpoint cadence
// plus the restore. The server-side delta stream of issue 34 (versions
// pushed by the servers with tombstones, fenced by the job generation,
// resumable) is the next slice; so is following a rollback (this replica
// never moves to an older clock: after a rollback the job writes newer
// clocks again, which it then follows). The job generation is not in the
// files, so Status reports generation 0.
//
// A checkpoint that fails to load (corrupt, removed by GC mid-read) is
// skipped, logged, and reported as last_error; the replica keeps serving the
// version it has and tries newer checkpoints as they appear.
//
// Thread-safety: every method is thread-safe. Start and the destructor are
// called once each, by the owner.
#ifndef SHARDPS_REPLICA_REPLICA_H_
#define SHARDPS_REPLICA_REPLICA_H_

#include <cstdint>
#include <memory>
#include <string>
#include <thread>

#include "absl/container/flat_hash_set.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "worker/export/served_model.h"

namespace shardps {
namespace replica {

struct ReplicaOptions {
  JobConfig config;            // Finalized (common/config.h LoadJobConfig).
  std::string checkpoint_dir;  // Empty: config.checkpoint().dir().
  absl::Duration poll_interval = absl::Milliseconds(200);
};

struct ReplicaStatus {
  bool loaded = false;
  uint64_t version = 0;
  uint64_t table_hash = 0;
  uint64_t rows = 0;
  std::string checkpoint_dir;  // Of the version served.
  uint64_t versions_applied = 0;
  std::string last_error;
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
  std::shared_ptr<exporter::ServedModel> Current() const;

  ReplicaStatus Status() const;

  // Moves to the newest complete checkpoint newer than the version served,
  // if there is one; returns whether it did. The follower calls it; tests
  // may too. Never returns an error: a checkpoint that fails is recorded.
  bool PollOnce();

  // Blocks until the version served is >= `version`. DEADLINE_EXCEEDED
  // naming both versions and the directory when `deadline` passes first.
  absl::Status WaitForVersion(uint64_t version, absl::Time deadline) const;

 private:
  explicit Replica(ReplicaOptions options);
  void Follow();

  // Constant after construction.
  const ReplicaOptions options_;
  const std::string root_;

  // Only PollOnce (the follower, or a test) writes these; poll_mu_ makes two
  // polls build one version, not two.
  Mutex poll_mu_;
  absl::flat_hash_set<uint64_t> refused_ ABSL_GUARDED_BY(poll_mu_);

  mutable Mutex mu_;
  mutable CondVar changed_;  // Signalled on a new version and on stop.
  std::shared_ptr<exporter::ServedModel> current_ ABSL_GUARDED_BY(mu_);
  uint64_t versions_applied_ ABSL_GUARDED_BY(mu_) = 0;
  std::string last_error_ ABSL_GUARDED_BY(mu_);
  bool stop_ ABSL_GUARDED_BY(mu_) = false;

  std::thread follower_;
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_REPLICA_H_

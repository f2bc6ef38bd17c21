// VersionLog: the versions a server published for serving replicas, kept
// for its followers (proto/ps.proto FollowVersions; docs/design.md "Serving
// replicas").
//
// Each checkpoint cut's copy is also a version: MakeVersionPart turns the
// copy (a StoreSnapshot) into this server's part of it, the weights of the
// rows it holds (dim floats a row, no optimizer state, shared unadmitted rows
// under their reserved keys) and the keys it deletes, per table, as chunks
// of at most about half the job's cluster.max_message_bytes (a part of any
// size fits the messages gRPC sends). The log
// keeps the newest parts, ordered by (job generation, clock): at most
// kMaxParts, and fewer while they hold more than max_bytes (the newest is
// always kept). A part published again at the same (generation, clock) (a
// cut retried) replaces the one before.
//
// Parts are built only once a follower has asked (Next): a job no replica
// follows pays nothing beyond a flag check per cut. A replica that comes
// later loads a checkpoint first, then follows from there.
//
// Next hands a follower the oldest kept part after the one it holds, so a
// follower behind by more than the log sees the first part it gets skip
// versions (a base it does not hold) and loads a checkpoint instead: a slow
// follower never holds up the server beyond its own sending thread, and
// memory stays bounded.
//
// Thread-safety: thread-safe. Parts are immutable once published; a
// follower keeps the one it is sending alive after the log dropped it.
#ifndef SHARDPS_SERVER_VERSION_LOG_H_
#define SHARDPS_SERVER_VERSION_LOG_H_

#include <atomic>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/ps.pb.h"
#include "server/snapshot.h"
#include "server/table_store.h"

namespace shardps {

// This server's part of the version cut by `snapshot` (taken from `store`
// at the cut): `full` for a full snapshot, else a delta on (base_clock,
// base_generation). As chunks (proto/ps.proto VersionPart.chunk) of at
// most about `max_chunk_bytes` each (one row at least), each carrying
// `state_hash` when set.
using VersionChunks = std::vector<std::shared_ptr<const VersionPart>>;
// `push_ages` (ApplyStamps::TakeAges at the cut) goes in chunk 0.
VersionChunks MakeVersionPart(const StoreSnapshot& snapshot, const TableStore& store,
                              uint64_t clock, uint64_t generation, uint64_t base_clock,
                              uint64_t base_generation, uint32_t server_index, absl::Time cut,
                              size_t max_chunk_bytes,
                              std::optional<uint64_t> state_hash = std::nullopt,
                              const std::vector<uint32_t>& push_ages = {});

// The TableHash (common/table_hash.h) of the weights a full `snapshot`
// holds, as a version part carries them (VersionPart.state_hash).
uint64_t SnapshotWeightsHash(const StoreSnapshot& snapshot, const TableStore& store);

// ApplyStamps: when the server applied its pushes since its last cut, for
// the followers' train-to-serve (VersionPart.push_ages_micros). The server
// calls Record once a push (BSP: a clock) is applied, only while a follower
// wants versions, and TakeAges at every cut under the workers' hold: each
// recorded push's age at the cut, and the next period begins. A period
// keeps at most kMaxSamples, a uniform sample of all recorded (reservoir
// sampling), so a long period costs bounded memory.
//
// Thread-safety: thread-safe.
class ApplyStamps {
 public:
  static constexpr size_t kMaxSamples = 4096;
  void Record(absl::Time applied);
  // Ages in microseconds (0 for a stamp after `cut`, at most UINT32_MAX),
  // in no particular order; the period starts again empty.
  std::vector<uint32_t> TakeAges(absl::Time cut);
  // Pushes recorded in the period so far (the sample holds fewer once
  // past kMaxSamples).
  uint64_t recorded() const;

 private:
  mutable Mutex mu_;
  std::vector<int64_t> micros_ ABSL_GUARDED_BY(mu_);
  uint64_t recorded_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t rng_ ABSL_GUARDED_BY(mu_) = 0x9e3779b97f4a7c15ull;
};

class VersionLog {
 public:
  static constexpr size_t kMaxParts = 8;
  explicit VersionLog(uint64_t max_bytes) : max_bytes_(max_bytes) {}

  // Whether a follower has ever asked: parts are worth building.
  bool wanted() const;
  // Whether a follower has ever asked for VersionPart.state_hash
  // (FollowVersionsRequest.verify): each cut then hashes every owned row.
  bool hashes_wanted() const;
  void WantHashes();
  // Adds a part (its chunks, see the top) and wakes the followers.
  void Publish(VersionChunks part);
  // The oldest kept part whose (generation, clock) is after the given one;
  // waits for one until `deadline` (nullptr then, or once Stop was called).
  std::shared_ptr<const VersionChunks> Next(uint64_t after_generation, uint64_t after_clock,
                                            absl::Time deadline);
  // Wakes every waiting Next; later ones return nullptr at once.
  void Stop();
  bool stopped() const;

  // Parts kept and their bytes (tests, stats).
  size_t parts() const;
  uint64_t bytes() const;

 private:
  using Key = std::pair<uint64_t, uint64_t>;  // (generation, clock).
  const uint64_t max_bytes_;
  mutable Mutex mu_;
  CondVar published_;
  // Set under mu_; read without it (wanted() is on the push path).
  std::atomic<bool> wanted_{false};
  bool hashes_wanted_ ABSL_GUARDED_BY(mu_) = false;
  bool stopped_ ABSL_GUARDED_BY(mu_) = false;
  struct Kept {
    Key key;
    std::shared_ptr<const VersionChunks> chunks;
    uint64_t bytes = 0;
  };
  std::deque<Kept> parts_ ABSL_GUARDED_BY(mu_);
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_VERSION_LOG_H_

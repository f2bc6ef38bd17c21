// The parameter server's logic, without gRPC: requests and responses are the
// proto messages of proto/ps.proto, results are absl::Status. The gRPC
// service (ps_service.h) is a thin shell over one of these.
//
// It owns the server's TableStore, its partition ownership (a PartitionMap
// and this server's index) and the BSP clock buffer. Every request is
// validated in full before anything changes; a refused request changes
// nothing. Errors:
//   INVALID_ARGUMENT   unknown table; unknown encoding; value bytes not a
//                      multiple of the encoding / of the table's dim ("wrong
//                      dim"); key count not matching the values; a table
//                      twice in one push; duplicate keys in one push; a
//                      non-finite gradient in a REJECT table; non-finite
//                      lr_scale; a gradient beyond max_gradient_abs in a
//                      REJECT table; more keys than max_keys_per_request
//                      (push, training pull, InitRows of a SPARSE table);
//                      a dense chunk index out of range; a pull
//                      with_state that is not a TRAIN pull in FP32, or of
//                      a table with admission; a partition list
//                      (Restore partitions, Control drop_partitions) with
//                      a partition out of range or named twice.
//   ABORTED            the request's map version is not the server's, or a
//                      key's partition belongs to another server. The message
//                      contains "map version N" (N = the server's version):
//                      refresh the map and retry.
//   RESOURCE_EXHAUSTED a pull whose response would exceed max_message_bytes.
//   FAILED_PRECONDITION BSP push from a rank that is not active; a Control
//                      with an older map version or a wrong partition count;
//                      a pull, push or checkpoint of an older job generation
//                      (message starting "stale generation: ",
//                      common/generation.h: the sender must rewind); a
//                      partial Restore or a drop of a partition this server
//                      owns, a BSP partial Restore of another clock than
//                      the applied one.
//   ALREADY_EXISTS     BSP: this rank already pushed this clock (a retry of a
//                      push that was received; safe to treat as success).
//   DEADLINE_EXCEEDED  BSP pull whose clock did not close before the deadline.
//   UNAVAILABLE        the core is shutting down; a pull, push or checkpoint
//                      of a newer job generation than this server's (it has
//                      not been restored into it yet: retry).
//
// Checkpoints (server/snapshot.h has the file layout). Checkpoint copies the
// rows of the partitions this server owns into memory (each table stripe
// under its lock; in BSP also under the clock lock, and only if exactly the
// clocks < request.clock have been applied, else FAILED_PRECONDITION), then
// writes the partition-group files from the copy into
// <config checkpoint.dir>/ckpt-<clock>/ and returns their manifest entries. The caller (the
// scheduler) holds every worker at the clock, so the copy is a consistent cut; pushes may resume
// once the copy is done: phase COPY answers then and writes the files on a
// background thread, a later COLLECT waits for them (COPY_AND_WRITE does
// both in one call). One background write at a time: a new COPY or a
// Restore first waits for (and drops the result of) an uncollected one.
// Each copy is also a version for serving replicas (versions()). Phase
// VERSION copies only the rows changed since a delta base and publishes
// them as a version, writing nothing and remembering no base.
// Requests name checkpoints by clock only: every file this server reads or
// writes is under its own config's checkpoint.dir, never a path from the
// wire. Restore verifies every file it needs first (memory: those files), then,
// with every pull and push held out, clears the tables, writes the rows of
// the partitions it owns, sets the BSP and eviction clocks to the
// checkpoint's (buffered pushes dropped) and moves the server into the
// request's job generation. A refused restore changes nothing. An `initial`
// restore empties the tables (every row reads its initial value again) at
// clock 0. Admission counts of keys without a row are not saved.
//
// Job generations (common/generation.h). The server serves pulls, pushes and
// checkpoints of its generation only (0 until a restore sets one). The check
// and the request's effect happen under a shared lock that Restore takes
// exclusively, so a request of the old generation in flight during a restore
// is either finished before it or refused after it, never applied after it;
// a BSP pull waiting for its clock is woken by the restore and refused.
// InitRows is not checked: it only writes absent rows, with values every
// generation agrees on.
//
// Resharding (docs/design.md, "Resharding"): a Restore naming `partitions`
// adds those partitions' rows, optimizer state and shared rows from a
// checkpoint to a running server that does not own them yet, keeping
// everything else (rows, clocks, generation, buffered pushes); a Control
// naming drop_partitions frees the rows and pending admission counts of
// partitions it no longer owns. Neither holds pulls or pushes out beyond
// the table stripes' locks: they touch only partitions no request of the
// current map may reach. Delta checkpoints need no care: a delta base
// records the partitions owned then, so the first checkpoint after the map
// switch is a full one.
// A move in two steps adds the bulk while training goes on (Restore
// `precopy`: no clock check; the server records the clock each partition
// was pre-copied from) and the rest under the hold of a later cut (Restore
// `catch_up_from`: the links of that cut's chain after the pre-copy's
// checkpoint, applied onto the rows held). A catch-up of a partition this
// process did not pre-copy from that clock (restarted, dropped since) is
// ABORTED: the move pre-copies again. The eviction sweep skips partitions
// the server does not own, so pre-copied rows stay exactly the source's
// until the catch-up (a row the source evicts later is in the catch-up's
// deletions).
//
// Delta checkpoints (request.delta, base_clock B): the copy holds only the
// rows changed since this server's copy for checkpoint B (or
// since its restore of B), plus the keys evicted since; the files are delta
// files on B. The server remembers, per checkpoint it copied or restored, the
// table generation of that moment and its owned partitions (the last
// kRememberedBases of them; deletions older than all of them are trimmed).
// If it has no such record of B (restarted, B never copied here) or owned
// other partitions then, the delta is refused with FAILED_PRECONDITION and
// nothing is written: the caller takes a full checkpoint. A restore of a
// DELTA checkpoint resolves its chain (checkpoint_dir.h LoadCheckpoint),
// verifies every owned file of every link (CRC, kind, base), then applies
// the FULL link and each delta in order; a missing or corrupt link refuses
// the restore naming the file, and nothing changes.
//
// Checkpoint errors: INVALID_ARGUMENT (unknown phase, a delta whose
// base_clock is not older than its clock), FAILED_PRECONDITION (the config
// sets no checkpoint.dir),
// ALREADY_EXISTS (that checkpoint has a MANIFEST), FAILED_PRECONDITION (BSP
// clock; COLLECT with nothing to collect; a delta without its base), I/O
// errors naming the path. Restore errors: NOT_FOUND / DATA_LOSS /
// FAILED_PRECONDITION naming the manifest or file.
//
// Consistency (docs/design.md). ASP/SSP: each push is applied on arrival (one
// optimizer step per key per push), lr_scale from the push (unset = 1).
// BSP: pushes of clock c are buffered per rank; when every active worker
// (initially ranks 0..num_workers-1, changed by Control) has pushed c, and
// clocks < c are applied, the core applies one step per key with the mean
// gradient: the sum over ranks in rank order (a key a rank did not push adds
// nothing), divided by the number of ranks in (active set U ranks that pushed
// c). The lr_scale is the lowest such rank's. The result is bit-identical
// whatever the arrival order. Clocks start at 0. A BSP pull with clock t
// waits until clocks < t are applied (an empty push still closes a clock, so
// workers push to every server every step).
//
// What a push may carry, whatever the mode: a worker_rank below the job's
// num_workers; an lr_scale in [0, kMaxLrScale] (table_store.h); in BSP a
// clock below applied + BspAggregator::kClocksAhead (buffers are bounded);
// per table at most max_keys_per_request keys (SPARSE), chunk indexes below
// the table's chunks (DENSE), gradients within max_gradient_abs (the table's
// non_finite policy decides what happens to the others): the limits are
// resolved from the job config (server/request_limits.h). Anything else is
// INVALID_ARGUMENT and changes nothing. A training pull and an InitRows of a
// SPARSE table carry at most max_keys_per_request keys too. Every check that
// needs no gradient value (generation, map version, ownership, key counts
// and ranges, sizes) runs before a gradient is decoded or a sparse one
// expanded, so a refused push allocates nothing.
//
// Eviction by clocks (ttl_clocks). In SSP/ASP the push clock only stamps the
// rows a push touches, and one push moves that clock forward by at most
// kMaxClockStep. A row is evicted once eviction_clock() is ttl_clocks past
// its stamp, and eviction_clock() never passes the clock the scheduler says
// the job reached (GrantClock): an honest row's stamp is at most the real
// clock it was touched at, so no sequence of pushes, whatever clocks they
// claim, ages a row out before the job has run ttl_clocks clocks past its
// last touch. (A claimed clock far ahead only stamps rows later, keeping
// them longer.) A server without a scheduler (tools, tests) has no grants:
// there each push moves the eviction clock kMaxClockStep at most.
//
// Thread-safety: all methods are thread-safe. Pull may block (BSP); the
// others do not wait for other requests beyond short critical sections.
#ifndef SHARDPS_SERVER_PARAMETER_SERVER_CORE_H_
#define SHARDPS_SERVER_PARAMETER_SERVER_CORE_H_

#include <atomic>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/mutex.h"
#include "common/partition.h"
#include "common/testing_stall.h"
#include "proto/config.pb.h"
#include "proto/ps.pb.h"
#include "server/bsp_aggregator.h"
#include "server/table_store.h"
#include "server/version_log.h"

namespace shardps {

struct CoreOptions {
  JobConfig config;  // Finalized (common/config.h).
  uint32_t server_index = 0;
  // The partition map; an empty map (no partitions) means the contiguous map
  // of config.cluster() num_partitions / num_servers at version 1.
  PartitionMap map;
  // Testing: each background checkpoint write sleeps this long before it
  // writes (fault tests kill a server during a write).
  absl::Duration checkpoint_write_delay = absl::ZeroDuration();
  // Testing (ps_server --testing_stall_at; fault tests of resharding):
  // named points of a move at which the server stalls once
  // (common/testing_stall.h; the marker gets its index). Points:
  //   "partitions_added"  a Restore with partitions has added its rows and
  //                       not answered yet (a pre-copy, or a one-step add);
  //   "caught_up"         a Restore catch_up_from has applied its links and
  //                       not answered yet;
  //   "switching_map"     a Control whose map gives this server partitions
  //                       it does not own yet, before the map is applied.
  std::vector<TestingStall> testing_stalls;
};

// The points CoreOptions::testing_stalls may name.
inline constexpr const char* kStallPoints[] = {"partitions_added", "caught_up", "switching_map"};

// Where a pull's values go. The core calls AddTable once per table of the
// request, in request order, after every check has passed, and writes the
// table's values into the returned room (`bytes` bytes, the values in the
// request's encoding). The room must stay valid until Pull returns. The gRPC
// service hands out room inside its response buffer, so the values are
// written once, where they are sent from.
class PullSink {
 public:
  virtual ~PullSink() = default;
  virtual char* AddTable(uint32_t table_id, uint32_t dim, size_t bytes) = 0;
};

class ParameterServerCore {
 public:
  // INVALID_ARGUMENT if a table cannot be built, the index is not below the
  // number of servers (or cluster.max_servers: a spare server starts owning
  // no partition), or the map does not have the config's partitions.
  static absl::StatusOr<std::unique_ptr<ParameterServerCore>> Create(const CoreOptions& options);

  ParameterServerCore(const ParameterServerCore&) = delete;
  ParameterServerCore& operator=(const ParameterServerCore&) = delete;
  ~ParameterServerCore();

  // BSP pulls wait at most until `deadline` (and never longer than the
  // config's server_deadline_ms).
  absl::Status Pull(const PullRequest& request, absl::Time deadline, PullResponse* response);
  // The same, with the values written where `sink` says. On an error, the
  // sink may have been given some tables.
  absl::Status Pull(const PullRequest& request, absl::Time deadline, PullSink* sink);
  // Whether Pull(request) may block waiting for its BSP clock (callers that
  // must not block, like gRPC's callback threads, run such pulls elsewhere).
  // False is final: applied clocks only grow.
  bool PullMayWait(const PullRequest& request) const;
  absl::Status Push(const PushRequest& request, PushResponse* response);
  absl::Status InitRows(const InitRowsRequest& request, InitRowsResponse* response);
  absl::Status TableInfo(const TableInfoRequest& request, TableInfoResponse* response);
  absl::Status Control(const ControlRequest& request, ControlResponse* response);
  // Blocking: COPY_AND_WRITE and COLLECT return once the files are durable.
  absl::Status Checkpoint(const CheckpointRequest& request, CheckpointResponse* response);
  // Blocking; concurrent pulls and pushes must be held by the caller.
  absl::Status Restore(const RestoreRequest& request, RestoreResponse* response);

  // The directory every checkpoint of this core is written to and restored
  // from: the config's checkpoint.dir until set here. Only the process that
  // owns the core sets it (tests; no request can).
  void SetCheckpointRoot(const std::string& root);

  // One eviction sweep at eviction_clock() and the current time; rows
  // dropped. The server calls it periodically.
  uint64_t Evict();
  // The scheduler's word on how far the job has got: the largest clock any
  // worker has completed (ps_server polls it from the scheduler's
  // JobStatus.max_clock; the latest value counts, also a smaller one after a
  // rollback). From the first call on, eviction by clocks never runs ahead
  // of it. Only the process that owns the core calls it (no request can).
  void GrantClock(uint64_t clock);
  // The clock eviction compares rows' last-touch clocks with: the clock the
  // pushes reached (BSP: the applied clock; SSP/ASP: their clocks, at most
  // kMaxClockStep a push), never more than the last GrantClock.
  uint64_t eviction_clock() const;
  // Wakes waiting pulls (they answer UNAVAILABLE) and refuses new ones.
  void Shutdown();

  const JobConfig& config() const { return config_; }
  uint32_t server_index() const { return server_index_; }
  uint64_t map_version() const;
  // The partition map this server holds (its owners and version).
  std::shared_ptr<const PartitionMap> map() const { return CurrentMap(); }
  uint64_t applied_clock() const;
  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  TableStore* store() { return store_.get(); }
  // The versions this server cut for serving replicas (version_log.h): each
  // checkpoint copy publishes its part once a follower has asked.
  VersionLog* versions() { return &versions_; }

 private:
  // SSP/ASP: how far one push may move the eviction clock forward.
  static constexpr uint64_t kMaxClockStep = 64;

  // A push's table after validation: keys and decoded gradients.
  struct DecodedTable {
    Table* table = nullptr;
    const uint64_t* keys = nullptr;
    size_t n = 0;
    const float* grads = nullptr;  // Into the request or `storage`.
    std::vector<float> storage;
  };

  ParameterServerCore(const CoreOptions& options, std::unique_ptr<TableStore> store,
                      PartitionMap map);

  std::shared_ptr<const PartitionMap> CurrentMap() const;
  // ABORTED unless `version` is current and this server owns every key.
  absl::Status CheckOwnership(uint64_t version, uint32_t table_id, const uint64_t* keys, size_t n,
                              const PartitionMap& map) const;
  absl::Status CheckMapVersion(uint64_t version, const PartitionMap& map) const;
  // Fills each table's Table, keys and count and checks what needs no
  // gradient value (table ids, key counts, value sizes, the sparse form's
  // expanded size); allocates nothing.
  absl::Status CheckPushShape(const PushRequest& request, std::vector<DecodedTable>* tables) const;
  // Decodes (or expands) the gradients of tables CheckPushShape accepted.
  absl::Status DecodeGradients(const PushRequest& request, std::vector<DecodedTable>* tables) const;
  // BSP: hands the push's rows (the finite ones; the others are counted)
  // to the aggregator.
  absl::Status BufferBspPush(const PushRequest& request, float lr_scale,
                             const std::vector<DecodedTable>& tables, PushResponse* response);
  // OK if `generation` is this server's (see the top).
  absl::Status CheckJobGeneration(uint64_t generation) const;
  // Resharding. A request's partition list as a mask of the job's P:
  // INVALID_ARGUMENT naming `what` if one is out of range or named twice;
  // FAILED_PRECONDITION if this server owns one under `map`.
  absl::StatusOr<std::vector<bool>> UnownedPartitionMask(
      const google::protobuf::RepeatedField<uint32_t>& partitions, const char* what,
      const PartitionMap& map) const;
  // Restore with request.partitions (see proto/ps.proto RestoreRequest).
  absl::Status RestorePartitions(const RestoreRequest& request, RestoreResponse* response);
  // Control's drop_partitions, checked (UnownedPartitionMask).
  void DropPartitions(const std::vector<bool>& drop, ControlResponse* response);
  // The map a full Restore restores under: the request's (RestoreRequest
  // map_version, partition_owner) unless it is older than the server's, else
  // the server's. INVALID_ARGUMENT for owners that do not fit the job.
  absl::StatusOr<std::shared_ptr<const PartitionMap>> RestoreMap(
      const RestoreRequest& request) const;
  // owned[p]: whether this server owns partition p under `map`.
  std::vector<bool> OwnedPartitions(const PartitionMap& map) const;
  // CoreOptions::testing_stalls: stalls here if one names `point`.
  void MaybeStall(const char* point) const;

  // A checkpoint's files being written from its copy.
  struct CheckpointWrite {
    uint64_t clock = 0;
    std::string dir;
    uint64_t rows = 0;
    std::thread thread;
    // Set by `thread`; read after joining it.
    absl::Status status;
    std::vector<checkpoint::WrittenFile> files;
  };
  // checkpoint_root_ without trailing '/' (every checkpoint this server
  // reads or writes is under it); FAILED_PRECONDITION naming `rpc` if it is
  // empty.
  absl::StatusOr<std::string> CheckpointRoot(const char* rpc) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // Copies the rows and starts the background write (phase COPY) under
  // `root`.
  absl::Status StartCheckpointWrite(const std::string& root, const CheckpointRequest& request,
                                    CheckpointResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // Waits for the write of request.clock (phase COLLECT).
  absl::Status CollectCheckpointWrite(const CheckpointRequest& request,
                                      CheckpointResponse* response)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // Waits for an uncollected write and drops it (and for a version cut's
  // publication).
  void DropCheckpointWrite() ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // Phase VERSION: copies the rows changed since the base and publishes
  // them on version_thread_ (nothing with no follower).
  absl::Status CutVersion(const std::string& root, const CheckpointRequest& request)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // Waits for the last version cut's part to be published.
  void JoinVersionPublish() ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // What publishes a cut's part: `snapshot` the cut's copy, `whole` (with
  // FollowVersionsRequest.verify, else null) a full copy for its
  // state_hash, `push_ages` the apply stamps' ages at the cut.
  std::function<void()> VersionPublisher(std::shared_ptr<const StoreSnapshot> snapshot,
                                         std::shared_ptr<const StoreSnapshot> whole,
                                         const CheckpointRequest& request, uint64_t base_generation,
                                         absl::Time cut, std::vector<uint32_t> push_ages);
  // Stamps an applied push (BSP: clock) for the followers' train-to-serve,
  // once one follows.
  void StampApply() {
    if (versions_.wanted()) apply_stamps_.Record(absl::Now());
  }

  // A checkpoint this server copied or restored: a possible delta base.
  struct CheckpointBase {
    std::string root;  // Without trailing '/'.
    uint64_t clock = 0;
    uint32_t generation = 0;  // The table generation that ended then.
    std::vector<bool> owned;
    uint64_t job_generation = 0;  // The job generation of the cut.
  };
  static constexpr size_t kRememberedBases = 4;
  // The base a delta on request.base_clock starts after, or
  // FAILED_PRECONDITION.
  absl::StatusOr<CheckpointBase> DeltaBase(const std::string& root,
                                           const CheckpointRequest& request,
                                           const std::vector<bool>& owned) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);
  // Records a base (replacing one of the same root and clock), forgets the
  // oldest beyond kRememberedBases and trims deletions no base needs.
  void RememberBase(CheckpointBase base) ABSL_EXCLUSIVE_LOCKS_REQUIRED(checkpoint_mu_);

  // Serializes Checkpoint and Restore calls.
  Mutex checkpoint_mu_;
  std::string checkpoint_root_ ABSL_GUARDED_BY(checkpoint_mu_);
  std::unique_ptr<CheckpointWrite> write_ ABSL_GUARDED_BY(checkpoint_mu_);
  // Publishes the last VERSION cut's part (the checkpoints' parts are
  // published by their write's thread).
  std::thread version_thread_ ABSL_GUARDED_BY(checkpoint_mu_);
  std::vector<CheckpointBase> bases_ ABSL_GUARDED_BY(checkpoint_mu_);
  // Resharding: partition -> the checkpoint clock a Restore `precopy` added
  // it from; forgotten by a drop, a one-step add, a catch-up and a full
  // restore.
  void ForgetPrecopies();
  mutable Mutex precopy_mu_;
  absl::flat_hash_map<uint32_t, uint64_t> precopied_ ABSL_GUARDED_BY(precopy_mu_);

  // Constant after construction.
  const JobConfig config_;
  const uint32_t server_index_;
  const bool bsp_;
  const absl::Duration checkpoint_write_delay_;
  const std::vector<TestingStall> testing_stalls_;
  const std::unique_ptr<TableStore> store_;

  // Shared by requests that read or change rows (their generation check and
  // their effect), exclusive for Restore. Taken before the aggregator's lock.
  mutable SharedMutex state_mu_;
  // The job generation served; written under state_mu_ (exclusive) before
  // the aggregator's Reset, read anywhere.
  std::atomic<uint64_t> generation_{0};

  mutable Mutex map_mu_;
  std::shared_ptr<const PartitionMap> map_ ABSL_GUARDED_BY(map_mu_);

  std::atomic<uint64_t> max_clock_{0};  // For eviction by clocks.
  // BSP: the clocks, the buffered pushes, the active workers (used in
  // every mode for applied_clock(), which stays 0 outside BSP).
  BspAggregator bsp_clocks_;
  // Serving replicas' versions (at most kVersionLogBytes kept, the newest
  // always).
  static constexpr uint64_t kVersionLogBytes = uint64_t{256} << 20;
  VersionLog versions_{kVersionLogBytes};
  // When pushes were applied since the last cut (each cut takes them).
  ApplyStamps apply_stamps_;
  // GrantClock's; no bound until the first call.
  std::atomic<uint64_t> granted_clock_{UINT64_MAX};
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_PARAMETER_SERVER_CORE_H_

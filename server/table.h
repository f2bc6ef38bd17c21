// One table's rows on one server: a lock-striped, collisionless hash table
// from uint64 key to a row of weights plus optimizer state.
//
// Layout. Keys are spread over kNumStripes stripes by bits 32..39 of
// MixKey(table id, key) (the partitioner uses the top bits, so a server that
// owns a contiguous range of partitions still uses every stripe). Each stripe
// holds a RowIndex (server/row_index.h: key -> slot, one 16-byte bucket a
// key) and a slab of fixed-size blocks; a slot is one row: `dim` weights, the optimizer's state,
// and (only when eviction is on) the row's last-touch clock and time. No per-row heap allocation;
// freed slots are reused. Blocks are carved from 2 MiB chunks advised as transparent huge pages
// (random row access is otherwise bound by TLB misses).
//
// Batches. Pull and Push group a batch's keys by stripe, take each stripe's
// lock once, prefetch the index buckets of all its keys, look them up and
// prefetch their rows, then copy or update the rows: the cache misses of a
// stripe's keys overlap instead of following each other. A batch of at least
// kParallelMinKeys keys is split into 16 chunks of stripes that the calling
// thread and the idle threads of a HelperPool (server/helper_pool.h) work
// through together; stripes are disjoint, so the result is the same as a
// serial pass.
//
// Semantics.
//  - Sparse tables: a training pull or a push of a missing key creates the
//    row from RowInitializer (after admission, below). An evaluation pull
//    never inserts or counts: unseen keys read as the initial value (with
//    shared unadmitted rows: as their shared row).
//  - Dense tables: keys are chunk indices, rows are `dense_chunk_size`
//    floats; the last chunk of a tensor is padded to the full chunk (the
//    padding reads as the initializer's value and its gradients should be
//    0). With init MODEL, missing chunks read as zeros, pulls never create
//    them, InitRows writes them (if absent) and a push to a missing chunk
//    creates it from zeros.
//  - Admission (admission.min_count = N > 1, sparse only). Occurrences are
//    counted once per key per push (a worker pushes each key of its batch
//    once; Push's `occurrences` lets the BSP path count a clock's pushes of
//    several workers); pulls never count. The push that brings a key's
//    count to N creates its row and applies its gradient to it.
//  - Shared unadmitted rows (admission.unadmitted SHARED, the default with
//    N > 1). A key without a row reads, in training and evaluation pulls,
//    the *shared row* of its partition (PartitionOf(id, key, P)); a push
//    sums the gradients of its keys without a row per shared row, in batch
//    order, and applies one optimizer step per shared row with the sum (the
//    row is one embedding looked up many times, as a hashed or managed-
//    collision table's default slot). A newly admitted row starts at its
//    initial value, as without admission. Shared rows start at zero
//    weights. Partitions map to shared rows through a small table: a fresh
//    table has one shared row for all partitions, so a server trains one
//    per table; a restore gives each partition the shared row its
//    checkpoint holds, partitions with bit-identical payloads sharing one
//    (a checkpoint of S servers restores S rows, each partition reading the
//    one its server trained). Checkpoints carry a shared row per partition
//    as a record under a reserved key of that partition (SharedRowKey);
//    ForEachSharedRow lists them, RestoreRow recognizes them. A real
//    feature id equal to a reserved key (P keys in 2^64) is a normal row
//    until a restore, which reads its record as the shared row.
//    With INITIAL, a key without a row reads its initial value and its
//    gradients are dropped (only counted), as before shared rows.
//  - Eviction (eviction.ttl_clocks / ttl_seconds): Evict() drops rows (and
//    pending counts) not touched by a training pull or push for that long. A
//    later touch recreates the row at its initial value (with admission, the
//    key is unadmitted again: it reads its shared row and counts from zero).
//  - Each row update and each row read happens under the row's stripe lock,
//    so it is atomic with respect to other pushes and pulls of that row.
//  - Change tracking (delta checkpoints): each row's index bucket carries,
//    next to its slot number (in what would be padding, so no memory is
//    added), a 32-bit *generation*: the table's generation when the row
//    last changed; it is not part of the payload. Changes are a push applied
//    to the row, the row's creation (pull, push, InitRows, RestoreRow) and,
//    with eviction on, a training touch (it rewrites the payload's
//    last-touch stamp). Rows dropped by Evict() are logged (per stripe) as
//    deletions with the generation. A pending admission count carries the
//    generation of its last change too (a push counting it, a restore), and
//    one Evict() drops is logged as a deletion. The hot path pays one
//    relaxed atomic load and one 4-byte store into the bucket it has just
//    found, under the stripe lock it holds anyway; no allocation. A delta
//    scan reads only the buckets, and the rows that changed.
//
// The Table does not validate: its caller (TableStore) has checked that push
// keys are unique, dense keys in range, and gradients finite and within
// max_gradient_abs unless the table skips such rows (SKIP_AND_COUNT: they are
// skipped and counted).
//
// Thread-safety: all methods are thread-safe.
#ifndef SHARDPS_SERVER_TABLE_H_
#define SHARDPS_SERVER_TABLE_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/functional/function_ref.h"
#include "absl/status/statusor.h"
#include "common/codec.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "server/helper_pool.h"
#include "server/initializer.h"
#include "server/optimizer.h"
#include "server/shared_rows.h"

namespace shardps {

// A snapshot of a table's counters.
struct TableCounters {
  uint64_t live_rows = 0;
  uint64_t pending_rows = 0;   // Seen, not yet admitted.
  uint64_t admitted_rows = 0;  // Rows ever created.
  uint64_t evicted_rows = 0;
  uint64_t bytes = 0;          // Slabs plus hash-map memory (estimate).
  uint64_t bytes_per_row = 0;  // bytes / live_rows (0 if empty).
  uint64_t rows_skipped_nonfinite = 0;
  uint64_t pulls = 0;           // Pull calls.
  uint64_t pushes = 0;          // Push calls.
  uint64_t rows_updated = 0;    // Optimizer steps pushes applied to rows.
  uint64_t shared_rows = 0;     // Shared unadmitted rows some partition uses.
  uint64_t shared_updates = 0;  // Optimizer steps applied to them.
};

// A key seen by pushes but not admitted yet (admission.min_count > 1): its
// count and when it was last pushed (what eviction's ttl reads).
struct AdmissionCount {
  uint32_t count = 0;
  uint32_t last_seconds = 0;
  uint64_t last_clock = 0;
};

// What one Push did.
struct PushCounts {
  uint64_t applied = 0;  // Rows an optimizer step was applied to.
  // Keys without a row, counted towards admission (their gradients went to
  // their shared row, or were dropped under INITIAL).
  uint64_t pending = 0;
  uint64_t skipped_nonfinite = 0;
};

class Table {
 public:
  static constexpr int kNumStripes = 256;
  // Pulls and pushes of at least this many keys use the helper pool.
  static constexpr size_t kParallelMinKeys = 512;

  // `config` must have been finalized (common/config.h). For DENSE tables the
  // row width is `dense_chunk_size`. INVALID_ARGUMENT on a bad optimizer or
  // num_partitions 0 with admission. Large batches are shared with `helpers` (nullptr:
  // every batch runs on the calling thread alone); the pool must outlive the
  // table. `num_partitions` is the job's P (cluster.num_partitions): shared
  // unadmitted rows are per partition.
  static absl::StatusOr<std::unique_ptr<Table>> Create(
      const TableConfig& config, uint32_t dense_chunk_size,
      HelperPool* helpers = &HelperPool::Shared(), uint32_t num_partitions = kDefaultNumPartitions);
  // The config's default cluster.num_partitions.
  static constexpr uint32_t kDefaultNumPartitions = 4096;

  ~Table();
  Table(const Table&) = delete;
  Table& operator=(const Table&) = delete;

  const TableConfig& config() const { return config_; }
  uint32_t id() const { return config_.id(); }
  uint32_t dim() const { return dim_; }
  bool dense() const { return config_.kind() == TableConfig::DENSE; }
  // Dense tables: the number of chunk rows, or 0 if dense_size is unset
  // (any chunk index is accepted; TableStore always sets it,
  // server/request_limits.h).
  uint64_t num_chunks() const { return num_chunks_; }
  // The largest gradient magnitude a push may carry (config
  // max_gradient_abs, 0 = kDefaultMaxGradientAbs), as MagnitudeBits.
  uint32_t max_gradient_bits() const { return max_gradient_bits_; }
  // Floats per slot (weights, state, eviction metadata): a row's payload.
  size_t row_stride() const { return stride_; }

  // Reads n rows into out[n * dim]. Keys may repeat. `train` creates rows
  // and counts admission (see above); otherwise nothing changes.
  void Pull(const uint64_t* keys, size_t n, bool train, float* out);
  // The same, with the values written in `encoding` (out: n * dim values of
  // BytesPerValue bytes, any alignment). A bf16 pull converts each row once,
  // on its way out, with no fp32 copy in between.
  void PullEncoded(const uint64_t* keys, size_t n, bool train, Encoding encoding, char* out);
  // A training pull of n rows with their optimizer state: out[n * (dim +
  // state_size())], each row's weights then its state, fp32, as Push will
  // find them. For a worker that replays its own pending step on rows it
  // prefetched. Not for tables with admission: a pending key has no state
  // (it reads as its initial value and fresh state, which its next push
  // does not update).
  void PullWithState(const uint64_t* keys, size_t n, float* out);
  // Floats of optimizer state a row (server/optimizer.h).
  size_t state_size() const { return state_size_; }
  // Whether keys wait for admission before they get a row.
  bool has_admission() const { return min_count_ > 1; }
  // One optimizer step per key with grads[i*dim, (i+1)*dim). Keys unique.
  // Under SKIP_AND_COUNT, rows with a gradient element that is non-finite or
  // beyond max_gradient_abs are skipped and counted; under REJECT the caller
  // has checked every gradient. Keys
  // without a row count `occurrences[i]` (nullptr: 1 each) towards
  // admission; see the top for what their gradients do.
  PushCounts Push(const uint64_t* keys, size_t n, const float* grads, float lr_scale,
                  const uint32_t* occurrences = nullptr);
  // Whether `keys` holds a key twice (the first repeat found goes to *dup).
  // Uses the batch grouping of Push: no hashing, no allocation once warm.
  bool FindDuplicateKey(const uint64_t* keys, size_t n, uint64_t* dup) const;
  // Writes rows that do not exist yet (optimizer state fresh); returns how
  // many were written. Existing rows are left alone.
  uint64_t InitRows(const uint64_t* keys, size_t n, const float* values);

  // Training touches from now on are stamped with `clock` (monotonic: a
  // smaller value is ignored).
  void SetClock(uint64_t clock);
  // Sets the clock to exactly `clock`, also backwards (a restore).
  void ResetClock(uint64_t clock);
  // Drops rows and pending counts idle for ttl_clocks (now_clock - last
  // clock >= ttl) or ttl_seconds, of the keys whose partition p has
  // owned[p] (owned.size() = num_partitions; empty: every key). Returns the
  // number of rows dropped.
  uint64_t Evict(uint64_t now_clock, int64_t now_seconds, const std::vector<bool>& owned = {});

  // Checkpoint support. A row's payload is row_stride() floats: weights,
  // optimizer state, then (eviction on) the last-touch clock and time, bit
  // for bit. Pending admission counts are saved apart
  // (ForEachAdmissionCount, RestoreAdmissionCounts).
  //
  // Calls `visit(key, payload)` for every row, one stripe at a time under its
  // lock (the payload pointer is valid only during the call; `visit` must not
  // call back into the table). Rows pushed concurrently may or may not be
  // seen: for a consistent cut, the caller stops pushes first.
  void ForEachRow(const std::function<void(uint64_t key, const float* payload)>& visit) const;
  // Writes `key`'s row from a payload (creating or overwriting it). With
  // shared unadmitted rows, a reserved key (SharedRowKey) writes its
  // partition's shared row instead.
  void RestoreRow(uint64_t key, const float* payload);
  // RestoreRow for n rows: keys[i]'s payload is the row_stride() floats at
  // payloads + i * row_stride() * sizeof(float) (need not be aligned: a
  // checkpoint block's layout). Stripe by stripe as a push is, each lock
  // taken once, the lookups and row writes of a stripe overlapping.
  void RestoreRows(const uint64_t* keys, const char* payloads, size_t n);
  // Makes room in the index for `rows` more rows spread over the stripes,
  // and for `admission_counts` more pending counts, so a restore of that
  // many does not rehash as it goes.
  void ReserveRows(size_t rows, size_t admission_counts = 0);
  // Calls `visit(key, count)` for every pending admission count (keys seen,
  // not admitted, no row), or, with `since`, for those that changed after
  // that generation (see change tracking at the top), one stripe at a time
  // under its lock (`visit` must not call back into the table).
  void ForEachAdmissionCount(
      std::optional<uint32_t> since,
      const std::function<void(uint64_t key, const AdmissionCount& count)>& visit) const;
  // Sets keys[i]'s pending admission count to counts[i] (a restore), unless
  // the key has a row: a row is admitted, and a checkpoint never holds both.
  // Stripe by stripe, each lock taken once, the stripes spread over the
  // helper pool as a push's are.
  void RestoreAdmissionCounts(const uint64_t* keys, const AdmissionCount* counts, size_t n);
  // Drops every row, pending count and logged deletion (before a restore).
  void Clear();
  // Drops the rows and pending admission counts of the keys whose partition
  // p (PartitionOf(id, key, num_partitions)) has drop[p] (drop.size() = the
  // table's num_partitions), without logging deletions: the partitions left
  // this server (resharding), or are about to be restored onto it. Shared
  // rows stay (a partition the server does not own reads none; a restore
  // of the partition replaces its shared row). Returns the rows dropped.
  uint64_t DropPartitions(const std::vector<bool>& drop);

  // ---- Change tracking for delta checkpoints (see the top) ----
  // Ends the current generation and returns it: every change that happened
  // before the call has a generation <= the result, every later one is
  // newer. Generations start at 1. The caller (a checkpoint's copy) holds
  // pushes, so "before" is well defined.
  uint32_t AdvanceGeneration();
  // Calls `deleted(key)` once for each key dropped by Evict() in a
  // generation > `since` that has no row now, and `visit(key, payload)` for
  // each row whose generation is > `since`; one stripe at a time under its
  // lock (the callbacks must not call back into the table). Applying
  // the deletions, then the rows, then the admission counts changed since
  // (ForEachAdmissionCount), to a table equal to this one at the end of
  // generation `since` makes it equal to this one. (A deletion is also
  // logged for a pending count Evict() drops, so the delta drops it too.)
  void ForEachChangedRow(uint32_t since,
                         const std::function<void(uint64_t key, const float* payload)>& visit,
                         const std::function<void(uint64_t key)>& deleted) const;
  // Forgets logged deletions of generations <= `upto`: no delta will be
  // taken on a generation that old any more.
  void TrimDeletions(uint32_t upto);
  // Drops `key`'s row and pending count, if any, without logging a deletion
  // (applying a delta's deletion). Returns whether a row was dropped.
  bool DeleteRow(uint64_t key);

  // ---- Shared unadmitted rows (see the top) ----
  // Whether this table has them (sparse, min_count > 1, SHARED).
  bool has_shared_rows() const { return shared_rows_; }
  // The reserved key holding partition `p`'s shared row in checkpoints: the
  // key whose MixKey is the lowest value of partition p.
  uint64_t SharedRowKey(uint32_t partition) const { return shared_.Key(partition); }
  // Calls `visit(partition, SharedRowKey(partition), payload)` for every
  // partition (row_stride() floats; the eviction stamp is zero), or, with
  // `since`, for those whose shared row changed after that generation.
  // Nothing without shared rows. Holds the shared rows' lock: `visit` must
  // not call back into the table.
  void ForEachSharedRow(std::optional<uint32_t> since,
                        const std::function<void(uint32_t partition, uint64_t key,
                                                 const float* payload)>& visit) const;
  // Deletions logged and not trimmed (tests and stats).
  uint64_t LoggedDeletions() const;

  // Adds to the non-finite counter rows the caller dropped itself (BSP
  // buffering drops them on arrival).
  void CountSkippedNonFinite(uint64_t rows) {
    skipped_nonfinite_.fetch_add(rows, std::memory_order_relaxed);
  }

  TableCounters Counters() const;
  // The initial value of `key`'s row (what an eval pull of it reads).
  void InitialRow(uint64_t key, float* out) const;
  // Whether `key` has a row (tests and stats).
  bool Contains(uint64_t key) const;

 private:
  struct Pending : AdmissionCount {
    uint32_t generation = 0;  // The table's generation when it last changed.
  };
  struct Stripe;
  class BlockArena;

  Table(const TableConfig& config, uint32_t dim, std::unique_ptr<Optimizer> optimizer,
        HelperPool* helpers, uint32_t num_partitions);

  uint32_t StripeIndex(uint64_t key) const;
  Stripe& StripeOf(uint64_t key) const;
  // The row of `key` for a training touch, creating it if admitted; nullptr
  // if the key is (still) pending. `push`: the caller updates the row (marks
  // it changed; creates MODEL-initialized rows too) and the touch counts
  // `occurrences` towards admission; a pull never creates a row of an
  // admission table.
  float* TouchRow(Stripe& stripe, uint64_t key, bool push, uint32_t now_seconds,
                  uint32_t occurrences);
  // The calling thread's scratch for a batch of `n` keys, grouped by stripe
  // (valid until the thread's next call).
  struct Batch;
  Batch& GroupByStripe(const uint64_t* keys, size_t n) const;
  // Pull and PullWithState: rows of dim_ (or dim_ + state) values.
  void PullRows(const uint64_t* keys, size_t n, bool train, Encoding encoding, bool with_state,
                char* out);
  float* NewRow(Stripe& stripe, uint64_t key, const float* values);
  // A new row's slot for `key`, indexed, its contents unset.
  float* NewSlot(Stripe& stripe, uint64_t key);
  void Stamp(float* row, uint32_t now_seconds) const;
  uint32_t CurrentGeneration() const { return generation_.load(std::memory_order_relaxed); }
  // Calls fn(first, last) over ranges of stripes that together cover all of
  // them: once with [0, kNumStripes) for a batch of n < kParallelMinKeys keys,
  // else once per chunk, concurrently on the helper pool.
  void ForStripes(size_t n, absl::FunctionRef<void(int first, int last)> fn) const;
  // Visits the stripes in [first, last) that hold keys of `b` in three
  // overlapping stages, each stripe locked from its first stage to its last:
  // prefetch the hash buckets of its keys; lookup(stripe, begin, end), which
  // finds its rows (and prefetches them); use(stripe, begin, end). While one
  // stripe's rows are used, the next one's rows and the one after's buckets
  // are on their way from memory. Locks are taken in stripe order.
  using StripeStage = absl::FunctionRef<void(Stripe& stripe, uint32_t begin, uint32_t end)>;
  void StagedStripes(const Batch& b, const uint64_t* keys, int first, int last, StripeStage lookup,
                     StripeStage use) const;
  // Issues prefetches for a row's weights (and, to `write` it, its state).
  void PrefetchRow(const float* row, bool write) const;
  float* RowAt(const Stripe& stripe, uint32_t slot) const;
  uint32_t NowSeconds() const;

  // Constant after construction.
  const TableConfig config_;
  const uint32_t dim_;
  const std::unique_ptr<Optimizer> optimizer_;
  const RowInitializer initializer_;
  const size_t state_size_;
  const size_t stride_;  // Floats per slot: a row's payload.
  const bool eviction_;
  const uint32_t min_count_;  // Admission; <= 1 = admit on first touch.
  const uint32_t num_partitions_;
  const bool shared_rows_;  // Shared unadmitted rows (see the top).
  const uint64_t num_chunks_;
  const uint32_t max_gradient_bits_;
  const uint32_t rows_per_block_log2_;
  HelperPool* const helpers_;          // Not owned; may be null.
  std::unique_ptr<BlockArena> arena_;  // Slab blocks of every stripe.
  std::unique_ptr<Stripe[]> stripes_;

  std::atomic<uint64_t> clock_{0};
  std::atomic<uint32_t> generation_{1};
  std::atomic<uint64_t> admitted_{0};
  std::atomic<uint64_t> evicted_{0};
  std::atomic<uint64_t> skipped_nonfinite_{0};
  std::atomic<uint64_t> pulls_{0};
  std::atomic<uint64_t> pushes_{0};
  std::atomic<uint64_t> rows_updated_{0};

  // Shared unadmitted rows (used only if shared_rows_). Their lock is never
  // held while a stripe lock is taken.
  SharedRows shared_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_TABLE_H_

// EmbeddingCache: the worker's cache of embedding rows within the staleness
// bound (training.cache, SSP and ASP; design.md, "The embedding cache").
//
// A row is cached with its optimizer state and its *read clock* m: a value
// the scheduler reported as the job's minimum clock before the pull that
// read it was sent, so the row holds every push of steps < m (of the
// workers in that minimum; in SSP/ASP a push is acknowledged once applied).
// It serves step t only if m >= t - staleness, which is what a pull sent
// when step t may start guarantees under SSP(staleness): every push of
// steps <= t - staleness - 1. The worker's own pushes are applied to the
// cached rows (ApplyPush) with the servers' optimizer code, as the prefetch
// replay applies them, so a cached row is the servers' row when it was read
// plus this worker's pushes since: its own writes are never missed.
//
// Use per step t, in step order for Fill and ApplyPush:
//   PlanStep(t)  which keys are served from the cache (pinned until Release)
//   ... the other keys pulled with their optimizer state ...
//   Insert       the pulled rows, once they include every own push before t
//   Fill(t)      the hits' weights into the step's buffers; Release(t)
//   ApplyPush    step t's gradients, once computed
// The plan of step t + 1 may come before step t's Fill (prefetch): a hit is
// decided at plan time and its value taken at Fill, after step t's push was
// applied.
//
// Eviction (bench/cache_policy_bench, docs/benchmarks.md): least recently
// used, frequency-admitted: a new row replaces the least recently used one
// only if a count-min sketch of every key's recent lookups rates it higher
// (TinyLFU), except that a victim too stale to serve any later step goes
// without that test. Pinned rows (hits of a step not yet filled) are never
// evicted. max_bytes counts each row's weights and state (4 bytes a float)
// plus kEntryBytes of bookkeeping.
//
// The cache never outlives the Trainer's Train() that made it: a rollback,
// a restore or a new job generation ends that Train (every request of the
// old generation is refused), and the next one starts with an empty cache.
// A reported minimum clock lower than one seen before (a worker came back
// below it) empties the cache too: its rows' read clocks promised pushes
// that worker has yet to send again.
//
// Thread-safe (one mutex): the prefetch chain plans while the training
// thread fills, inserts and applies.
#ifndef SHARDPS_WORKER_EMBEDDING_CACHE_H_
#define SHARDPS_WORKER_EMBEDDING_CACHE_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "server/optimizer.h"

namespace prometheus {
class Counter;
class Gauge;
}  // namespace prometheus

namespace shardps {

class EmbeddingCache {
 public:
  // Bookkeeping bytes per cached row counted against max_bytes.
  static constexpr uint64_t kEntryBytes = 64;
  // Both limits 0 (unset): this many bytes.
  static constexpr uint64_t kDefaultMaxBytes = uint64_t{64} << 20;

  struct Options {
    uint64_t max_rows = 0;   // 0: no limit on rows.
    uint64_t max_bytes = 0;  // 0: no limit on bytes (both 0: kDefaultMaxBytes).
    // A row read at clock m serves steps t <= m + staleness.
    uint32_t staleness = 1;
    // Prometheus series (shardps_worker_cache_*) with these labels; none if
    // empty.
    std::string metrics_rank;
  };

  // One cached table: rows of `dim` weights and `state` floats of state.
  struct Table {
    uint32_t dim = 0;
    uint32_t state = 0;
    // The servers' optimizer of the table (ApplyPush); null: ApplyPush
    // must not be called (tests, benchmarks).
    std::unique_ptr<Optimizer> optimizer;
    bool skip_nonfinite = false;  // non_finite: SKIP_AND_COUNT.
  };

  struct Stats {
    uint64_t lookups = 0;        // Keys of filled steps.
    uint64_t hits = 0;           // Of those, served from the cache.
    uint64_t bytes_saved = 0;    // Pull payload the hits did not move (keys, fp32 rows).
    uint64_t state_bytes = 0;    // Optimizer state pulled only to cache rows (NoteStatePulled).
    uint64_t staleness_sum = 0;  // Over hits: step - read clock.
    uint64_t staleness_max = 0;
    uint64_t inserts = 0;   // Rows stored (new or replaced).
    uint64_t declined = 0;  // Rows not admitted.
    uint64_t evictions = 0;
    uint64_t clears = 0;  // Emptied for a lower minimum clock.
    uint64_t rows = 0;    // Rows held now.
    uint64_t bytes = 0;   // Bytes held now (as max_bytes counts them).
  };

  // The cache of the model tables `tables` ((id, dim), in the model's
  // order) of `config` (finalized), with their optimizers.
  // FAILED_PRECONDITION naming why rows of a table cannot be cached: a
  // sparse table with admission (a pending key has no row and no state).
  static absl::StatusOr<std::unique_ptr<EmbeddingCache>> Create(
      const Options& options, const JobConfig& config,
      const std::vector<std::pair<uint32_t, uint32_t>>& tables);

  EmbeddingCache(const Options& options, std::vector<Table> tables);
  ~EmbeddingCache();
  EmbeddingCache(const EmbeddingCache&) = delete;
  EmbeddingCache& operator=(const EmbeddingCache&) = delete;

  uint32_t staleness() const { return options_.staleness; }
  // Floats a cached row of table t holds (dim + state).
  uint32_t width(size_t t) const { return tables_[t].dim + tables_[t].state; }
  uint32_t state(size_t t) const { return tables_[t].state; }

  // Step `step`'s keys, per table (keys[t] unique): appends to (*hit)[t]
  // the positions i of the keys served from the cache (cached, read clock
  // >= step - staleness), pinned until Release(step), and to (*miss)[t] the
  // others, to be pulled with their state and inserted. With `cold` (may
  // be null), a key the sketch has not seen before this step goes to
  // (*cold)[t] instead: pulled without state and not cached (most ids of a
  // long tail occur once: their state would be pulled for nothing).
  // `known_min`: the minimum clock last reported (if any); below one seen
  // before, the cache is emptied first.
  void PlanStep(uint64_t step, std::optional<uint64_t> known_min,
                absl::Span<const std::vector<uint64_t>> keys,
                std::vector<std::vector<uint32_t>>* hit, std::vector<std::vector<uint32_t>>* miss,
                std::vector<std::vector<uint32_t>>* cold = nullptr);

  // Copies the weights of keys[t][i], i in hit[t] (PlanStep's for `step`),
  // to rows[t] + i * dim, and counts step `step`'s keys and hits. INTERNAL
  // if a planned hit is not cached (a broken pin: never expected).
  absl::Status Fill(uint64_t step, absl::Span<const std::vector<uint64_t>> keys,
                    const std::vector<std::vector<uint32_t>>& hit,
                    std::vector<std::vector<float>>* rows);

  // The hits of steps <= step may be evicted from now on.
  void Release(uint64_t step);

  // Stores n rows of table t (`rows`: width(t) floats each, weights then
  // state) of `keys`, read at `read_clock`; they must include every push
  // of this worker so far. Replaces a cached row of the same key; a new
  // key may evict a row, or not be admitted.
  void Insert(size_t t, const uint64_t* keys, size_t n, const float* rows, uint64_t read_clock);

  // This worker's push to table t: `grads` (n * dim) of `keys`, applied to
  // the cached rows of those keys with the table's optimizer as the servers
  // apply it (a row with a non-finite gradient skipped under
  // SKIP_AND_COUNT). Call once per push, in step order.
  void ApplyPush(size_t t, const uint64_t* keys, size_t n, const float* grads, float lr_scale);

  // Optimizer state bytes pulled only to cache rows (counted in stats).
  void NoteStatePulled(uint64_t bytes);

  // Whether (t, key) is cached, and its row (weights then state) and read
  // clock; for tests.
  bool Peek(size_t t, uint64_t key, std::vector<float>* row, uint64_t* read_clock) const;

  Stats stats() const;

 private:
  struct Entry {
    uint64_t key = 0;
    uint64_t read_clock = 0;
    int64_t pin = -1;  // The last step planned to read it; pinned while > released_.
    uint32_t table = 0;
    uint32_t slot = 0;             // Row slot in tables_[table]'s values.
    int32_t prev = -1, next = -1;  // Recency list (front: least recent).
  };
  struct TableData {
    absl::flat_hash_map<uint64_t, uint32_t> index;  // Key -> entry.
    std::vector<float> values;                      // Slots of width floats.
    std::vector<uint32_t> free_slots;
  };
  struct Metrics;

  uint64_t RowBytes(uint32_t t) const { return uint64_t{4} * width(t) + kEntryBytes; }
  bool Fits(uint64_t extra_rows, uint64_t extra_bytes) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool Pinned(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return e.pin > released_; }
  bool Stale(const Entry& e) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return e.read_clock + options_.staleness < last_planned_;
  }
  float* Row(const Entry& e) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    return data_[e.table].values.data() + size_t{e.slot} * width(e.table);
  }
  void Unlink(int32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void PushBack(int32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void Evict(int32_t i) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // Makes room for a row of table t whose key is rated `estimate`: false
  // if it is not admitted (or no victim can go).
  bool MakeRoom(uint32_t t, int estimate) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ClearLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  // The count-min sketch of lookups (4-bit counters, halved every
  // sample_ lookups).
  size_t SketchSlot(uint64_t table_key, int row) const;
  // Counts a lookup; the estimate before it.
  int CountAndEstimate(uint64_t table_key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  int Estimate(uint64_t table_key) const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  static uint64_t SketchKey(uint32_t t, uint64_t key);

  const Options options_;
  const std::vector<Table> tables_;
  const std::unique_ptr<Metrics> metrics_;  // Null: no series.
  mutable Mutex mu_;
  std::vector<TableData> data_ ABSL_GUARDED_BY(mu_);
  std::vector<Entry> entries_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> free_entries_ ABSL_GUARDED_BY(mu_);
  int32_t front_ ABSL_GUARDED_BY(mu_) = -1;
  int32_t back_ ABSL_GUARDED_BY(mu_) = -1;
  uint64_t rows_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t bytes_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t last_planned_ ABSL_GUARDED_BY(mu_) = 0;
  int64_t released_ ABSL_GUARDED_BY(mu_) = -1;
  std::optional<uint64_t> max_min_seen_ ABSL_GUARDED_BY(mu_);
  size_t sketch_width_ = 0;  // A power of two.
  uint64_t sample_ = 0;
  std::vector<uint8_t> sketch_ ABSL_GUARDED_BY(mu_);
  uint64_t counted_ ABSL_GUARDED_BY(mu_) = 0;
  Stats stats_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shardps

#endif  // SHARDPS_WORKER_EMBEDDING_CACHE_H_

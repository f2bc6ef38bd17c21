// Read-your-own-writes prefetch (internal to worker/trainer): a step's pull
// split in two around the previous step's push, so that a prefetched step
// still sees every push of this worker's earlier steps, exactly.
//
// Step t + 1's rows split against step t's unique keys, per model table:
//  - kUntouched: the keys step t does not push. Their values cannot change
//    by step t's push, so this part may be pulled before step t's push is
//    acknowledged (as soon as step t - 1's is), while step t computes.
//  - kOwnWrites: the keys step t pushes, and every dense chunk (step t
//    always pushes the whole dense gradient). Two ways to read them:
//    * waited for: pulled once step t's push is acknowledged, so they
//      include it;
//    * replayed (EnableReplay): pulled with their optimizer state at the
//      same time as kUntouched, and before step t's push is sent; Replay()
//      then applies step t's gradients to them on the worker with the
//      servers' own optimizer code (server/optimizer.h), which is what the
//      servers will do with that push. Step t + 1 then needs no answer to
//      step t's push at all: the servers apply it while step t + 1
//      computes.
// The two parts together fill exactly the buffers StepParams::StartPull
// fills, with values that include every push of this worker before step
// t + 1 (and whatever other workers pushed by then). With one worker the
// values are the same as a synchronous step's, bit for bit, either way.
//
// Replay holds only where the servers apply a push to the rows a pull
// read: it is refused (EnableReplay's error) for a table with admission (a
// pending key has no row and no state), and when the wire is not fp32 (the
// servers would apply rounded gradients). Under SKIP_AND_COUNT a row with
// a non-finite gradient is skipped, as the server skips it. A row evicted
// between the pull and the push is recreated by the push at its initial
// value, which the replay does not know: with eviction the replayed value
// of such a row is the evicted row's plus the step.
//
// With the embedding cache (EnableCache, training.cache; embedding_cache.h)
// a step's keys are first planned against the cache: the rows it serves
// for this step are not pulled; the others are split as above, pulled with
// their optimizer state (in kUntouched only those whose keys the cache has
// seen before: a first sighting is pulled without and not cached), and
// stored in the cache once they hold every own push before the step
// (FinishStep: kUntouched as pulled, kOwnWrites after the replay).
// FinishStep then copies the hits' weights, which by then include the
// previous step's push (ApplyPush, after each compute). A step pulled
// alone (Split with no previous step: the first one, or one that was not
// prefetched, after every earlier push was acknowledged) is one pull,
// kUntouched: every miss and the dense chunks (without state); its
// kOwnWrites part is empty and not started. The cache needs replay where
// the steps are prefetched.
//
// Thread-safety: a SplitPuller and the Prepared it splits are used by one
// thread at a time (the cache is thread-safe); the two parts' ops write
// disjoint buffers and may be in flight at once.
#ifndef SHARDPS_WORKER_TRAINER_SPLIT_PULL_H_
#define SHARDPS_WORKER_TRAINER_SPLIT_PULL_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "proto/config.pb.h"
#include "server/optimizer.h"
#include "worker/embedding_cache.h"
#include "worker/job_clock.h"
#include "worker/model/model.h"
#include "worker/param_store.h"
#include "worker/train_summary.h"
#include "worker/trainer_data.h"
#include "worker/trainer_params.h"

namespace shardps {
namespace trainer_internal {

enum PullPartKind { kUntouched = 0, kOwnWrites = 1 };

class SplitPuller {
 public:
  // `params` and `spec` are not owned and must outlive this.
  SplitPuller(StepParams* params, const ModelSpec& spec) : params_(params), spec_(spec) {}

  // Turns replay on for the tables of `config` (finalized), if it can hold:
  // FAILED_PRECONDITION naming why not (replay stays off). Before Split.
  absl::Status EnableReplay(const JobConfig& config);
  bool replay() const { return !replay_.empty(); }

  // With `cache` (not owned; null: none): steps are planned against it.
  // `clock` (not owned, may be null) reports the minimum clock the pulled
  // rows are tagged with; `staleness` is the job's (a pull of step t is sent
  // once the minimum clock is >= t - staleness; UINT32_MAX: ASP, no such
  // floor). Before Split.
  void EnableCache(EmbeddingCache* cache, JobClock* clock, uint32_t staleness);
  EmbeddingCache* cache() const { return cache_; }

  // Splits p's unique keys (step `step`) against `prev`'s (the step before
  // p's; null: none, p is pulled alone) into p->parts, after the cache's
  // hits if it is on. Must precede the two StartPart calls for p.
  void Split(Prepared* p, const Prepared* prev, uint64_t step);

  // Starts the pull of one part of p (Split done) as of `step`. The op's
  // Wait() copies the part's rows into p->rows (kUntouched) or p->rows and
  // p->dense_params (kOwnWrites, or kUntouched of a step split alone; with
  // replay on, Replay() does that for kOwnWrites); it
  // may be called more than once. An empty part gives an op that is
  // already done. p must stay untouched but for the other part's op until
  // Wait() returns. With replay on, p's kOwnWrites op must be done before
  // the previous step's push is sent.
  std::unique_ptr<PsClient::Op> StartPart(Prepared* p, PullPartKind part, PullPurpose purpose,
                                          uint64_t step);

  // Replay on: applies the previous step's push to p's kOwnWrites part
  // (done): its gradients `prev` (as pushed for the sparse tables),
  // `prev_dense` (the dense gradient as pushed: StepParams::StartPush's
  // buffer) and `lr_scale`. Writes the weights into p->rows and
  // p->dense_params.
  void Replay(Prepared* p, const StepResult& prev, const std::vector<float>& prev_dense,
              float lr_scale);

  // Cache on: p's parts done (and replayed): stores their rows in the cache
  // and copies the hits' weights into p->rows; before step `step` computes,
  // after the previous step's ApplyPush. OK and nothing without the cache.
  absl::Status FinishStep(Prepared* p, uint64_t step);
  // Cache on: step p's gradients `r` (as pushed), applied to its cached rows.
  void ApplyPush(const Prepared& p, const StepResult& r, float lr_scale);

 private:
  // One table's replay: the servers' optimizer and its policy.
  struct ReplayTable {
    std::unique_ptr<Optimizer> optimizer;
    uint32_t dim = 0;
    uint32_t state = 0;  // Floats of state a row.
    bool skip_nonfinite = false;
    // Applies `grad` to `row` (weights then state) as the server does.
    void Apply(float* row, const float* grad, float lr_scale) const;
  };

  // The minimum clock to tag a pull of step `step` with.
  uint64_t ReadClock(uint64_t step) const;

  StepParams* const params_;
  const ModelSpec& spec_;
  std::vector<ReplayTable> replay_;  // Per model table, then the dense one.
  EmbeddingCache* cache_ = nullptr;
  JobClock* clock_ = nullptr;
  uint32_t staleness_ = 0;
  absl::flat_hash_map<uint64_t, uint32_t> prev_index_;  // Scratch of Split().
};

}  // namespace trainer_internal
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_SPLIT_PULL_H_

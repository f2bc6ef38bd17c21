// Read-your-own-writes prefetch (internal to worker/trainer): a step's pull
// split in two around the previous step's push, so that a prefetched step
// still sees every push of this worker's earlier steps, exactly.
//
// Step t + 1's rows split against step t's unique keys, per model table:
//  - kUntouched: the keys step t does not push. Their values cannot change
//    by step t's push, so this part may be pulled before step t's push is
//    acknowledged (as soon as step t - 1's is), while step t computes.
//  - kOwnWrites: the keys step t pushes, and every dense chunk (step t
//    always pushes the whole dense gradient). Pulled only once step t's push
//    is acknowledged, so they include it.
// The two parts together fill exactly the buffers StepParams::StartPull
// fills, with values that include every push of this worker before step
// t + 1 (and whatever other workers pushed by then). With one worker the
// values are the same as a synchronous step's, bit for bit.
//
// Thread-safety: a SplitPuller and the Prepared it splits are used by one
// thread at a time; the two parts' ops write disjoint buffers and may be in
// flight at once.
#ifndef SHARDPS_WORKER_TRAINER_SPLIT_PULL_H_
#define SHARDPS_WORKER_TRAINER_SPLIT_PULL_H_

#include <cstdint>
#include <memory>

#include "absl/container/flat_hash_set.h"
#include "worker/model/model.h"
#include "worker/param_store.h"
#include "worker/trainer_data.h"
#include "worker/trainer_params.h"

namespace shardps {
namespace trainer_internal {

enum PullPartKind { kUntouched = 0, kOwnWrites = 1 };

class SplitPuller {
 public:
  // `params` and `spec` are not owned and must outlive this.
  SplitPuller(StepParams* params, const ModelSpec& spec) : params_(params), spec_(spec) {}

  // Splits p's unique keys against `prev`'s (the step before p's) into
  // p->parts. Must precede the two StartPart calls for p.
  void Split(Prepared* p, const Prepared& prev);

  // Starts the pull of one part of p (Split done) as of `step`. The op's
  // Wait() copies the part's rows into p->rows (kUntouched) or p->rows and
  // p->dense_params (kOwnWrites); it may be called more than once. An empty
  // part gives an op that is already done. p must stay untouched but for
  // the other part's op until Wait() returns.
  std::unique_ptr<PsClient::Op> StartPart(Prepared* p, PullPartKind part, PullPurpose purpose,
                                          uint64_t step);

 private:
  StepParams* const params_;
  const ModelSpec& spec_;
  absl::flat_hash_set<uint64_t> prev_keys_;  // Scratch of Split().
};

}  // namespace trainer_internal
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_SPLIT_PULL_H_

// BspAggregator: a parameter server's BSP clocks (parameter_server_core.h,
// "Consistency"). Pushes of clock c are buffered per rank; when every active
// worker has pushed c and the clocks < c are applied, c is applied to the
// tables as one step per key with the mean gradient: the sum over ranks in
// rank order (a key a rank did not push adds nothing), divided by the number
// of ranks in (active set U ranks that pushed c), with the lowest such
// rank's lr_scale. The result is bit-identical whatever the arrival order.
// Admission counts each rank's push that held a key once. Clocks start at 0;
// a pull of clock t waits until the clocks < t are applied.
//
// Buffered pushes are bounded: a push of a clock kClocksAhead or more past
// the applied clock is refused (a worker is never more than one ahead).
//
// The caller (ParameterServerCore) validates pushes, holds requests out
// while it restores the tables (then Reset), and keeps the job generation;
// the aggregator keeps the generation its clocks belong to, so a pull
// waiting for a clock of an older generation wakes at a restore.
//
// Thread-safe. Clocks are applied on the thread whose push or SetActive
// completes them, under the aggregator's lock.
#ifndef SHARDPS_SERVER_BSP_AGGREGATOR_H_
#define SHARDPS_SERVER_BSP_AGGREGATOR_H_

#include <cstdint>
#include <functional>
#include <map>
#include <set>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "server/table_store.h"

namespace shardps {

class BspAggregator {
 public:
  static constexpr uint64_t kClocksAhead = 8;

  // One rank's push of one clock: per table, its keys and gradients
  // (keys.size() x the table's dim), non-finite rows already left out.
  struct BufferedTable {
    uint32_t table_id = 0;
    std::vector<uint64_t> keys;
    std::vector<float> grads;
  };
  struct BufferedPush {
    float lr_scale = 1;
    std::vector<BufferedTable> tables;
  };

  // Ranks 0..num_workers-1 are active until SetActive. `store` is not
  // owned; its tables receive the applied clocks. `on_applied` is called
  // with c + 1 under the aggregator's lock once clock c is applied.
  BspAggregator(uint32_t server_index, uint32_t num_workers, TableStore* store,
                std::function<void(uint64_t)> on_applied);
  BspAggregator(const BspAggregator&) = delete;
  BspAggregator& operator=(const BspAggregator&) = delete;

  // Buffers `rank`'s push of `clock` and applies every clock it completes.
  // FAILED_PRECONDITION for a rank that is not active; INVALID_ARGUMENT for
  // a clock kClocksAhead or more past the applied clock; ALREADY_EXISTS for
  // an applied clock or the rank's second push of a clock (a retry of a
  // push that was received). A refused push changes nothing.
  absl::Status Buffer(uint32_t rank, uint64_t clock, BufferedPush push);
  // The ranks whose pushes close a clock; applies the clocks that completes.
  void SetActive(std::set<uint32_t> ranks);
  // Blocks until the clocks < `clock` are applied (OK), the clocks are
  // reset into another generation than `generation` (OK: the caller's
  // generation check refuses the request), Shutdown (UNAVAILABLE) or
  // `deadline` (DEADLINE_EXCEEDED naming the ranks the next clock waits
  // for).
  absl::Status WaitForClock(uint64_t clock, uint64_t generation, absl::Time deadline);
  // The clocks < applied_clock() are applied.
  uint64_t applied_clock() const;
  // Runs `copy` (a checkpoint's copy of the rows) with no clock applied
  // meanwhile if exactly the clocks < `clock` are applied;
  // FAILED_PRECONDITION otherwise.
  absl::Status AtClock(uint64_t clock, const std::function<void()>& copy);
  // The tables were restored to `clock` in job generation `generation`:
  // buffered pushes go and waiting pulls wake.
  void Reset(uint64_t clock, uint64_t generation);
  // Wakes every wait; they return UNAVAILABLE.
  void Shutdown();

 private:
  // Applies every complete clock in order.
  void CloseClocksLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void ApplyClockLocked(const std::map<uint32_t, BufferedPush>& pushes, size_t num_ranks)
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const uint32_t server_index_;
  TableStore* const store_;
  const std::function<void(uint64_t)> on_applied_;

  mutable Mutex mu_;
  CondVar clock_applied_;
  std::set<uint32_t> active_ ABSL_GUARDED_BY(mu_);
  // clock -> rank -> push, for clocks >= applied_clock_.
  std::map<uint64_t, std::map<uint32_t, BufferedPush>> pending_ ABSL_GUARDED_BY(mu_);
  uint64_t applied_clock_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t generation_ ABSL_GUARDED_BY(mu_) = 0;
  bool shutdown_ ABSL_GUARDED_BY(mu_) = false;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_BSP_AGGREGATOR_H_

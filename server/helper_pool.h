// HelperPool: a few threads that help one caller at a time finish a batch.
//
// A large pull or push is split into chunks of stripes (server/table.h).
// ParallelFor runs the chunks on the calling thread and, at the same time, on
// the pool's idle helpers: each participant claims the next unclaimed chunk
// until none is left. With one client the server's gRPC thread would
// otherwise work alone while the other core waits for the reply.
//
// The caller always takes part, and never waits for a helper to start: if the
// helpers are asleep or busy, the caller simply claims every chunk itself. So
// a call is never much slower than a serial loop. The pool serves one
// ParallelFor at a time; a second, concurrent caller (another client's RPC)
// runs its chunks alone, which is right when every core is busy anyway.
//
// Waking a helper only pays when a core is idle. With every core busy (two
// clients on this 2-core machine) the woken helper just preempts other work:
// workload W with 2 clients at dim 16 lost 11%. So by default the pool keeps
// an estimate of the machine's idle cores, from /proc/stat's idle time over
// the last >= 100 ms (refreshed by a caller, one pread), and wakes helpers
// only while more than half a core (0.6) was idle. (An instantaneous count
// of runnable tasks, /proc/loadavg, was tried first: it always counted the
// server's other gRPC thread, and the helpers never woke.) In a container
// /proc/stat is the host's; --table_helpers=0 turns the pool off.
//
// Thread-safety: ParallelFor may be called from any number of threads.
#ifndef SHARDPS_SERVER_HELPER_POOL_H_
#define SHARDPS_SERVER_HELPER_POOL_H_

#include <atomic>
#include <cstdint>
#include <thread>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/functional/function_ref.h"
#include "common/mutex.h"

namespace shardps {

class HelperPool {
 public:
  // `helpers` threads (0: ParallelFor is a plain loop on the caller).
  // `only_when_idle`: wake them only when a core looks idle (see above);
  // false wakes them for every call (tests).
  explicit HelperPool(int helpers, bool only_when_idle = true);
  ~HelperPool();  // Joins the helpers. No ParallelFor may be running.
  HelperPool(const HelperPool&) = delete;
  HelperPool& operator=(const HelperPool&) = delete;

  // Calls fn(c) exactly once for each c in [0, chunks), on this thread and on
  // idle helpers, in no particular order; returns once every call returned.
  // fn must be safe to run concurrently for different chunks.
  void ParallelFor(int chunks, absl::FunctionRef<void(int)> fn);

  int helpers() const { return static_cast<int>(threads_.size()); }

  // The process's pool (created on first use with DefaultHelpers() threads,
  // or the count given to SetSharedHelpers before that).
  static HelperPool& Shared();
  // Sets the shared pool's size; only effective before its first use.
  static void SetSharedHelpers(int helpers);
  // hardware_concurrency - 1, at most 3 (0 on one core).
  static int DefaultHelpers();

 private:
  struct Job {
    absl::FunctionRef<void(int)> fn;
    int chunks;
    std::atomic<int> next{0};
    int active = 0;  // Helpers inside the job (guarded by mu_).
  };
  static void RunChunks(Job& job);
  // Whether at least 0.6 of a core was idle lately (true if unknown).
  bool IdleCoreLikely();
  // Re-reads /proc/stat if the last reading is >= 100 ms old.
  void RefreshIdle();
  void HelperLoop();

  Mutex busy_;  // Held by the one caller using the helpers.
  Mutex mu_;
  CondVar posted_cv_;  // A job was posted, or stop_.
  CondVar done_cv_;    // A helper left a job.
  Job* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t posted_ ABSL_GUARDED_BY(mu_) = 0;  // Jobs posted so far.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
  int stat_fd_ = -1;  // /proc/stat, when only_when_idle.
  int cores_ = 1;
  Mutex refresh_mu_;                                      // One refresher at a time (TryLock).
  uint64_t last_total_ ABSL_GUARDED_BY(refresh_mu_) = 0;  // Jiffies.
  uint64_t last_idle_ ABSL_GUARDED_BY(refresh_mu_) = 0;
  std::atomic<int64_t> last_refresh_ns_{0};
  std::atomic<int> idle_millicores_{1000000};  // Unknown: idle.
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_HELPER_POOL_H_

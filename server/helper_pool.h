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
  explicit HelperPool(int helpers);
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
  void HelperLoop();

  Mutex busy_;  // Held by the one caller using the helpers.
  Mutex mu_;
  CondVar posted_cv_;  // A job was posted, or stop_.
  CondVar done_cv_;    // A helper left a job.
  Job* job_ ABSL_GUARDED_BY(mu_) = nullptr;
  uint64_t posted_ ABSL_GUARDED_BY(mu_) = 0;  // Jobs posted so far.
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<std::thread> threads_;
};

}  // namespace shardps

#endif  // SHARDPS_SERVER_HELPER_POOL_H_

#include "server/helper_pool.h"

#include <algorithm>

namespace shardps {
namespace {

int& SharedHelpersSetting() {
  static int helpers = -1;  // -1: DefaultHelpers().
  return helpers;
}

}  // namespace

HelperPool::HelperPool(int helpers) {
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

HelperPool::~HelperPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  posted_cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
}

void HelperPool::RunChunks(Job& job) {
  for (int c = job.next.fetch_add(1, std::memory_order_relaxed); c < job.chunks;
       c = job.next.fetch_add(1, std::memory_order_relaxed)) {
    job.fn(c);
  }
}

void HelperPool::HelperLoop() {
  uint64_t seen = 0;
  MutexLock lock(&mu_);
  while (true) {
    while (!stop_ && (job_ == nullptr || posted_ == seen)) posted_cv_.Wait(&mu_);
    if (stop_) return;
    seen = posted_;
    Job* job = job_;
    ++job->active;  // The caller waits for this to drop before returning.
    mu_.Unlock();
    RunChunks(*job);
    mu_.Lock();
    if (--job->active == 0) done_cv_.SignalAll();
  }
}

void HelperPool::ParallelFor(int chunks, absl::FunctionRef<void(int)> fn) {
  if (threads_.empty() || chunks <= 1 || !busy_.TryLock()) {
    for (int c = 0; c < chunks; ++c) fn(c);
    return;
  }
  Job job{fn, chunks};
  {
    MutexLock lock(&mu_);
    job_ = &job;
    ++posted_;
  }
  posted_cv_.SignalAll();
  RunChunks(job);
  {
    MutexLock lock(&mu_);
    job_ = nullptr;  // No helper joins from now on.
    while (job.active > 0) done_cv_.Wait(&mu_);
  }
  busy_.Unlock();
}

int HelperPool::DefaultHelpers() {
  const int cores = static_cast<int>(std::thread::hardware_concurrency());
  return std::clamp(cores - 1, 0, 3);
}

void HelperPool::SetSharedHelpers(int helpers) { SharedHelpersSetting() = helpers; }

HelperPool& HelperPool::Shared() {
  static HelperPool* pool = new HelperPool(
      SharedHelpersSetting() >= 0 ? SharedHelpersSetting() : DefaultHelpers());
  return *pool;
}

}  // namespace shardps

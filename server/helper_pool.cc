#include "server/helper_pool.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>

#include "absl/time/clock.h"

namespace shardps {
namespace {

int& SharedHelpersSetting() {
  static int helpers = -1;  // -1: DefaultHelpers().
  return helpers;
}

}  // namespace

HelperPool::HelperPool(int helpers, bool only_when_idle) {
  cores_ = std::max(1, static_cast<int>(std::thread::hardware_concurrency()));
  if (only_when_idle && helpers > 0) {
    stat_fd_ = open("/proc/stat", O_RDONLY | O_CLOEXEC);
    if (stat_fd_ >= 0) RefreshIdle();  // The baseline reading.
  }
  for (int i = 0; i < helpers; ++i) threads_.emplace_back([this] { HelperLoop(); });
}

HelperPool::~HelperPool() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  posted_cv_.SignalAll();
  for (std::thread& t : threads_) t.join();
  if (stat_fd_ >= 0) close(stat_fd_);
}

void HelperPool::RefreshIdle() {
  const int64_t now = absl::GetCurrentTimeNanos();
  if (now - last_refresh_ns_.load(std::memory_order_relaxed) < 100'000'000) return;
  if (!refresh_mu_.TryLock()) return;
  last_refresh_ns_.store(now, std::memory_order_relaxed);
  // "cpu  user nice system idle iowait irq softirq steal ...", in jiffies.
  char buf[256];
  const ssize_t n = pread(stat_fd_, buf, sizeof buf - 1, 0);
  if (n > 4 && std::strncmp(buf, "cpu ", 4) == 0) {
    buf[n] = '\0';
    uint64_t field[8] = {};
    const char* p = buf + 4;
    for (int f = 0; f < 8; ++f) {
      while (*p == ' ') ++p;
      for (; *p >= '0' && *p <= '9'; ++p) field[f] = field[f] * 10 + (*p - '0');
    }
    uint64_t total = 0;
    for (uint64_t v : field) total += v;
    const uint64_t idle = field[3] + field[4];  // idle + iowait.
    if (last_total_ != 0 && total > last_total_) {
      idle_millicores_.store(
          static_cast<int>(1000 * cores_ * (idle - last_idle_) / (total - last_total_)),
          std::memory_order_relaxed);
    }
    last_total_ = total;
    last_idle_ = idle;
  }
  refresh_mu_.Unlock();
}

bool HelperPool::IdleCoreLikely() {
  if (stat_fd_ < 0) return true;
  RefreshIdle();
  return idle_millicores_.load(std::memory_order_relaxed) >= 600;
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
  if (threads_.empty() || chunks <= 1 || !IdleCoreLikely() || !busy_.TryLock()) {
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
  static HelperPool* pool =
      new HelperPool(SharedHelpersSetting() >= 0 ? SharedHelpersSetting() : DefaultHelpers());
  return *pool;
}

}  // namespace shardps

#include "tests/testing/thread_state.h"

#include <dirent.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps::testing {
namespace {

std::string TaskDir(pid_t pid) {
  return pid == 0 ? "/proc/self/task" : absl::StrCat("/proc/", pid, "/task");
}

// The first field of /proc/<pid>/task/<tid>/syscall: the number of the
// system call the thread is blocked in, "running", "-1" (blocked outside a
// system call), or "" if the file cannot be read.
std::string SyscallField(pid_t pid, pid_t tid) {
  std::ifstream in(absl::StrCat(TaskDir(pid), "/", tid, "/syscall"));
  std::string field;
  in >> field;
  return field;
}

bool InFutex(const std::string& field) { return field == std::to_string(SYS_futex); }

}  // namespace

pid_t CurrentThreadId() { return static_cast<pid_t>(syscall(SYS_gettid)); }

std::set<pid_t> ThreadIds(pid_t pid) {
  std::set<pid_t> tids;
  DIR* dir = opendir(TaskDir(pid).c_str());
  if (dir == nullptr) return tids;
  while (dirent* e = readdir(dir)) {
    const int tid = std::atoi(e->d_name);
    if (tid > 0) tids.insert(tid);
  }
  closedir(dir);
  return tids;
}

absl::Status WaitUntilBlocked(pid_t tid, absl::Duration timeout, pid_t pid) {
  const absl::Time deadline = absl::Now() + timeout;
  std::string last;
  bool blocked_before = false;
  while (true) {
    last = SyscallField(pid, tid);
    if (last.empty()) {
      if (ThreadIds(pid).count(tid) == 0) {
        return absl::NotFoundError(absl::StrCat("thread ", tid, " of ", TaskDir(pid), " is gone"));
      }
      return absl::FailedPreconditionError(
          absl::StrCat("cannot read ", TaskDir(pid), "/", tid, "/syscall"));
    }
    const bool blocked = InFutex(last);
    if (blocked && blocked_before) return absl::OkStatus();
    blocked_before = blocked;
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat("thread ", tid, " of ", TaskDir(pid), " did not block in futex(2) within ",
                       absl::FormatDuration(timeout), " (last syscall field: ", last, ")"));
    }
    absl::SleepFor(absl::Milliseconds(2));  // Polls; bounded by `deadline`.
  }
}

absl::Status WaitForNewBlockedThread(pid_t pid, const std::set<pid_t>& known,
                                     absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  std::set<pid_t> blocked_before;
  while (true) {
    std::set<pid_t> blocked;
    for (pid_t tid : ThreadIds(pid)) {
      if (known.count(tid) == 0 && InFutex(SyscallField(pid, tid))) {
        if (blocked_before.count(tid)) return absl::OkStatus();
        blocked.insert(tid);
      }
    }
    blocked_before = std::move(blocked);
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat("no new thread of process ", pid,
                                                      " blocked in futex(2) within ",
                                                      absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(2));  // Polls; bounded by `deadline`.
  }
}

BackgroundCall::BackgroundCall(std::function<absl::Status()> call)
    : thread_([this, call = std::move(call)] {
        tid_ = CurrentThreadId();
        result_ = call();
        done_ = true;
      }) {}

BackgroundCall::~BackgroundCall() {
  if (thread_.joinable()) thread_.join();
}

absl::Status BackgroundCall::WaitUntilBlocked(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (tid_ == 0 && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(1));  // Polls; bounded by `deadline`.
  }
  if (tid_ == 0) return absl::DeadlineExceededError("the call's thread did not start");
  absl::Status st = testing::WaitUntilBlocked(tid_, deadline - absl::Now());
  if (done_ || absl::IsNotFound(st)) {
    thread_.join();
    return absl::FailedPreconditionError(
        absl::StrCat("the call returned without blocking: ", result_.ToString()));
  }
  return st;
}

absl::Status BackgroundCall::Join() {
  if (thread_.joinable()) thread_.join();
  return result_;
}

}  // namespace shardps::testing

// Whether a thread sleeps in the kernel, read from /proc: for tests that
// must know a waiter is blocked (in a condition variable's wait, say)
// before they wake it, instead of sleeping and hoping it got there.
//
// A thread is *blocked* when /proc/<pid>/task/<tid>/syscall shows it inside
// futex(2), which is where a std::condition_variable or a contended
// std::mutex sleeps. WaitUntilBlocked asks for that in two readings in a
// row, so a thread passing through a contended mutex on its way to the wait
// is unlikely to be taken for the waiter; a caller whose waiter can only
// block in one place (the wait under test) gets an exact answer.
//
// Linux only. Thread-safe (reads /proc only). Reading another process's
// threads needs ptrace access to it (a child of the test, same user).
#ifndef SHARDPS_TESTS_TESTING_THREAD_STATE_H_
#define SHARDPS_TESTS_TESTING_THREAD_STATE_H_

#include <sys/types.h>

#include <atomic>
#include <functional>
#include <set>
#include <thread>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace shardps::testing {

// The calling thread's id (gettid).
pid_t CurrentThreadId();

// The thread ids of process `pid` (0: this process); empty if it is gone.
std::set<pid_t> ThreadIds(pid_t pid = 0);

// Polls until thread `tid` of process `pid` (0: this process) is blocked in
// futex(2) in two readings 2 ms apart. DEADLINE_EXCEEDED after `timeout`
// (naming the thread and what /proc said last), NOT_FOUND if the thread is
// gone, FAILED_PRECONDITION if /proc cannot tell.
absl::Status WaitUntilBlocked(pid_t tid, absl::Duration timeout, pid_t pid = 0);

// Polls until process `pid` has a thread that is not in `known` and is
// blocked (as above); returns OK once it has. For a waiter that runs on a
// thread of its own the process starts for it (ps_server's BSP pulls).
absl::Status WaitForNewBlockedThread(pid_t pid, const std::set<pid_t>& known,
                                     absl::Duration timeout);

// Runs `call` on a thread of its own: a waiter a test wakes once it waits.
//
//   BackgroundCall pull([&] { return core->Pull(request, deadline, &response); });
//   ASSERT_TRUE(pull.WaitUntilBlocked().ok());   // It waits for its clock...
//   ... wake it ...
//   EXPECT_TRUE(IsStaleGeneration(pull.Join())); // ...and was refused.
//
// Not thread-safe: one test thread drives it. The destructor joins.
class BackgroundCall {
 public:
  explicit BackgroundCall(std::function<absl::Status()> call);
  ~BackgroundCall();
  BackgroundCall(const BackgroundCall&) = delete;
  BackgroundCall& operator=(const BackgroundCall&) = delete;

  // Waits until the call's thread is blocked (WaitUntilBlocked above).
  // FAILED_PRECONDITION, with its status, if the call returned first: it
  // did not wait.
  absl::Status WaitUntilBlocked(absl::Duration timeout = absl::Seconds(30));
  // Whether the call has returned.
  bool done() const { return done_.load(); }
  // Joins the thread; the call's status.
  absl::Status Join();

 private:
  std::atomic<pid_t> tid_{0};
  std::atomic<bool> done_{false};
  absl::Status result_;  // Written by the thread before done_.
  std::thread thread_;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_THREAD_STATE_H_

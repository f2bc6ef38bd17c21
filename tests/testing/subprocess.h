// Test helpers: start one of our real binaries as a child process, wait for
// the line it prints once it is serving, and stop it.
//
// Not thread-safe; one Subprocess per child. The destructor kills a child
// still running (SIGKILL) and reaps it.
#ifndef SHARDPS_TESTS_TESTING_SUBPROCESS_H_
#define SHARDPS_TESTS_TESTING_SUBPROCESS_H_

#include <sys/types.h>

#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"

namespace shardps::testing {

class Subprocess {
 public:
  Subprocess() = default;
  ~Subprocess();
  Subprocess(const Subprocess&) = delete;
  Subprocess& operator=(const Subprocess&) = delete;

  // Starts argv[0] (a path) with `argv`. Its stdout is read by WaitForLine;
  // stderr goes to `stderr_path` (appended) or is inherited if empty.
  absl::Status Start(const std::vector<std::string>& argv, const std::string& stderr_path = "");

  // Reads stdout until a line starting with `prefix`; returns the rest of
  // that line. DEADLINE_EXCEEDED or UNAVAILABLE (child exited) otherwise.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix, absl::Duration timeout);

  // Sends `signal`; then Wait() reaps.
  void Signal(int signal);
  // Waits for exit up to `timeout`; returns the exit code (128 + signal for
  // a signal death), or DEADLINE_EXCEEDED.
  absl::StatusOr<int> Wait(absl::Duration timeout);
  // Without blocking: reads what stdout holds, and returns the exit code if
  // the child has exited (reaped), else nullopt.
  std::optional<int> Poll();
  // Everything read from stdout so far.
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }

 private:
  pid_t pid_ = -1;
  int stdout_fd_ = -1;
  std::string output_;
  size_t consumed_ = 0;
  bool reaped_ = false;
  int exit_code_ = -1;
};

// Path of a binary in the test's runfiles, e.g. "server/ps_server".
std::string RunfilePath(const std::string& relative);

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_SUBPROCESS_H_

#include "tests/testing/subprocess.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"

namespace shardps::testing {

Subprocess::~Subprocess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    waitpid(pid_, nullptr, 0);
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

absl::Status Subprocess::Start(const std::vector<std::string>& argv,
                               const std::string& stderr_path) {
  int fds[2];
  if (pipe(fds) != 0) return absl::InternalError("pipe failed");
  pid_ = fork();
  if (pid_ < 0) return absl::InternalError("fork failed");
  if (pid_ == 0) {
    dup2(fds[1], 1);
    close(fds[0]);
    close(fds[1]);
    if (!stderr_path.empty()) {
      const int err = open(stderr_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      if (err >= 0) dup2(err, 2);
    }
    std::vector<char*> args;
    for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  stdout_fd_ = fds[0];
  return absl::OkStatus();
}

absl::StatusOr<std::string> Subprocess::WaitForLine(const std::string& prefix,
                                                    absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    size_t eol;
    while ((eol = output_.find('\n', consumed_)) != std::string::npos) {
      const std::string line = output_.substr(consumed_, eol - consumed_);
      consumed_ = eol + 1;
      if (line.rfind(prefix, 0) == 0) return line.substr(prefix.size());
    }
    const int left = static_cast<int>(absl::ToInt64Milliseconds(deadline - absl::Now()));
    if (left <= 0) {
      return absl::DeadlineExceededError(absl::StrCat("no line \"", prefix, "\""));
    }
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, left) <= 0) continue;
    char buf[4096];
    const ssize_t n = read(stdout_fd_, buf, sizeof buf);
    if (n <= 0) {
      return absl::UnavailableError(
          absl::StrCat("process exited before printing \"", prefix, "\"; output: ", output_));
    }
    output_.append(buf, n);
  }
}

void Subprocess::Signal(int signal) {
  if (pid_ > 0 && !reaped_) kill(pid_, signal);
}

absl::StatusOr<int> Subprocess::Wait(absl::Duration timeout) {
  if (reaped_) return exit_code_;
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    int status = 0;
    const pid_t r = waitpid(pid_, &status, WNOHANG);
    if (r == pid_) {
      reaped_ = true;
      // Drain what is left on stdout.
      char buf[4096];
      fcntl(stdout_fd_, F_SETFL, O_NONBLOCK);
      ssize_t n;
      while ((n = read(stdout_fd_, buf, sizeof buf)) > 0) output_.append(buf, n);
      exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
      return exit_code_;
    }
    if (absl::Now() > deadline) return absl::DeadlineExceededError("still running");
    // Keep the pipe drained so a chatty child never blocks on a full pipe.
    pollfd p{stdout_fd_, POLLIN, 0};
    if (poll(&p, 1, 20) > 0) {
      char buf[4096];
      const ssize_t n = read(stdout_fd_, buf, sizeof buf);
      if (n > 0) output_.append(buf, n);
    }
  }
}

std::optional<int> Subprocess::Poll() {
  if (pid_ <= 0) return std::nullopt;
  if (reaped_) return exit_code_;
  char buf[4096];
  fcntl(stdout_fd_, F_SETFL, O_NONBLOCK);
  ssize_t n;
  while ((n = read(stdout_fd_, buf, sizeof buf)) > 0) output_.append(buf, n);
  int status = 0;
  if (waitpid(pid_, &status, WNOHANG) != pid_) return std::nullopt;
  reaped_ = true;
  while ((n = read(stdout_fd_, buf, sizeof buf)) > 0) output_.append(buf, n);
  exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return exit_code_;
}

std::string RunfilePath(const std::string& relative) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  const char* workspace = std::getenv("TEST_WORKSPACE");
  if (srcdir == nullptr) return relative;
  return absl::StrCat(srcdir, "/", workspace ? workspace : "shardps", "/", relative);
}

}  // namespace shardps::testing

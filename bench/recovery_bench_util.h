// recovery_bench's plumbing (recovery_bench.cc says what it measures):
// constants, files and the page cache, CPU accounting, the disk's own rates,
// and the child processes it supervises (tests/testing's Subprocess and
// FreePort). Header-only, for this bench.
#ifndef SHARDPS_BENCH_RECOVERY_BENCH_UTIL_H_
#define SHARDPS_BENCH_RECOVERY_BENCH_UTIL_H_

#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/client/ps_client.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "common/generation.h"
#include "common/init.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "tests/testing/free_port.h"
#include "tests/testing/subprocess.h"

namespace shardps::rbench {

inline constexpr uint32_t kTable = 1;
inline constexpr uint32_t kDim = 16;
inline constexpr uint32_t kRank = 0;
inline constexpr size_t kBlock = 4 << 20;  // Disk test block.
inline constexpr double kMB = 1e6;

inline double Secs(absl::Duration d) { return absl::ToDoubleSeconds(d); }
inline double UnixSec(absl::Time t) { return absl::ToDoubleSeconds(t - absl::UnixEpoch()); }

// Row i's key: distinct for distinct i (Mix64 is a bijection), spread like
// random 64-bit ids.
inline uint64_t Key(uint64_t i) { return Mix64(i + 0x6a09e667f3bcc909ULL); }

inline void Progress(const std::string& what) {
  std::fprintf(stderr, "[recovery_bench %s] %s\n",
               absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()).c_str(),
               what.c_str());
}

// ---- files ------------------------------------------------------------------

inline std::string ReadFile(const std::string& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

inline std::string Tail(const std::string& path, size_t lines) {
  const std::string text = ReadFile(path);
  size_t at = text.size();
  for (size_t n = 0; n <= lines && at > 0;) {
    if (text[--at] == '\n') ++n;
  }
  return text.substr(at);
}

// Regular files under `dir`, recursively.
inline std::vector<std::string> FilesUnder(const std::string& dir) {
  std::vector<std::string> files;
  std::error_code ec;
  for (auto it = std::filesystem::recursive_directory_iterator(dir, ec);
       !ec && it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
    if (it->is_regular_file(ec)) files.push_back(it->path().string());
  }
  return files;
}

inline uint64_t BytesUnder(const std::string& dir) {
  uint64_t bytes = 0;
  for (const std::string& f : FilesUnder(dir)) {
    std::error_code ec;
    const auto size = std::filesystem::file_size(f, ec);
    if (!ec) bytes += size;
  }
  return bytes;
}

// The directory of the checkpoint at `clock` under `root` (ckpt-<clock>).
inline absl::StatusOr<std::string> CheckpointDir(const std::string& root, uint64_t clock) {
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(root, ec)) {
    const std::string name = e.path().filename().string();
    uint64_t c;
    if (name.rfind("ckpt-", 0) == 0 && absl::SimpleAtoi(name.substr(5), &c) && c == clock) {
      return e.path().string();
    }
  }
  return absl::NotFoundError(absl::StrCat("no ckpt-", clock, " directory under ", root));
}

// Drops `files` from the page cache (their writer fsynced them; fdatasync
// again is cheap and makes sure no page is dirty, which DONTNEED would keep).
inline absl::Status Evict(const std::vector<std::string>& files) {
  for (const std::string& f : files) {
    const int fd = open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("open ", f));
    fdatasync(fd);
    const int err = posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    if (err != 0) return absl::ErrnoToStatus(err, absl::StrCat("posix_fadvise ", f));
  }
  return absl::OkStatus();
}

// The fraction of `files`' pages in the page cache (mincore).
inline double Resident(const std::vector<std::string>& files) {
  const size_t page = sysconf(_SC_PAGESIZE);
  uint64_t total = 0, resident = 0;
  std::vector<unsigned char> vec;
  for (const std::string& f : files) {
    const int fd = open(f.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) continue;
    struct stat st;
    if (fstat(fd, &st) == 0 && st.st_size > 0) {
      void* p = mmap(nullptr, st.st_size, PROT_READ, MAP_SHARED, fd, 0);
      if (p != MAP_FAILED) {
        const size_t pages = (st.st_size + page - 1) / page;
        vec.resize(pages);
        if (mincore(p, st.st_size, vec.data()) == 0) {
          total += pages;
          for (unsigned char v : vec) resident += v & 1;
        }
        munmap(p, st.st_size);
      }
    }
    close(fd);
  }
  return total == 0 ? 0.0 : static_cast<double>(resident) / total;
}

// ---- CPU accounting (is anything else running?) --------------------------------

// Busy jiffies of the whole machine (user, nice, system, irq, softirq).
inline uint64_t MachineBusy() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  uint64_t user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq;
  return user + nice + system + irq + softirq;
}

// utime + stime of process `pid` (0: this one), in jiffies.
inline uint64_t ProcessCpu(pid_t pid) {
  const std::string stat =
      ReadFile(pid == 0 ? "/proc/self/stat" : absl::StrCat("/proc/", pid, "/stat"));
  const size_t paren = stat.rfind(')');
  if (paren == std::string::npos) return 0;
  std::istringstream in(stat.substr(paren + 2));
  std::string field;
  uint64_t utime = 0, stime = 0;
  // Fields 3..13 precede utime (14) and stime (15).
  for (int i = 3; i <= 13 && in >> field; ++i) {
  }
  in >> utime >> stime;
  return utime + stime;
}

// CPU used over a window, in cores: by some of this job's processes, and by
// every process outside the job.
class CpuWindow {
 public:
  // `job`: this job's processes (0 = this one).
  explicit CpuWindow(std::vector<pid_t> job) : start_(absl::Now()), machine_(MachineBusy()) {
    for (pid_t p : job) start_cpu_.push_back({p, ProcessCpu(p)});
  }
  // (cores used by `picked`, a subset of the job; cores used outside the job).
  std::pair<double, double> End(const std::vector<pid_t>& picked) const {
    const double secs = Secs(absl::Now() - start_);
    const double tick = sysconf(_SC_CLK_TCK);
    uint64_t job = 0, mine = 0;
    for (const auto& [pid, start] : start_cpu_) {
      const uint64_t used = ProcessCpu(pid) - start;
      job += used;
      if (std::find(picked.begin(), picked.end(), pid) != picked.end()) mine += used;
    }
    const double machine = static_cast<double>(MachineBusy() - machine_);
    const double others = std::max(0.0, machine - static_cast<double>(job));
    return {mine / tick / secs, others / tick / secs};
  }

 private:
  const absl::Time start_;
  const uint64_t machine_;
  std::vector<std::pair<pid_t, uint64_t>> start_cpu_;
};

struct DiskRates {
  double write_mbps = 0;  // 4 MiB writes + fsync.
  double read_mbps = 0;   // 4 MiB reads after POSIX_FADV_DONTNEED.
};

// Writes `bytes` to `path` in 4 MiB blocks (pseudo-random, so nothing below
// can compress or skip them), fsyncs, evicts it, reads it back; removes it.
inline absl::StatusOr<DiskRates> MeasureDisk(const std::string& path, uint64_t bytes) {
  std::vector<uint64_t> block(kBlock / 8);
  for (size_t i = 0; i < block.size(); ++i) block[i] = Mix64(i + 1);
  const int fd = open(path.c_str(), O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return absl::ErrnoToStatus(errno, absl::StrCat("create ", path));
  auto fail = [&](const char* what) {
    const absl::Status st = absl::ErrnoToStatus(errno, absl::StrCat(what, " ", path));
    close(fd);
    unlink(path.c_str());
    return st;
  };
  DiskRates r;
  absl::Time t = absl::Now();
  for (uint64_t done = 0; done < bytes;) {
    const size_t n = std::min<uint64_t>(kBlock, bytes - done);
    block[0] = done;  // Every block differs.
    const ssize_t w = write(fd, block.data(), n);
    if (w <= 0) return fail("write");
    done += w;
  }
  if (fsync(fd) != 0) return fail("fsync");
  r.write_mbps = bytes / kMB / Secs(absl::Now() - t);
  if (posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED) != 0) return fail("posix_fadvise");
  if (lseek(fd, 0, SEEK_SET) != 0) return fail("lseek");
  t = absl::Now();
  uint64_t read_bytes = 0;
  while (true) {
    const ssize_t n = read(fd, block.data(), kBlock);
    if (n < 0) return fail("read");
    if (n == 0) break;
    read_bytes += n;
  }
  r.read_mbps = read_bytes / kMB / Secs(absl::Now() - t);
  close(fd);
  unlink(path.c_str());
  if (read_bytes != bytes) return absl::DataLossError(absl::StrCat("short read of ", path));
  return r;
}

struct MemcpyTimes {
  double fresh = 0;    // Into fresh anonymous memory (4 KiB pages faulted in by the copy).
  double touched = 0;  // Into the same memory again (pages already there).
};

// What one thread takes to copy `bytes` from memory it has touched: what a
// server's checkpoint copy does with its share of the rows, at memcpy speed.
inline absl::StatusOr<MemcpyTimes> MeasureMemcpy(uint64_t bytes) {
  void* src = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  void* dst = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (src == MAP_FAILED || dst == MAP_FAILED) return absl::ErrnoToStatus(errno, "mmap");
  std::memset(src, 0x5a, bytes);
  MemcpyTimes m;
  absl::Time t = absl::Now();
  std::memcpy(dst, src, bytes);
  m.fresh = Secs(absl::Now() - t);
  static_cast<char*>(src)[0] = 1;  // Not the same bytes twice.
  t = absl::Now();
  std::memcpy(dst, src, bytes);
  m.touched = Secs(absl::Now() - t);
  munmap(src, bytes);
  munmap(dst, bytes);
  return m;
}

// ---- child processes ----------------------------------------------------------

// Waits for `p`'s stdout line starting with `prefix`; returns its rest. An
// error names `name` and, if it exited first, quotes the tail of its `log`.
inline absl::StatusOr<std::string> WaitForLine(testing::Subprocess& p, const std::string& name,
                                               const std::string& prefix, const std::string& log,
                                               absl::Duration timeout) {
  auto line = p.WaitForLine(prefix, timeout);
  if (line.ok()) return line;
  return absl::Status(line.status().code(), absl::StrCat(name, ": ", line.status().message(),
                                                         "; its log:\n", Tail(log, 20)));
}

// SIGTERM, then SIGKILL after `grace`.
inline void Stop(testing::Subprocess& p, absl::Duration grace) {
  p.Signal(SIGTERM);
  if (!p.Wait(grace).ok()) {
    p.Signal(SIGKILL);
    (void)p.Wait(absl::Seconds(10));
  }
}

// A binary of this workspace: `flag` if set, else from the runfiles (of
// RUNFILES_DIR, of this executable, or the working directory under bazel run).
inline absl::StatusOr<std::string> FindBinary(const std::string& flag,
                                              const std::string& relative) {
  if (!flag.empty()) return flag;
  std::vector<std::string> candidates;
  if (const char* dir = std::getenv("RUNFILES_DIR")) {
    candidates.push_back(absl::StrCat(dir, "/shardps/", relative));
  }
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  if (n > 0)
    candidates.push_back(absl::StrCat(std::string(self, n), ".runfiles/shardps/", relative));
  candidates.push_back(relative);
  for (const std::string& c : candidates) {
    if (access(c.c_str(), X_OK) == 0) return c;
  }
  return absl::NotFoundError(absl::StrCat(relative, " not found in the runfiles (build with ",
                                          "bazel build //bench:recovery_bench, or pass its path)"));
}

}  // namespace shardps::rbench

#endif  // SHARDPS_BENCH_RECOVERY_BENCH_UTIL_H_

#include "common/init.h"

#include <malloc.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/flags/usage.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "glog/logging.h"

ABSL_FLAG(int, verbosity, 0, "glog verbose level (VLOG).");
ABSL_FLAG(std::string, glog_dir, "", "Also write glog files here (default: stderr only).");

namespace shardps {

std::vector<std::string> InitProcess(int argc, char** argv, const char* usage) {
  absl::SetProgramUsageMessage(usage);
  std::vector<char*> rest = absl::ParseCommandLine(argc, argv);
  const std::string glog_dir = absl::GetFlag(FLAGS_glog_dir);
  FLAGS_logtostderr = glog_dir.empty();
  FLAGS_alsologtostderr = !glog_dir.empty();
  if (!glog_dir.empty()) FLAGS_log_dir = glog_dir;
  FLAGS_v = absl::GetFlag(FLAGS_verbosity);
  google::InitGoogleLogging(argv[0]);
  google::InstallFailureSignalHandler();
  // Debian's Abseil is built without NDEBUG, so absl::Mutex runs its
  // deadlock detector on every Lock: a lookup under one process-wide lock.
  // gRPC's own mutexes are absl::Mutex, taken several times per RPC. The
  // binaries turn it off; tests keep it.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  std::vector<std::string> positional;
  for (size_t i = 1; i < rest.size(); ++i) positional.emplace_back(rest[i]);
  return positional;
}

std::string EnvOr(const char* name, const std::string& fallback) {
  const char* value = std::getenv(name);
  return (value != nullptr && *value != '\0') ? std::string(value) : fallback;
}

void TuneMallocForLargeMessages() {
  mallopt(M_MMAP_THRESHOLD, 256 << 20);
  mallopt(M_TRIM_THRESHOLD, 512 << 20);
  mallopt(M_TOP_PAD, 64 << 20);
}

absl::Status WritePortFile(const std::string& path, int port) {
  if (path.empty()) return absl::OkStatus();
  const std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::trunc);
    out << port << "\n";
    out.close();
    if (!out) return absl::InternalError(absl::StrCat("cannot write port file ", tmp));
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    return absl::InternalError(
        absl::StrCat("cannot rename ", tmp, " to ", path, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace shardps

// Process setup shared by the binaries: command-line flags (absl) and
// logging (glog, to stderr, with the process's role in each line's prefix
// added by the launcher).
//
// Call InitProcess first thing in main(). It parses absl flags (exiting with a
// usage message on a bad flag), sets up glog, turns off absl::Mutex's
// deadlock detector (on in Debian's build; gRPC pays it per lock) and
// returns the positional arguments.
#ifndef SHARDPS_COMMON_INIT_H_
#define SHARDPS_COMMON_INIT_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace shardps {

std::vector<std::string> InitProcess(int argc, char** argv, const char* usage);

// Value of environment variable `name`, or `fallback` if unset or empty. The
// binaries read SHARDPS_* variables this way so one container image works in
// every role (flags win over the environment).
std::string EnvOr(const char* name, const std::string& fallback);

// Keeps glibc malloc from handing gRPC's ~MB message buffers back to the
// kernel after every message: raises the mmap and trim thresholds and the top
// pad. Without it each pull or push of a few hundred KB costs hundreds of page
// faults on both ends (~3x slower on the pull/push loop, measured). Call once,
// before the first RPC, in every process that moves embedding rows over gRPC
// (ps_server, ps_worker). Memory the process frees stays in its heap, up to
// the trim threshold (512 MiB).
void TuneMallocForLargeMessages();

// --port_file of the serving binaries: writes "<port>\n" to `path` + ".tmp",
// then renames it to `path`, so a reader (launcher, test) never sees half of
// it. An empty `path` writes nothing. INTERNAL naming the file when it cannot
// be written or renamed.
absl::Status WritePortFile(const std::string& path, int port);

}  // namespace shardps

#endif  // SHARDPS_COMMON_INIT_H_

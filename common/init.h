// Process setup shared by the binaries: command-line flags (absl) and
// logging (glog, to stderr, with the process's role in each line's prefix
// added by the launcher).
//
// Call InitProcess first thing in main(). It parses absl flags (exiting with a
// usage message on a bad flag) and returns the positional arguments.
#ifndef SHARDPS_COMMON_INIT_H_
#define SHARDPS_COMMON_INIT_H_

#include <string>
#include <vector>

namespace shardps {

std::vector<std::string> InitProcess(int argc, char** argv,
                                     const char* usage);

// Value of environment variable `name`, or `fallback` if unset or empty. The
// binaries read SHARDPS_* variables this way so one container image works in
// every role (flags win over the environment).
std::string EnvOr(const char* name, const std::string& fallback);

}  // namespace shardps

#endif  // SHARDPS_COMMON_INIT_H_

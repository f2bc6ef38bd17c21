// server_rpc_bench's pieces shared by its driver (server_rpc_bench.cc) and
// its client roles (server_rpc_bench_clients.cc): the flags the roles read,
// the workload's constants, and the roles' entry points. The binary runs
// itself as each role (--role).
#ifndef SHARDPS_BENCH_SERVER_RPC_BENCH_H_
#define SHARDPS_BENCH_SERVER_RPC_BENCH_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>

#include "absl/flags/declare.h"

ABSL_DECLARE_FLAG(std::string, role);
ABSL_DECLARE_FLAG(std::string, address);
ABSL_DECLARE_FLAG(int, dim);
ABSL_DECLARE_FLAG(std::string, encoding);
ABSL_DECLARE_FLAG(int, steps);
ABSL_DECLARE_FLAG(int, warmup);
ABSL_DECLARE_FLAG(uint64_t, seed);

namespace shardps::bench {

using Clock = std::chrono::steady_clock;
inline constexpr uint64_t kIds = 1000000;
inline constexpr int kDraws = 4096;
inline constexpr uint32_t kPartitions = 4096;  // The server's partitions.

inline double Seconds(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Where a client's timed steps go: drawing the batch, and each round trip
// as the client sees it (request out to answer in). Printed as
// "TIMES <draw> <pull> <push>", milliseconds per step.
struct StepTimes {
  double draw = 0, pull = 0, push = 0;
  void Print(int steps) const {
    std::printf("TIMES %.4f %.4f %.4f\n", draw * 1e3 / steps, pull * 1e3 / steps,
                push * 1e3 / steps);
  }
};

// The gRPC W client (--role=client): prints its rows/s and TIMES.
int RunGrpcClient();
// The pipelined gRPC W client (--role=pipelined_client): the real PsClient,
// step t's push and step t + 1's pull in flight at once.
int RunPipelinedClient();
// The raw TCP loop's server and client (--role=tcp_server / tcp_client).
int RunTcpServer();
int RunTcpClient();
// The gRPC ceiling's server (--role=null_server): ps_server's data path with
// no table, copying the bytes as the raw TCP server does.
int RunNullServer();
// A blocking TCP connection to host:port on loopback, or -1.
int ConnectLoopback(const std::string& address);
// Writes all `n` bytes to `fd`; false on an error.
bool WriteAll(int fd, const void* data, size_t n);

}  // namespace shardps::bench

#endif  // SHARDPS_BENCH_SERVER_RPC_BENCH_H_

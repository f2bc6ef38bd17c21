// server_rpc_bench's client roles: the gRPC W client and the raw TCP
// request/response loop it is compared with (server_rpc_bench.h).
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/server_rpc_bench.h"
#include "bench/server_zipf.h"
#include "common/codec.h"
#include "common/init.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"

namespace shardps::bench {

// ---- gRPC client -------------------------------------------------------

int RunGrpcClient() {
  TuneMallocForLargeMessages();  // As ps_worker does.
  const int dim = absl::GetFlag(FLAGS_dim);
  const bool bf16 = absl::GetFlag(FLAGS_encoding) == "bf16";
  grpc::ChannelArguments args;
  args.SetMaxReceiveMessageSize(256 << 20);
  args.SetMaxSendMessageSize(256 << 20);
  auto stub = ParameterServer::NewStub(grpc::CreateCustomChannel(
      absl::GetFlag(FLAGS_address), grpc::InsecureChannelCredentials(), args));
  bench::ZipfBatches zipf(kIds, 1.0, absl::GetFlag(FLAGS_seed));
  std::vector<uint64_t> ranks, keys;
  std::vector<float> grads(kDraws * dim, 0.001f);
  PullRequest pull;
  pull.set_map_version(1);
  pull.set_encoding(bf16 ? BF16 : FP32);
  PushRequest push;
  push.set_map_version(1);
  push.set_encoding(bf16 ? BF16 : FP32);
  PullResponse pulled;
  PushResponse pushed;
  uint64_t rows = 0;
  StepTimes times;
  Clock::time_point start;
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int total = warmup + absl::GetFlag(FLAGS_steps);
  for (int step = 0; step < total; ++step) {
    if (step == warmup) {
      start = Clock::now();
      rows = 0;
      times = StepTimes();
    }
    Clock::time_point t = Clock::now();
    zipf.Next(kDraws, &ranks, &keys);
    times.draw += Seconds(t);
    t = Clock::now();  // The pull's round trip, request building included.
    pull.clear_tables();
    TableKeys* tk = pull.add_tables();
    tk->set_table_id(1);
    tk->mutable_keys()->Add(keys.begin(), keys.end());
    pulled.Clear();
    grpc::ClientContext pull_ctx;
    grpc::Status s = stub->Pull(&pull_ctx, pull, &pulled);
    times.pull += Seconds(t);
    if (!s.ok()) {
      std::fprintf(stderr, "pull: %s\n", s.error_message().c_str());
      return 1;
    }
    t = Clock::now();
    push.clear_tables();
    TableGradients* tg = push.add_tables();
    tg->set_table_id(1);
    tg->mutable_keys()->Add(keys.begin(), keys.end());
    EncodeValues(grads.data(), keys.size() * dim, bf16 ? Encoding::kBf16 : Encoding::kFp32,
                 tg->mutable_gradients());
    grpc::ClientContext push_ctx;
    s = stub->Push(&push_ctx, push, &pushed);
    times.push += Seconds(t);
    if (!s.ok()) {
      std::fprintf(stderr, "push: %s\n", s.error_message().c_str());
      return 1;
    }
    rows += keys.size();
  }
  std::printf("ROWS %llu SECONDS %.6f\n", static_cast<unsigned long long>(rows), Seconds(start));
  times.Print(absl::GetFlag(FLAGS_steps));
  return 0;
}

// ---- raw TCP loop --------------------------------------------------------

bool WriteAll(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = write(fd, p, n);
    if (w <= 0) return false;
    p += w;
    n -= w;
  }
  return true;
}
bool ReadAll(int fd, void* data, size_t n) {
  char* p = static_cast<char*>(data);
  while (n > 0) {
    const ssize_t r = read(fd, p, n);
    if (r <= 0) return false;
    p += r;
    n -= r;
  }
  return true;
}
// A blocking TCP connection to 127.0.0.1:<port of "host:port">, or -1.
int ConnectLoopback(const std::string& address) {
  const size_t colon = address.rfind(':');
  if (colon == std::string::npos) return -1;
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(std::atoi(address.c_str() + colon + 1));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}
bool SendMsg(int fd, const std::string& msg) {
  const uint64_t n = msg.size();
  return WriteAll(fd, &n, 8) && WriteAll(fd, msg.data(), n);
}
bool RecvMsg(int fd, std::string* msg) {
  uint64_t n;
  if (!ReadAll(fd, &n, 8)) return false;
  msg->resize(n);
  return ReadAll(fd, &(*msg)[0], n);
}

// Serves one connection: a message of k keys (tag 'P') is answered with k
// rows gathered from its own table; a push (tag 'G') is scattered into it.
int RunTcpServer() {
  const int dim = absl::GetFlag(FLAGS_dim);
  const size_t bpv = absl::GetFlag(FLAGS_encoding) == "bf16" ? 2 : 4;
  const int lfd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  bind(lfd, reinterpret_cast<sockaddr*>(&addr), sizeof addr);
  listen(lfd, 1);
  socklen_t len = sizeof addr;
  getsockname(lfd, reinterpret_cast<sockaddr*>(&addr), &len);
  std::printf("TCP_LISTENING 127.0.0.1:%d\n", ntohs(addr.sin_port));
  std::fflush(stdout);
  const int fd = accept(lfd, nullptr, nullptr);
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  std::vector<char> table(4096 * dim * bpv * 4);  // Stands in for the rows.
  std::string in, out;
  while (RecvMsg(fd, &in)) {
    if (in[0] == 'P') {
      const size_t k = (in.size() - 1) / 8;
      out.resize(k * dim * bpv);
      for (size_t i = 0; i < k; ++i) {
        std::memcpy(&out[i * dim * bpv], &table[(i % 4096) * dim * bpv], dim * bpv);
      }
    } else {
      const size_t k = (in.size() - 1) / (8 + dim * bpv);
      const char* g = in.data() + 1 + k * 8;
      for (size_t i = 0; i < k; ++i) {
        std::memcpy(&table[(i % 4096) * dim * bpv], g + i * dim * bpv, dim * bpv);
      }
      out.assign(16, '\0');
    }
    if (!SendMsg(fd, out)) break;
  }
  return 0;
}

int RunTcpClient() {
  const int dim = absl::GetFlag(FLAGS_dim);
  const size_t bpv = absl::GetFlag(FLAGS_encoding) == "bf16" ? 2 : 4;
  const int fd = ConnectLoopback(absl::GetFlag(FLAGS_address));
  if (fd < 0) return 1;
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  bench::ZipfBatches zipf(kIds, 1.0, absl::GetFlag(FLAGS_seed));
  std::vector<uint64_t> ranks, keys;
  std::vector<char> grads(kDraws * dim * bpv, 1);
  std::string msg, reply;
  uint64_t rows = 0;
  StepTimes times;
  Clock::time_point start;
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int total = warmup + absl::GetFlag(FLAGS_steps);
  for (int step = 0; step < total; ++step) {
    if (step == warmup) {
      start = Clock::now();
      rows = 0;
      times = StepTimes();
    }
    Clock::time_point t = Clock::now();
    zipf.Next(kDraws, &ranks, &keys);
    times.draw += Seconds(t);
    t = Clock::now();
    msg.assign(1, 'P');
    msg.append(reinterpret_cast<const char*>(keys.data()), keys.size() * 8);
    if (!SendMsg(fd, msg) || !RecvMsg(fd, &reply)) return 1;
    times.pull += Seconds(t);
    t = Clock::now();
    msg.assign(1, 'G');
    msg.append(reinterpret_cast<const char*>(keys.data()), keys.size() * 8);
    msg.append(grads.data(), keys.size() * dim * bpv);
    if (!SendMsg(fd, msg) || !RecvMsg(fd, &reply)) return 1;
    times.push += Seconds(t);
    rows += keys.size();
  }
  std::printf("ROWS %llu SECONDS %.6f\n", static_cast<unsigned long long>(rows), Seconds(start));
  times.Print(absl::GetFlag(FLAGS_steps));
  close(fd);
  return 0;
}

}  // namespace shardps::bench

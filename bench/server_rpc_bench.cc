// Workload W: one ps_server, 1 or 2 client processes; each step a
// client draws 4096 Zipf(1.0) ids over 1e6, dedups them (~2450), pulls those
// rows (TRAIN) and pushes a gradient for each (SGD on the server). rows/s =
// unique rows x steps / wall, summed over clients; median of --reps runs.
// Dims 64 and 16, fp32 and bf16 on the wire. Clients: serial (one step at a
// time, a raw stub) and pipelined (the real PsClient as a prefetching worker
// uses it: step t's push and step t + 1's pull in flight at once;
// server_rpc_bench_pipelined.cc), 1 client each, and 2 serial clients.
// In the same run, a raw TCP request/response loop over one loopback
// connection moves the same message sizes (blocking sockets, TCP_NODELAY, the
// server copying through its own buffers); the ratio to it is printed, and
// the ratios W/raw loop per dim and bf16/fp32 on one line per client.
// Also in each rep, the gRPC ceiling: the pipelined client against a gRPC
// server that only copies the bytes, as the raw loop's server does
// (server_rpc_bench_null.cc); no table behind unary gRPC can beat it here.
// Figures only: nothing here passes or fails on time.
//
//   bazel run -c opt //bench:server_rpc_bench -- [--steps=3000] [--reps=3]
//       [--two_clients=false] [--ps_server_before=/path/to/old/ps_server]
//       [--client_before=/path/to/old/server_rpc_bench]
#include "bench/server_rpc_bench.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "bench/server_zipf.h"
#include "common/codec.h"
#include "common/init.h"
#include "grpcpp/grpcpp.h"
#include "proto/ps.grpc.pb.h"

extern char** environ;

ABSL_FLAG(std::string, role, "main", "main | client | pipelined_client | tcp_server | tcp_client");
ABSL_FLAG(std::string, address, "", "Server address (client roles).");
ABSL_FLAG(int, dim, 64, "Row width.");
ABSL_FLAG(std::string, encoding, "fp32", "fp32 | bf16 (wire values).");
ABSL_FLAG(int, steps, 3000, "Timed steps per client.");
ABSL_FLAG(int, warmup, 200, "Untimed steps first.");
ABSL_FLAG(int, reps, 3, "Runs per case (median reported).");
ABSL_FLAG(uint64_t, seed, 1, "Client's Zipf seed.");
ABSL_FLAG(std::string, ps_server, "server/ps_server", "ps_server binary.");
ABSL_FLAG(std::string, client_before, "",
          "With --ps_server_before: the server_rpc_bench binary whose client "
          "roles run against it (an older build, to measure a client change "
          "in the same reps); default this binary.");
ABSL_FLAG(bool, two_clients, true, "Also run 2 serial clients per case.");
ABSL_FLAG(std::string, ps_server_before, "",
          "Optional second ps_server binary, run in the same reps; its rates "
          "and after/before ratios are printed too.");

namespace shardps {
namespace {

using bench::Clock;
using bench::ConnectLoopback;
using bench::kDraws;
using bench::kIds;
using bench::RunGrpcClient;
using bench::RunTcpClient;
using bench::RunTcpServer;
using bench::Seconds;
using bench::StepTimes;
using bench::WriteAll;

// ---- the driver ------------------------------------------------------------

struct Child {
  pid_t pid = 0;
  FILE* out = nullptr;
};

Child Spawn(const std::vector<std::string>& args) {
  int fds[2];
  if (pipe(fds) != 0) return {};
  posix_spawn_file_actions_t actions;
  posix_spawn_file_actions_init(&actions);
  posix_spawn_file_actions_adddup2(&actions, fds[1], 1);
  posix_spawn_file_actions_addclose(&actions, fds[0]);
  std::vector<char*> argv;
  for (const std::string& a : args) argv.push_back(const_cast<char*>(a.c_str()));
  argv.push_back(nullptr);
  Child c;
  posix_spawn(&c.pid, argv[0], &actions, nullptr, argv.data(), environ);
  posix_spawn_file_actions_destroy(&actions);
  close(fds[1]);
  c.out = fdopen(fds[0], "r");
  return c;
}

// Reads `c`'s lines up to the first that starts with the last of
// `prefixes`, or to EOF; returns the rest of the first line seen with each
// prefix ("" for none). Earlier prefixes are for lines printed before the
// last one (a line printed after it would block until the child exits).
std::vector<std::string> ReadLines(const Child& c, const std::vector<std::string>& prefixes) {
  std::vector<std::string> found(prefixes.size());
  char line[512];
  while (found.back().empty() && std::fgets(line, sizeof line, c.out) != nullptr) {
    std::string s(line);
    s = s.substr(0, s.find_last_not_of("\r\n") + 1);
    for (size_t i = 0; i < prefixes.size(); ++i) {
      if (found[i].empty() && s.rfind(prefixes[i], 0) == 0) {
        found[i] = s.substr(prefixes[i].size());
      }
    }
  }
  return found;
}

std::string ReadLine(const Child& c, const std::string& prefix) {
  return ReadLines(c, {prefix})[0];
}

// GET http://<address>/metrics (HTTP/1.0: the server closes when done).
std::string ScrapeMetrics(const std::string& address) {
  const int fd = ConnectLoopback(address);
  if (fd < 0) return "";
  std::string text;
  const std::string request = "GET /metrics HTTP/1.0\r\n\r\n";
  if (WriteAll(fd, request.data(), request.size())) {
    char buf[16384];
    ssize_t r;
    while ((r = read(fd, buf, sizeof buf)) > 0) text.append(buf, r);
  }
  close(fd);
  return text;
}

// Mean seconds per call of the server's `rpc` (its request_seconds
// histogram's sum over count), or 0 if absent.
double ServerSecondsPerCall(const std::string& metrics, const std::string& rpc) {
  auto value = [&](const std::string& series) {
    const std::string key = series + "{rpc=\"" + rpc + "\"} ";
    const size_t at = metrics.find(key);
    return at == std::string::npos ? 0.0 : std::atof(metrics.c_str() + at + key.size());
  };
  const double count = value("shardps_server_request_seconds_count");
  return count > 0 ? value("shardps_server_request_seconds_sum") / count : 0.0;
}

int Finish(Child& c, bool terminate) {
  if (terminate) kill(c.pid, SIGTERM);
  int status = 0;
  waitpid(c.pid, &status, 0);
  std::fclose(c.out);
  return status;
}

std::string SelfPath() {
  char buf[4096];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof buf - 1);
  return std::string(buf, n > 0 ? n : 0);
}

// One run: rows/s summed over clients; where a step's time went, averaged
// over clients; for gRPC, the server's own time per pull and per push
// (its handlers, from its metrics; warmup calls included).
struct Run {
  double rate = 0;
  StepTimes client;        // ms per step.
  double server_pull = 0;  // ms per call.
  double server_push = 0;
};

// Runs `clients` client processes against `address`.
Run RunClients(const std::string& binary, const std::string& role, const std::string& address,
               int clients, int dim, const std::string& encoding) {
  std::vector<Child> children;
  for (int i = 0; i < clients; ++i) {
    children.push_back(
        Spawn({binary, "--role=" + role, "--address=" + address, absl::StrCat("--dim=", dim),
               "--encoding=" + encoding, absl::StrCat("--steps=", absl::GetFlag(FLAGS_steps)),
               absl::StrCat("--warmup=", absl::GetFlag(FLAGS_warmup)),
               absl::StrCat("--seed=", 100 + i)}));
  }
  Run run;
  for (Child& c : children) {
    unsigned long long rows = 0;
    double seconds = 0;
    StepTimes t;
    const std::vector<std::string> lines = ReadLines(c, {"ROWS ", "TIMES "});
    if (std::sscanf(lines[0].c_str(), "%llu SECONDS %lf", &rows, &seconds) == 2) {
      run.rate += rows / seconds;
    }
    if (std::sscanf(lines[1].c_str(), "%lf %lf %lf", &t.draw, &t.pull, &t.push) == 3) {
      run.client.draw += t.draw / clients;
      run.client.pull += t.pull / clients;
      run.client.push += t.push / clients;
    }
    Finish(c, false);
  }
  return run;
}

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// The median over `runs` of field(run), or 0 for no runs.
template <typename Field>
double MedianOf(const std::vector<Run>& runs, Field field) {
  std::vector<double> v;
  for (const Run& r : runs) v.push_back(field(r));
  return v.empty() ? 0.0 : Median(v);
}

// One run of `clients` clients against a fresh `ps_server`.
Run GrpcRun(const std::string& ps_server, const std::string& client, const std::string& role,
            int dim, const std::string& encoding, int clients) {
  const std::string tmp = std::getenv("TMPDIR") ? std::getenv("TMPDIR") : "/tmp";
  const std::string config = absl::StrCat(tmp, "/server_rpc_bench_", getpid(), ".pbtxt");
  std::ofstream(config) << "name: \"w\"\n"
                        << "tables { id: 1 name: \"emb\" kind: SPARSE dim: " << dim
                        << " init { kind: UNIFORM scale: 0.01 }"
                        << " optimizer { sgd { learning_rate: 0.01 } } }\n"
                        << "cluster { num_servers: 1 num_workers: " << clients
                        << " num_partitions: 4096 mode: ASP }\n"
                        << "data { synthetic_dir: \"unused\" }\n";
  Child server = Spawn({ps_server, "--config=" + config, "--metrics_listen=127.0.0.1:0"});
  // ps_server prints where its metrics listen before where it serves.
  const std::vector<std::string> lines =
      ReadLines(server, {"PS_METRICS_LISTENING ", "PS_SERVER_LISTENING "});
  if (lines[1].empty()) {
    std::fprintf(stderr, "%s did not start\n", ps_server.c_str());
    std::exit(1);
  }
  Run run = RunClients(client, role, lines[1], clients, dim, encoding);
  const std::string metrics = ScrapeMetrics(lines[0]);
  run.server_pull = ServerSecondsPerCall(metrics, "pull") * 1e3;
  run.server_push = ServerSecondsPerCall(metrics, "push") * 1e3;
  Finish(server, true);
  std::remove(config.c_str());
  return run;
}

// The pipelined client against the gRPC ceiling (--role=null_server).
Run NullRun(int dim, const std::string& encoding) {
  Child server = Spawn(
      {SelfPath(), "--role=null_server", absl::StrCat("--dim=", dim), "--encoding=" + encoding});
  const std::string address = ReadLine(server, "NULL_LISTENING ");
  if (address.empty()) {
    std::fprintf(stderr, "the null gRPC server did not start\n");
    std::exit(1);
  }
  const Run run = RunClients(SelfPath(), "pipelined_client", address, 1, dim, encoding);
  Finish(server, true);
  return run;
}

Run TcpRun(int dim, const std::string& encoding) {
  Child server = Spawn(
      {SelfPath(), "--role=tcp_server", absl::StrCat("--dim=", dim), "--encoding=" + encoding});
  const std::string address = ReadLine(server, "TCP_LISTENING ");
  const Run run = RunClients(SelfPath(), "tcp_client", address, 1, dim, encoding);
  Finish(server, false);
  return run;
}

// This machine's speed drifts by 2x over minutes (a shared VM), so every
// figure that is a ratio is taken within one rep: a rep runs, for each
// (dim, encoding), the raw TCP loop and then each gRPC mode, back to back;
// the printed ratio is the median over reps of the per-rep ratios.
int RunMain() {
  const int reps = absl::GetFlag(FLAGS_reps);
  const std::string after = absl::GetFlag(FLAGS_ps_server);
  const std::string before = absl::GetFlag(FLAGS_ps_server_before);
  const std::string client_before =
      absl::GetFlag(FLAGS_client_before).empty() ? SelfPath() : absl::GetFlag(FLAGS_client_before);
  std::printf(
      "workload W: Zipf(1.0) over %llu ids, %d draws/step, %d steps, "
      "median of %d reps%s\n",
      static_cast<unsigned long long>(kIds), kDraws, absl::GetFlag(FLAGS_steps), reps,
      before.empty() ? "" : "; before = --ps_server_before, same reps");
  std::printf(
      "clients: serial = one step at a time (draw, pull, push), raw stub; "
      "pipelined = the real PsClient, step t's push and step t+1's pull in "
      "flight at once while the next batch is drawn (a worker with prefetch); "
      "the raw TCP loop is serial\n");
  struct Case {
    int dim;
    const char* encoding;
  };
  const std::vector<Case> cases = {{64, "fp32"}, {16, "fp32"}, {64, "bf16"}, {16, "bf16"}};
  struct Mode {
    const char* role;
    int clients;
    const char* name;
  };
  std::vector<Mode> modes = {{"client", 1, "serial"}, {"pipelined_client", 1, "pipelined"}};
  if (absl::GetFlag(FLAGS_two_clients)) modes.push_back({"client", 2, "serial"});
  // [case][mode], per rep.
  const size_t n = cases.size() * modes.size();
  std::vector<std::vector<double>> rate(n), ratio(n), before_rate(n), speedup(n);
  std::vector<std::vector<Run>> runs(n);
  std::vector<std::vector<Run>> tcp_runs(cases.size());
  // The gRPC ceiling per case: its rate and its ratio to the raw loop.
  std::vector<std::vector<double>> null_rate(cases.size()), null_ratio(cases.size());
  for (int rep = 0; rep < reps; ++rep) {
    for (size_t c = 0; c < cases.size(); ++c) {
      tcp_runs[c].push_back(TcpRun(cases[c].dim, cases[c].encoding));
      const double t = tcp_runs[c].back().rate;
      null_rate[c].push_back(NullRun(cases[c].dim, cases[c].encoding).rate);
      null_ratio[c].push_back(null_rate[c].back() / t);
      for (size_t m = 0; m < modes.size(); ++m) {
        const size_t i = c * modes.size() + m;
        const Run run = GrpcRun(after, SelfPath(), modes[m].role, cases[c].dim, cases[c].encoding,
                                modes[m].clients);
        runs[i].push_back(run);
        rate[i].push_back(run.rate);
        ratio[i].push_back(run.rate / t);
        if (!before.empty()) {
          const double rb = GrpcRun(before, client_before, modes[m].role, cases[c].dim,
                                    cases[c].encoding, modes[m].clients)
                                .rate;
          before_rate[i].push_back(rb);
          speedup[i].push_back(run.rate / rb);
        }
      }
    }
    std::fprintf(stderr, "rep %d of %d done\n", rep + 1, reps);
  }
  for (size_t c = 0; c < cases.size(); ++c) {
    for (size_t m = 0; m < modes.size(); ++m) {
      const size_t i = c * modes.size() + m;
      std::printf(
          "dim %2d %s %d client(s) %-9s: %6.3f M rows/s; raw TCP loop %6.3f M "
          "rows/s; ratio %.2f",
          cases[c].dim, cases[c].encoding, modes[m].clients, modes[m].name, Median(rate[i]) / 1e6,
          MedianOf(tcp_runs[c], [](const Run& r) { return r.rate; }) / 1e6, Median(ratio[i]));
      if (!before.empty()) {
        std::printf("; before %6.3f M rows/s, after/before %.2f", Median(before_rate[i]) / 1e6,
                    Median(speedup[i]));
      }
      std::printf("\n");
    }
  }
  // What no table behind unary gRPC can beat here: the pipelined client
  // against a server that only copies the bytes (server_rpc_bench_null.cc).
  for (size_t c = 0; c < cases.size(); ++c) {
    std::printf(
        "dim %2d %s gRPC ceiling (pipelined, a server that only copies the bytes): "
        "%6.3f M rows/s; ratio to the raw loop %.2f\n",
        cases[c].dim, cases[c].encoding, Median(null_rate[c]) / 1e6, Median(null_ratio[c]));
  }
  {
    std::vector<double> bf16_64, bf16_16;
    for (int rep = 0; rep < reps; ++rep) {
      bf16_64.push_back(null_rate[2][rep] / null_rate[0][rep]);
      bf16_16.push_back(null_rate[3][rep] / null_rate[1][rep]);
    }
    std::vector<double> raw_64, raw_16;
    for (int rep = 0; rep < reps; ++rep) {
      raw_64.push_back(tcp_runs[2][rep].rate / tcp_runs[0][rep].rate);
      raw_16.push_back(tcp_runs[3][rep].rate / tcp_runs[1][rep].rate);
    }
    std::printf(
        "bf16/fp32 of the raw loop: dim 64 %.2f, dim 16 %.2f; of the gRPC ceiling: "
        "dim 64 %.2f, dim 16 %.2f\n",
        Median(raw_64), Median(raw_16), Median(bf16_64), Median(bf16_16));
  }
  // The issue-17 figures: 1 client, gRPC against the raw loop of the same
  // rep, and bf16 against fp32 (both gRPC, same rep, same dim and mode).
  auto index = [&](int dim, const char* encoding, size_t m) {
    for (size_t c = 0; c < cases.size(); ++c) {
      if (cases[c].dim == dim && std::string(cases[c].encoding) == encoding) {
        return c * modes.size() + m;
      }
    }
    return size_t{0};
  };
  for (size_t m = 0; m < 2; ++m) {
    std::vector<double> bf16_64, bf16_16;
    for (int rep = 0; rep < reps; ++rep) {
      bf16_64.push_back(rate[index(64, "bf16", m)][rep] / rate[index(64, "fp32", m)][rep]);
      bf16_16.push_back(rate[index(16, "bf16", m)][rep] / rate[index(16, "fp32", m)][rep]);
    }
    std::printf(
        "W ratios, 1 client %-9s: W/raw loop dim 64 fp32 %.2f (target >= 0.97), "
        "dim 16 fp32 %.2f (target >= 0.86); bf16/fp32 dim 64 %.2f, dim 16 %.2f "
        "(target >= 1.5)\n",
        modes[m].name, Median(ratio[index(64, "fp32", m)]), Median(ratio[index(16, "fp32", m)]),
        Median(bf16_64), Median(bf16_16));
  }
  // A serial step: draw, pull round trip, push round trip. A round trip
  // minus the server's handler time is transport (gRPC, HTTP/2, kernel,
  // wake-ups, both sides' copies); the raw loop's round trip is nearly all
  // transport (its server only copies). A pipelined step's pull and push are
  // the client's waits for them.
  std::printf(
      "where a 1-client step goes, ms (medians over reps; server = "
      "ps_server's handler time per call, warmup calls included):\n");
  for (size_t c = 0; c < cases.size(); ++c) {
    const auto& t = tcp_runs[c];
    std::printf("  dim %2d %s: raw loop: draw %.3f, pull %.3f, push %.3f\n", cases[c].dim,
                cases[c].encoding, MedianOf(t, [](const Run& r) { return r.client.draw; }),
                MedianOf(t, [](const Run& r) { return r.client.pull; }),
                MedianOf(t, [](const Run& r) { return r.client.push; }));
    for (size_t m = 0; m < 2; ++m) {
      const auto& g = runs[c * modes.size() + m];
      std::printf(
          "    gRPC %-9s: draw %.3f, pull %.3f (server %.3f), push %.3f "
          "(server %.3f)\n",
          modes[m].name, MedianOf(g, [](const Run& r) { return r.client.draw; }),
          MedianOf(g, [](const Run& r) { return r.client.pull; }),
          MedianOf(g, [](const Run& r) { return r.server_pull; }),
          MedianOf(g, [](const Run& r) { return r.client.push; }),
          MedianOf(g, [](const Run& r) { return r.server_push; }));
    }
  }
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  // As the binaries do (flags, glog, absl::Mutex deadlock detector off).
  shardps::InitProcess(argc, argv, "server_rpc_bench [--steps=N] [--reps=N]");
  signal(SIGPIPE, SIG_IGN);
  const std::string role = absl::GetFlag(FLAGS_role);
  if (role == "client") return shardps::bench::RunGrpcClient();
  if (role == "pipelined_client") return shardps::bench::RunPipelinedClient();
  if (role == "tcp_server") return shardps::bench::RunTcpServer();
  if (role == "tcp_client") return shardps::bench::RunTcpClient();
  if (role == "null_server") return shardps::bench::RunNullServer();
  return shardps::RunMain();
}

// replica_bench_client: the parts of bench/replica_bench.py that need C++.
//
//   replica_bench_client --predict=HOST:PORT --lines=FILE [--batch=64]
//                        [--seconds=10] [--threads=1]
//     Predict load on a ps_replica: each thread sends Predict calls of
//     --batch lines (taken in turn from --lines) back to back for --seconds.
//     Prints
//       PS_REPLICA_PREDICT calls=<n> qps=<calls/s> lines_per_sec=<..>
//         p50_ms=<..> p99_ms=<..> versions=<min>-<max>
//
//   replica_bench_client --rows=CKPT_ROOT
//     For every complete checkpoint under the root: the rows and deletions
//     its own files hold (what the cut touched: a delta's changed rows, a
//     full one's every row) and their bytes. One line per checkpoint:
//       PS_CHECKPOINT_ROWS clock=<c> kind=<full|delta> rows=<r> deleted=<d> bytes=<b>
//
//   replica_bench_client --probe_servers=HOST:PORT,... --probe_replica=HOST:PORT
//                        [--probe_table=2] [--probe_keys=2] [--probe_ms=5]
//                        [--probe_seconds=900] [--job_secret_file=FILE]
//     Train-to-serve from a push's apply, observed from outside (issue 34's
//     definition). One thread reads --probe_keys rows of --probe_table (the
//     job's DENSE table: every push changes every row; its first keys, 0,
//     1, ..., spread as evenly over the servers as their owners allow) from
//     the servers every --probe_ms with the Pull a worker sends to evaluate
//     (purpose EVAL: never inserts; the map version and generation from
//     TableInfo, the owner found by asking each server; the servers take
//     calls from the job's members only, so it sends the job's secret
//     (--job_secret_file) on a member's channel, common/job_secret.h), and
//     notes when each row's value first appears: its *apply*, seen at most one interval late.
//     Another reads the same rows from the replica's Lookup as often and notes when a value appears
//     there: served. Per row, the values form a sequence in the order the servers applied them;
//     when the replica shows value k, every value up to k not yet shown became visible then. Prints
//     at the end (when the replica has stopped answering for 2 s, after it answered, or after
//     --probe_seconds)
//       PS_PROBE_SERVED ms=<a,b,..>    per row and version served: from the
//                                      apply of the very value served (the
//                                      last push before the cut) to served
//       PS_PROBE_CHANGES ms=<a,b,..>   per row and value the servers took:
//                                      from its apply to the first version
//                                      that holds it or a later value (the
//                                      wait for the next cut included)
//       PS_PROBE_RESULT served=<n> unmatched=<u> changes=<c> server_polls=<p>
//         replica_polls=<q> cpu_s=<probe's CPU seconds>
//     `unmatched`: a version whose value the server poll never saw (it
//     lasted less than one interval there); not counted.
#include <grpcpp/grpcpp.h>
#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/mutex.h"
#include "glog/logging.h"
#include "proto/ps.grpc.pb.h"
#include "proto/replica.grpc.pb.h"

ABSL_FLAG(std::string, predict, "", "host:port of a ps_replica to load with Predict calls.");
ABSL_FLAG(std::string, lines, "", "Criteo-format lines to send (one per line).");
ABSL_FLAG(int, batch, 64, "Lines per Predict call.");
ABSL_FLAG(double, seconds, 10, "How long to send calls.");
ABSL_FLAG(int, threads, 1, "Concurrent callers.");
ABSL_FLAG(std::string, rows, "", "A checkpoint root: count each checkpoint's own rows.");
ABSL_FLAG(std::string, probe_servers, "", "The job's servers (host:port,...): probe mode.");
ABSL_FLAG(std::string, probe_replica, "", "The replica (host:port) the probe reads.");
ABSL_FLAG(uint32_t, probe_table, 2, "The table whose rows the probe follows (the DENSE one).");
ABSL_FLAG(int, probe_keys, 2,
          "Rows followed: the first keys of --probe_table (0, 1, ...) spread over the servers.");
ABSL_FLAG(int, probe_ms, 5, "Interval of each side's reads (ms).");
ABSL_FLAG(double, probe_seconds, 900, "Longest the probe runs.");

namespace shardps {
namespace {

int Predict() {
  auto text = checkpoint::ReadFileToString(absl::GetFlag(FLAGS_lines));
  if (!text.ok()) {
    LOG(ERROR) << text.status();
    return 2;
  }
  std::vector<std::string> lines = absl::StrSplit(*text, '\n', absl::SkipEmpty());
  const int batch = absl::GetFlag(FLAGS_batch);
  if (lines.empty() || batch <= 0) {
    LOG(ERROR) << "no lines, or --batch <= 0";
    return 2;
  }
  auto channel =
      grpc::CreateChannel(absl::GetFlag(FLAGS_predict), grpc::InsecureChannelCredentials());
  const absl::Time end = absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_seconds));
  Mutex mu;
  std::vector<double> latencies_ms;
  uint64_t min_version = UINT64_MAX, max_version = 0, errors = 0;
  std::vector<std::thread> threads;
  const absl::Time start = absl::Now();
  for (int t = 0; t < absl::GetFlag(FLAGS_threads); ++t) {
    threads.emplace_back([&, t] {
      auto stub = Replica::NewStub(channel);
      size_t next = static_cast<size_t>(t) * batch;
      std::vector<double> mine;
      uint64_t lo = UINT64_MAX, hi = 0, bad = 0;
      while (absl::Now() < end) {
        PredictRequest request;
        for (int i = 0; i < batch; ++i) request.add_lines(lines[next++ % lines.size()]);
        PredictResponse response;
        grpc::ClientContext ctx;
        ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(30));
        const absl::Time call = absl::Now();
        grpc::Status st = stub->Predict(&ctx, request, &response);
        if (!st.ok()) {
          ++bad;
          continue;
        }
        mine.push_back(absl::ToDoubleMilliseconds(absl::Now() - call));
        lo = std::min<uint64_t>(lo, response.version());
        hi = std::max<uint64_t>(hi, response.version());
      }
      MutexLock lock(&mu);
      latencies_ms.insert(latencies_ms.end(), mine.begin(), mine.end());
      min_version = std::min(min_version, lo);
      max_version = std::max(max_version, hi);
      errors += bad;
    });
  }
  for (std::thread& t : threads) t.join();
  const double secs = absl::ToDoubleSeconds(absl::Now() - start);
  if (latencies_ms.empty()) {
    LOG(ERROR) << "no Predict call succeeded (" << errors << " failed)";
    return 1;
  }
  std::sort(latencies_ms.begin(), latencies_ms.end());
  auto q = [&](double p) {
    return latencies_ms[std::min(
        latencies_ms.size() - 1,
        static_cast<size_t>(p * static_cast<double>(latencies_ms.size())))];
  };
  std::printf("PS_REPLICA_PREDICT calls=%zu errors=%" PRIu64
              " qps=%.1f lines_per_sec=%.0f p50_ms=%.3f p99_ms=%.3f versions=%" PRIu64 "-%" PRIu64
              "\n",
              latencies_ms.size(), errors, static_cast<double>(latencies_ms.size()) / secs,
              static_cast<double>(latencies_ms.size()) * batch / secs, q(0.50), q(0.99),
              min_version, max_version);
  return 0;
}

int Rows() {
  const std::string root = absl::GetFlag(FLAGS_rows);
  auto entries = checkpoint::ListCheckpoints(root);
  if (!entries.ok()) {
    LOG(ERROR) << entries.status();
    return 2;
  }
  for (const checkpoint::CheckpointEntry& e : *entries) {
    checkpoint::LoadManifestOptions sizes;
    sizes.verify_file_crcs = false;
    auto manifest = checkpoint::LoadManifest(e.dir, sizes);
    if (!manifest.ok()) continue;  // Incomplete.
    uint64_t rows = 0, deleted = 0, bytes = 0;
    for (const checkpoint::CheckpointFile& f : manifest->files()) {
      bytes += f.size();
      auto reader = checkpoint::CheckpointFileReader::Open(absl::StrCat(e.dir, "/", f.name()));
      if (!reader.ok()) {
        LOG(ERROR) << reader.status();
        return 1;
      }
      for (const checkpoint::RecordBlock& b : (*reader)->blocks()) {
        if (b.rows()) rows += b.size();
        if (b.deleted()) deleted += b.size();
      }
    }
    std::printf("PS_CHECKPOINT_ROWS clock=%" PRIu64 " kind=%s rows=%" PRIu64 " deleted=%" PRIu64
                " bytes=%" PRIu64 "\n",
                e.clock,
                manifest->kind() == checkpoint::CheckpointManifest::DELTA ? "delta" : "full", rows,
                deleted, bytes);
  }
  return 0;
}

// Train-to-serve from the apply: see the top.
class Probe {
 public:
  Probe(std::vector<std::string> servers, const std::string& replica)
      : replica_(
            Replica::NewStub(grpc::CreateChannel(replica, grpc::InsecureChannelCredentials()))) {
    for (const std::string& s : servers) {
      Server server;
      server.stub =
          ParameterServer::NewStub(CreateJobChannel(s, grpc::InsecureChannelCredentials(), {}));
      servers_.push_back(std::move(server));
    }
  }

  // Chooses the rows: keys 0, 1, ... of the table, as evenly over the
  // servers as their owners allow, --probe_keys of them.
  void ChooseKeys() {
    const size_t n = absl::GetFlag(FLAGS_probe_keys);
    const size_t per = (n + servers_.size() - 1) / servers_.size();
    std::vector<size_t> held(servers_.size(), 0);
    std::string value;
    for (uint64_t k = 0; k < 64 && keys_.size() < n; ++k) {
      int owner = -1;
      for (int attempt = 0; attempt < 3 && owner < 0; ++attempt) {  // Re-learning the map.
        for (int i = 0; i < static_cast<int>(servers_.size()) && owner < 0; ++i) {
          if (Read(i, k, &value)) owner = i;
        }
      }
      if (owner < 0) break;  // Past the table's last row (or the job is gone).
      if (held[owner] >= per) continue;
      ++held[owner];
      keys_.push_back(k);
      owner_.push_back(owner);
    }
    rows_.resize(keys_.size());
  }

  int Run() {
    ChooseKeys();
    std::string chosen;
    for (size_t i = 0; i < keys_.size(); ++i) {
      absl::StrAppend(&chosen, " ", keys_[i], " (server ", owner_[i], ")");
    }
    LOG(INFO) << "probe: following rows" << chosen << " of table "
              << absl::GetFlag(FLAGS_probe_table);
    const absl::Time start = absl::Now();
    const absl::Time end = start + absl::Seconds(absl::GetFlag(FLAGS_probe_seconds));
    std::atomic<bool> stop{false};
    std::thread servers([&] {
      while (!stop.load() && absl::Now() < end) {
        PollServers();
        absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_probe_ms)));
      }
    });
    absl::Time answered = absl::InfinitePast();
    while (absl::Now() < end) {
      if (PollReplica()) {
        answered = absl::Now();
      } else if (answered != absl::InfinitePast() && absl::Now() - answered > absl::Seconds(2)) {
        break;  // The replica is gone: the job and its replica ended.
      }
      absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_probe_ms)));
    }
    stop.store(true);
    servers.join();
    auto join = [](const std::vector<double>& v) {
      std::string out;
      for (double x : v) absl::StrAppend(&out, out.empty() ? "" : ",", absl::SixDigits(x));
      return out;
    };
    MutexLock lock(&mu_);
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    const double cpu = static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
                       static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
    std::printf("PS_PROBE_SERVED ms=%s\n", join(served_ms_).c_str());
    std::printf("PS_PROBE_CHANGES ms=%s\n", join(change_ms_).c_str());
    std::printf("PS_PROBE_RESULT served=%zu unmatched=%" PRIu64 " changes=%zu server_polls=%" PRIu64
                " replica_polls=%" PRIu64 " cpu_s=%.2f\n",
                served_ms_.size(), unmatched_, change_ms_.size(), server_polls_, replica_polls_,
                cpu);
    std::fflush(stdout);
    return served_ms_.empty() ? 1 : 0;
  }

 private:
  struct Server {
    std::unique_ptr<ParameterServer::Stub> stub;
    bool known = false;  // map_version and generation read.
    uint64_t map_version = 0, generation = 0;
  };
  // One followed row: the values the servers took, in order.
  struct Row {
    std::unordered_map<size_t, size_t> index;  // Hash of the value -> its position.
    std::vector<absl::Time> applied;           // When each was first seen.
    size_t visible = 0;                        // Values shown by the replica: [0, visible).
    size_t served_hash = 0;
    bool serving = false;
  };

  static size_t Hash(const char* bytes, size_t n) {
    return std::hash<std::string_view>()(std::string_view(bytes, n));
  }

  bool Learn(Server* s) {
    TableInfoResponse info;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status st = s->stub->TableInfo(&ctx, TableInfoRequest(), &info);
    if (!st.ok()) {
      if (++refused_ <= 5) {
        LOG(WARNING) << "TableInfo refused (job secret "
                     << (JobSecretEnabled() ? "sent" : "not given") << "): " << st.error_message();
      }
      return false;
    }
    s->map_version = info.map_version();
    s->generation = info.generation();
    s->known = true;
    return true;
  }

  // Reads key `k` from server `i`; false (and forgets what it knew) if refused.
  bool Read(int i, uint64_t k, std::string* value) {
    Server& s = servers_[i];
    if (!s.known && !Learn(&s)) return false;
    PullRequest request;
    request.set_purpose(EVAL);
    request.set_encoding(FP32);
    request.set_map_version(s.map_version);
    request.set_generation(s.generation);
    TableKeys* tk = request.add_tables();
    tk->set_table_id(absl::GetFlag(FLAGS_probe_table));
    tk->add_keys(k);
    PullResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    grpc::Status st = s.stub->Pull(&ctx, request, &response);
    if (!st.ok() || response.tables_size() != 1) {
      if (++refused_ <= 5)
        LOG(WARNING) << "server " << i << " refused key " << k << ": " << st.error_message();
      s.known = false;  // A new map or generation, or not the owner.
      return false;
    }
    *value = response.tables(0).values();
    return true;
  }

  void PollServers() {
    for (size_t k = 0; k < rows_.size(); ++k) {
      std::string value;
      bool ok = false;
      if (owner_[k] >= 0) ok = Read(owner_[k], keys_[k], &value);
      for (int i = 0; !ok && i < static_cast<int>(servers_.size()); ++i) {
        if ((ok = Read(i, keys_[k], &value))) owner_[k] = i;
      }
      if (!ok) continue;
      const absl::Time now = absl::Now();
      const size_t h = Hash(value.data(), value.size());
      MutexLock lock(&mu_);
      ++server_polls_;
      Row& row = rows_[k];
      if (row.index.emplace(h, row.applied.size()).second) row.applied.push_back(now);
    }
  }

  bool PollReplica() {
    LookupRequest request;
    request.set_table_id(absl::GetFlag(FLAGS_probe_table));
    for (uint64_t k : keys_) request.add_keys(k);
    LookupResponse response;
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + std::chrono::seconds(5));
    if (!replica_->Lookup(&ctx, request, &response).ok()) return false;
    const absl::Time now = absl::Now();
    const size_t dim = response.dim();
    MutexLock lock(&mu_);
    ++replica_polls_;
    for (size_t k = 0; k < rows_.size() && k < static_cast<size_t>(response.found_size()); ++k) {
      if (!response.found(k)) continue;
      const size_t h = Hash(reinterpret_cast<const char*>(response.values().data() + k * dim),
                            dim * sizeof(float));
      Row& row = rows_[k];
      if (row.serving && row.served_hash == h) continue;
      const bool first = !row.serving;
      row.serving = true;
      row.served_hash = h;
      auto it = row.index.find(h);
      if (it == row.index.end()) {
        if (!first) ++unmatched_;
        continue;
      }
      const size_t pos = it->second;
      if (first) {  // The bootstrap version: what came before it is not measured.
        row.visible = pos + 1;
        continue;
      }
      served_ms_.push_back(absl::ToDoubleMilliseconds(now - row.applied[pos]));
      for (; row.visible <= pos; ++row.visible) {
        change_ms_.push_back(absl::ToDoubleMilliseconds(now - row.applied[row.visible]));
      }
    }
    return true;
  }

  std::vector<Server> servers_;  // Used by the server thread only.
  std::vector<uint64_t> keys_;   // The rows followed (set before the threads start).
  std::vector<int> owner_;       // Server thread: keys_[i]'s server, -1 unknown.
  std::unique_ptr<Replica::Stub> replica_;
  Mutex mu_;
  std::vector<Row> rows_;  // Guarded by mu_.
  std::vector<double> served_ms_, change_ms_;
  uint64_t unmatched_ = 0, server_polls_ = 0, replica_polls_ = 0;
  uint64_t refused_ = 0;  // Server thread only.
};

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "replica_bench_client --predict=HOST:PORT --lines=FILE | --rows=CKPT_ROOT | "
                       "--probe_servers=HOST:PORT,... --probe_replica=HOST:PORT");
  if (!absl::GetFlag(FLAGS_rows).empty()) return shardps::Rows();
  if (!absl::GetFlag(FLAGS_predict).empty()) return shardps::Predict();
  if (!absl::GetFlag(FLAGS_probe_servers).empty()) {
    if (absl::Status st = shardps::InitJobSecretFromFlags(); !st.ok()) {
      LOG(ERROR) << st;
      return 2;
    }
    shardps::Probe probe(absl::StrSplit(absl::GetFlag(FLAGS_probe_servers), ',', absl::SkipEmpty()),
                         absl::GetFlag(FLAGS_probe_replica));
    return probe.Run();
  }
  LOG(ERROR) << "give --predict, --rows or --probe_servers";
  return 2;
}

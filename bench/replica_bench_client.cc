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
#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cinttypes>
#include <cstdio>
#include <string>
#include <thread>
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
#include "common/mutex.h"
#include "glog/logging.h"
#include "proto/replica.grpc.pb.h"

ABSL_FLAG(std::string, predict, "", "host:port of a ps_replica to load with Predict calls.");
ABSL_FLAG(std::string, lines, "", "Criteo-format lines to send (one per line).");
ABSL_FLAG(int, batch, 64, "Lines per Predict call.");
ABSL_FLAG(double, seconds, 10, "How long to send calls.");
ABSL_FLAG(int, threads, 1, "Concurrent callers.");
ABSL_FLAG(std::string, rows, "", "A checkpoint root: count each checkpoint's own rows.");

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
        (b.deleted() ? deleted : rows) += b.size();
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

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "replica_bench_client --predict=HOST:PORT --lines=FILE | --rows=CKPT_ROOT");
  if (!absl::GetFlag(FLAGS_rows).empty()) return shardps::Rows();
  if (!absl::GetFlag(FLAGS_predict).empty()) return shardps::Predict();
  LOG(ERROR) << "give --predict or --rows";
  return 2;
}

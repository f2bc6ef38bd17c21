// Scale benchmark: what one parameter server costs as its
// table grows. One ParameterServerCore in this process (no gRPC: the server's
// own work; bench/server_rpc_bench measures the transport) holds one sparse
// table of N rows (Adagrad, dim D), for each N in --rows and D in --dims:
//
//  - bytes/row: the process's resident memory grown by creating the N rows
//    (training pulls of every key), divided by N (a lower bound for a case
//    after the first of a process, which may reuse memory freed before),
//    and the table's own estimate (TableCounters::bytes_per_row);
//  - W-style pull and push rows/s: each step pulls (TRAIN) then pushes one
//    gradient for the ~unique ids of 4096 Zipf(1.0) draws over all N rows
//    (bench/server_zipf.h, hot ranks scattered over the key space); rows/s =
//    unique rows / time in the core's Pull (resp. Push) calls, batches drawn
//    and requests built outside the timing;
//  - checkpoint: COPY (rows copied under the stripe locks: what holds the
//    workers) and the background write (COLLECT: files durable), in GB/s of
//    checkpoint bytes, beside the disk's own sequential write and read of as
//    many bytes (4 MiB blocks, fsync; read after POSIX_FADV_DONTNEED)
//    measured in the same case;
//  - restore: the checkpoint's files dropped from the page cache, the first
//    core destroyed, a fresh core's Restore timed: the restore part of a
//    server's recovery (process start, registration and the workers'
//    rewind come on top). 4096 rows pulled before and after must agree bit
//    for bit, else the bench fails.
//
// A case whose estimated peak memory (table + checkpoint copy) exceeds
// --max_gib is skipped and says so. Figures only: nothing passes or fails on
// time.
//
//   bazel build -c opt //bench:scale_bench
//   bazel-bin/bench/scale_bench [--rows=1000000,10000000,50000000]
//       [--dims=16,64] [--dir=/tmp/scale_bench] [--steps=1000]
//       [--pending_keys=N]  (N admission counts in the copy and restore too)
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_split.h"
#include "bench/recovery_bench_util.h"
#include "bench/server_zipf.h"
#include "common/checkpoint/manifest.h"
#include "common/codec.h"
#include "common/config.h"
#include "server/parameter_server_core.h"

ABSL_FLAG(std::string, rows, "1000000,10000000,50000000", "Table sizes (rows).");
ABSL_FLAG(std::string, dims, "16,64", "Row widths.");
ABSL_FLAG(std::string, dir, "/tmp/scale_bench", "Checkpoint and disk-test directory.");
ABSL_FLAG(int, steps, 1000, "Timed W steps per case.");
ABSL_FLAG(int, warmup, 100, "Untimed W steps first.");
ABSL_FLAG(double, max_gib, 18, "Skip cases whose estimated peak memory exceeds this.");
ABSL_FLAG(uint64_t, pending_keys, 0,
          "With N > 0 the table admits keys at their second push (admission.min_count 2, "
          "unadmitted INITIAL; the fill pushes each key twice) and N more keys are pushed once "
          "before the checkpoint: its copy and restore carry N pending admission counts.");

namespace shardps {
namespace {

namespace ckpt = checkpoint;
using rbench::Secs;

constexpr uint32_t kTable = 1;
constexpr uint32_t kParts = 64;
constexpr int kDraws = 4096;
constexpr double kGB = 1e9;

JobConfig Config(uint32_t dim) {
  JobConfig c;
  c.set_name("scale-bench");
  c.mutable_data()->set_synthetic_dir("/unused");  // Finalize wants data; a server reads none.
  TableConfig* t = c.add_tables();
  t->set_id(kTable);
  t->set_name("emb");
  t->set_kind(TableConfig::SPARSE);
  t->set_dim(dim);
  t->set_seed(5);
  t->mutable_init()->set_kind(InitializerConfig::UNIFORM);
  t->mutable_init()->set_scale(0.01f);
  AdagradConfig* a = t->mutable_optimizer()->mutable_adagrad();
  a->set_learning_rate(0.01f);
  a->set_eps(1e-10f);
  if (absl::GetFlag(FLAGS_pending_keys) > 0) {
    t->mutable_admission()->set_min_count(2);
    t->mutable_admission()->set_unadmitted(AdmissionConfig::INITIAL);
  }
  ClusterConfig* k = c.mutable_cluster();
  k->set_num_servers(1);
  k->set_num_workers(1);
  k->set_num_partitions(kParts);
  k->set_mode(ASP);
  k->set_max_message_bytes(256 << 20);
  k->set_server_deadline_ms(60000);
  k->set_dense_chunk_size(8);
  return c;
}

void Progress(const std::string& what) {
  std::fprintf(stderr, "[scale_bench %s] %s\n",
               absl::FormatTime("%H:%M:%E3S", absl::Now(), absl::LocalTimeZone()).c_str(),
               what.c_str());
}

uint64_t ResidentBytes() {
  long pages = 0, resident = 0;
  FILE* f = std::fopen("/proc/self/statm", "r");
  if (f == nullptr) return 0;
  if (std::fscanf(f, "%ld %ld", &pages, &resident) != 2) resident = 0;
  std::fclose(f);
  return static_cast<uint64_t>(resident) * sysconf(_SC_PAGESIZE);
}

// The values of a pull go into one reused buffer, as the gRPC service
// writes them into its response.
class BufferSink final : public PullSink {
 public:
  char* AddTable(uint32_t, uint32_t, size_t bytes) override {
    if (buf_.size() < bytes) buf_.resize(bytes);
    return buf_.data();
  }
  const char* data() const { return buf_.data(); }

 private:
  std::vector<char> buf_;
};

struct Case {
  uint64_t rows = 0;
  uint32_t dim = 0;
  bool skipped = false;
  double bytes_per_row = 0, table_bytes_per_row = 0, fill_rows_per_s = 0;
  double pull_rows_per_s = 0, push_rows_per_s = 0, w_rows_per_s = 0, unique_per_step = 0;
  double ckpt_gb = 0, copy_s = 0, write_s = 0, restore_s = 0, resident_before_restore = 0;
  double disk_write_gbps = 0, disk_read_gbps = 0;
};

#define BENCH_CHECK_OK(expr)                                                       \
  do {                                                                             \
    const absl::Status _st = (expr);                                               \
    if (!_st.ok()) {                                                               \
      std::fprintf(stderr, "%s: %s\n", #expr, std::string(_st.message()).c_str()); \
      std::exit(1);                                                                \
    }                                                                              \
  } while (0)

std::unique_ptr<ParameterServerCore> NewCore(uint32_t dim, const std::string& root) {
  CoreOptions options;
  options.config = Config(dim);
  BENCH_CHECK_OK(FinalizeJobConfig(&options.config));
  auto core = ParameterServerCore::Create(options);
  BENCH_CHECK_OK(core.status());
  (*core)->SetCheckpointRoot(root);
  return std::move(*core);
}

// EVAL pull of `keys` (changes nothing): their values, bit for bit.
std::vector<float> Sample(ParameterServerCore* core, const std::vector<uint64_t>& keys,
                          uint32_t dim) {
  PullRequest request;
  request.set_map_version(1);
  request.set_purpose(EVAL);
  TableKeys* tk = request.add_tables();
  tk->set_table_id(kTable);
  tk->mutable_keys()->Add(keys.begin(), keys.end());
  BufferSink sink;
  BENCH_CHECK_OK(core->Pull(request, absl::Now() + absl::Seconds(60), &sink));
  std::vector<float> out(keys.size() * dim);
  std::memcpy(out.data(), sink.data(), out.size() * sizeof(float));
  return out;
}

constexpr uint64_t kChunk = 1 << 16;

// Pushes a zero gradient for keys ZipfBatches::KeyOf(first..first+count-1)
// `times` times (with admission: counts them; a zero Adagrad step changes
// no value).
void PushZeros(ParameterServerCore* core, uint32_t dim, uint64_t first, uint64_t count, int times) {
  std::vector<uint64_t> keys(kChunk);
  const std::vector<float> zeros(kChunk * dim, 0.0f);
  Table* table = core->store()->FindTable(kTable);
  for (uint64_t r = 0; r < count; r += kChunk) {
    const uint64_t n = std::min(kChunk, count - r);
    for (uint64_t i = 0; i < n; ++i) keys[i] = bench::ZipfBatches::KeyOf(first + r + i);
    for (int k = 0; k < times; ++k) table->Push(keys.data(), n, zeros.data(), 1.0f);
  }
}

// Creates rows 0..rows-1 (keys ZipfBatches::KeyOf) with training pulls
// (with --pending_keys: two pushes each).
void Fill(ParameterServerCore* core, Case* c) {
  std::vector<uint64_t> keys(kChunk);
  std::vector<float> out(kChunk * c->dim);
  const uint64_t rss0 = ResidentBytes();
  const absl::Time t0 = absl::Now();
  if (absl::GetFlag(FLAGS_pending_keys) > 0) {
    PushZeros(core, c->dim, 0, c->rows, 2);
  } else {
    for (uint64_t r = 0; r < c->rows; r += kChunk) {
      const uint64_t n = std::min(kChunk, c->rows - r);
      for (uint64_t i = 0; i < n; ++i) keys[i] = bench::ZipfBatches::KeyOf(r + i);
      BENCH_CHECK_OK(core->store()->Pull(kTable, keys.data(), n, /*train=*/true, out.data()));
    }
  }
  c->fill_rows_per_s = c->rows / Secs(absl::Now() - t0);
  c->bytes_per_row = static_cast<double>(ResidentBytes() - rss0) / c->rows;
  c->table_bytes_per_row = core->store()->FindTable(kTable)->Counters().bytes_per_row;
}

// W-style steps over the whole key space.
void RunW(ParameterServerCore* core, Case* c) {
  const int warmup = absl::GetFlag(FLAGS_warmup), steps = absl::GetFlag(FLAGS_steps);
  bench::ZipfBatches zipf(c->rows, 1.0, 42);
  std::vector<uint64_t> ranks, keys;
  std::string grads;
  std::vector<float> g(kDraws * c->dim, 0.001f);
  EncodeValues(g.data(), g.size(), Encoding::kFp32, &grads);
  PullRequest pull;
  pull.set_map_version(1);
  PushRequest push;
  push.set_map_version(1);
  BufferSink sink;
  PushResponse pushed;
  double pull_s = 0, push_s = 0;
  uint64_t rows = 0;
  for (int step = 0; step < warmup + steps; ++step) {
    zipf.Next(kDraws, &ranks, &keys);
    pull.clear_tables();
    TableKeys* tk = pull.add_tables();
    tk->set_table_id(kTable);
    tk->mutable_keys()->Add(keys.begin(), keys.end());
    push.clear_tables();
    TableGradients* tg = push.add_tables();
    tg->set_table_id(kTable);
    tg->mutable_keys()->Add(keys.begin(), keys.end());
    tg->set_gradients(grads.data(), keys.size() * c->dim * sizeof(float));
    absl::Time t = absl::Now();
    BENCH_CHECK_OK(core->Pull(pull, absl::Now() + absl::Seconds(60), &sink));
    const double p = Secs(absl::Now() - t);
    t = absl::Now();
    BENCH_CHECK_OK(core->Push(push, &pushed));
    const double q = Secs(absl::Now() - t);
    if (step < warmup) continue;
    pull_s += p;
    push_s += q;
    rows += keys.size();
  }
  c->unique_per_step = static_cast<double>(rows) / steps;
  c->pull_rows_per_s = rows / pull_s;
  c->push_rows_per_s = rows / push_s;
  c->w_rows_per_s = rows / (pull_s + push_s);
}

Case RunCase(uint64_t num_rows, uint32_t dim, const std::string& dir) {
  Case c;
  c.rows = num_rows;
  c.dim = dim;
  // Payload (weights + accumulator) plus ~40 B of index and slack, twice
  // over during the checkpoint copy and the restore.
  const double est = 2.2 * num_rows * (8.0 * dim + 40);
  if (est > absl::GetFlag(FLAGS_max_gib) * (1ULL << 30)) {
    c.skipped = true;
    std::printf("rows=%llu dim=%u: skipped (estimated peak %.1f GiB > --max_gib)\n",
                static_cast<unsigned long long>(num_rows), dim, est / (1ULL << 30));
    return c;
  }
  const std::string root = absl::StrCat(dir, "/rows", num_rows, "_dim", dim);
  std::filesystem::remove_all(root);
  std::filesystem::create_directories(root);
  auto core = NewCore(dim, root);
  Progress(absl::StrCat("rows=", num_rows, " dim=", dim, ": filling"));
  Fill(core.get(), &c);
  Progress("W steps");
  RunW(core.get(), &c);
  std::vector<uint64_t> sample_keys;
  for (uint64_t i = 0; i < 4096; ++i) {
    sample_keys.push_back(bench::ZipfBatches::KeyOf(Mix64(i) % num_rows));
  }
  std::sort(sample_keys.begin(), sample_keys.end());
  sample_keys.erase(std::unique(sample_keys.begin(), sample_keys.end()), sample_keys.end());
  const std::vector<float> before = Sample(core.get(), sample_keys, dim);

  const uint64_t pending = absl::GetFlag(FLAGS_pending_keys);
  if (pending > 0) {
    Progress("pending keys");
    PushZeros(core.get(), dim, num_rows, pending, 1);
    const uint64_t counted = core->store()->FindTable(kTable)->Counters().pending_rows;
    if (counted != pending) {
      std::fprintf(stderr, "%llu pending admission counts, want %llu\n",
                   static_cast<unsigned long long>(counted),
                   static_cast<unsigned long long>(pending));
      std::exit(1);
    }
  }

  Progress("checkpoint");
  constexpr uint64_t kClock = 1;
  CheckpointRequest request;
  request.set_clock(kClock);
  request.set_phase(CheckpointRequest::COPY);
  CheckpointResponse copied, written;
  absl::Time t = absl::Now();
  BENCH_CHECK_OK(core->Checkpoint(request, &copied));
  c.copy_s = Secs(absl::Now() - t);
  request.set_phase(CheckpointRequest::COLLECT);
  t = absl::Now();
  BENCH_CHECK_OK(core->Checkpoint(request, &written));
  c.write_s = Secs(absl::Now() - t);
  if (written.rows() != num_rows) {
    std::fprintf(stderr, "checkpoint has %llu rows, want %llu\n",
                 static_cast<unsigned long long>(written.rows()),
                 static_cast<unsigned long long>(num_rows));
    std::exit(1);
  }
  ckpt::CheckpointManifest manifest;
  manifest.set_format_version(ckpt::kManifestFormatVersion);
  manifest.set_checkpoint_id(ckpt::CheckpointId(kClock));
  manifest.set_clock(kClock);
  manifest.set_job_name(Config(dim).name());
  manifest.set_config_fingerprint(1);
  manifest.set_num_partitions(kParts);
  manifest.set_kind(ckpt::CheckpointManifest::FULL);
  manifest.add_chain(ckpt::CheckpointId(kClock));
  for (const ckpt::CheckpointFile& f : written.written()) *manifest.add_files() = f;
  BENCH_CHECK_OK(ckpt::WriteManifest(written.checkpoint_dir(), manifest));
  const uint64_t bytes = rbench::BytesUnder(written.checkpoint_dir());
  c.ckpt_gb = bytes / kGB;
  core.reset();  // The server is gone.

  Progress("disk");
  auto disk = rbench::MeasureDisk(dir + "/disk_test", bytes);
  BENCH_CHECK_OK(disk.status());
  c.disk_write_gbps = disk->write_mbps * rbench::kMB / kGB;
  c.disk_read_gbps = disk->read_mbps * rbench::kMB / kGB;

  Progress("restore");
  const std::vector<std::string> files = rbench::FilesUnder(written.checkpoint_dir());
  BENCH_CHECK_OK(rbench::Evict(files));
  c.resident_before_restore = rbench::Resident(files);
  auto fresh = NewCore(dim, root);
  RestoreRequest restore;
  restore.set_clock(kClock);
  RestoreResponse restored;
  t = absl::Now();
  BENCH_CHECK_OK(fresh->Restore(restore, &restored));
  c.restore_s = Secs(absl::Now() - t);
  if (restored.rows() != num_rows || Sample(fresh.get(), sample_keys, dim) != before ||
      fresh->store()->FindTable(kTable)->Counters().pending_rows != pending) {
    std::fprintf(stderr, "restore of %s differs from the checkpointed rows\n",
                 written.checkpoint_dir().c_str());
    std::exit(1);
  }
  fresh.reset();
  std::filesystem::remove_all(root);
  std::printf(
      "rows=%llu dim=%u pending=%llu bytes_per_row=%.1f table_bytes_per_row=%.0f "
      "fill_rows_per_s=%.0f unique_per_step=%.0f pull_rows_per_s=%.0f push_rows_per_s=%.0f "
      "w_rows_per_s=%.0f ckpt_gb=%.3f copy_s=%.2f write_s=%.2f write_gbps=%.2f "
      "disk_write_gbps=%.2f restore_s=%.2f restore_gbps=%.2f disk_read_gbps=%.2f "
      "resident_before_restore=%.2f\n",
      static_cast<unsigned long long>(num_rows), dim, static_cast<unsigned long long>(pending),
      c.bytes_per_row, c.table_bytes_per_row, c.fill_rows_per_s, c.unique_per_step,
      c.pull_rows_per_s, c.push_rows_per_s, c.w_rows_per_s, c.ckpt_gb, c.copy_s, c.write_s,
      c.ckpt_gb / c.write_s, c.disk_write_gbps, c.restore_s, c.ckpt_gb / c.restore_s,
      c.disk_read_gbps, c.resident_before_restore);
  std::fflush(stdout);
  return c;
}

std::vector<uint64_t> ParseList(const std::string& text) {
  std::vector<uint64_t> out;
  for (absl::string_view s : absl::StrSplit(text, ',', absl::SkipEmpty())) {
    uint64_t v;
    if (!absl::SimpleAtoi(s, &v) || v == 0) {
      std::fprintf(stderr, "bad list element '%s'\n", std::string(s).c_str());
      std::exit(2);
    }
    out.push_back(v);
  }
  return out;
}

int Main() {
  const std::string dir = absl::GetFlag(FLAGS_dir);
  std::filesystem::create_directories(dir);
  std::vector<Case> cases;
  for (uint64_t dim : ParseList(absl::GetFlag(FLAGS_dims))) {
    for (uint64_t rows : ParseList(absl::GetFlag(FLAGS_rows))) {
      cases.push_back(RunCase(rows, static_cast<uint32_t>(dim), dir));
    }
  }
  std::printf(
      "\none in-process server core, 1 sparse table, Adagrad; W: 4096 Zipf(1.0) draws/step "
      "over all rows, %d steps; checkpoint and disk under %s\n",
      absl::GetFlag(FLAGS_steps), dir.c_str());
  std::printf("%10s %4s %8s %8s %9s %9s %9s %9s %8s %7s %7s %8s %8s %7s %8s %8s\n", "rows", "dim",
              "B/row", "table B", "uniq/step", "pull Mr/s", "push Mr/s", "W Mr/s", "ckpt GB",
              "copy s", "write s", "wr GB/s", "disk wr", "rest s", "rs GB/s", "disk rd");
  for (const Case& c : cases) {
    if (c.skipped) {
      std::printf("%10llu %4u   skipped (memory)\n", static_cast<unsigned long long>(c.rows),
                  c.dim);
      continue;
    }
    std::printf(
        "%10llu %4u %8.1f %8.0f %9.0f %9.2f %9.2f %9.2f %8.2f %7.2f %7.2f %8.2f %8.2f "
        "%7.2f %8.2f %8.2f\n",
        static_cast<unsigned long long>(c.rows), c.dim, c.bytes_per_row, c.table_bytes_per_row,
        c.unique_per_step, c.pull_rows_per_s / 1e6, c.push_rows_per_s / 1e6, c.w_rows_per_s / 1e6,
        c.ckpt_gb, c.copy_s, c.write_s, c.ckpt_gb / c.write_s, c.disk_write_gbps, c.restore_s,
        c.ckpt_gb / c.restore_s, c.disk_read_gbps);
  }
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return shardps::Main();
}

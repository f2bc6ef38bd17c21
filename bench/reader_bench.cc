// reader_bench: CriteoReader throughput (lines/s) against `cat FILE | wc -l`
// and `zcat FILE | wc -l` on the same generated file, printed as ratios;
// then the job's reading cost when sharded: --workers readers (one after the
// other, in this process) over the same lines as --shards gzip files, each
// reading its share of one epoch: bytes decompressed per worker and in
// total against the data's size (1.0 = each byte decompressed once in the
// job), and lines/s against one reader of all the files; and the cost of
// the shuffle window (--window lines) on one reader.
// Prints figures; never passes or fails on time.
//
//   bazel run -c opt //bench:reader_bench -- --lines=1000000
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "common/init.h"
#include "glog/logging.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/synthetic.h"

ABSL_FLAG(uint64_t, lines, 1000000, "Lines in the generated file.");
ABSL_FLAG(std::string, dir, "/tmp/shardps_reader_bench", "Scratch directory.");
ABSL_FLAG(int, repeat, 3, "Runs per measurement; the fastest counts.");
ABSL_FLAG(int, batch, 256, "Batch size of the reader.");
ABSL_FLAG(uint32_t, workers, 4, "Workers sharing the sharded data set.");
ABSL_FLAG(uint32_t, shards, 8, "Files (gzip) of the sharded data set.");
ABSL_FLAG(uint64_t, window, 100000, "Shuffle window (lines) for the shuffle's cost.");

namespace shardps {
namespace data {
namespace {

// Seconds of the fastest of `repeat` runs of `fn`.
double Fastest(const std::function<void()>& fn) {
  double best = 1e30;
  for (int i = 0; i < absl::GetFlag(FLAGS_repeat); ++i) {
    const auto start = std::chrono::steady_clock::now();
    fn();
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    best = std::min(best, took.count());
  }
  return best;
}

double ShellSeconds(const std::string& command) {
  return Fastest([&] { CHECK_EQ(std::system(command.c_str()), 0) << command; });
}

ReaderOptions BenchOptions(std::vector<std::string> files, uint32_t rank, uint32_t workers) {
  ReaderOptions o;
  o.files = std::move(files);
  for (int i = 0; i < kCriteoNumCategorical; ++i) {
    FieldSpec f;
    f.column = 1 + kCriteoNumDense + i;
    o.fields.push_back(f);
  }
  o.rank = rank;
  o.num_workers = workers;
  o.shuffle = true;
  o.shuffle_seed = 1;
  return o;
}

// Seconds of the fastest run reading all of the share of `o`; `*lines` =
// examples, `*stats` = the reader's stats (of the last run).
double ReaderSeconds(const ReaderOptions& o, uint64_t* lines,
                     CriteoReader::Stats* stats = nullptr) {
  return Fastest([&] {
    auto reader = CriteoReader::Create(o);
    CHECK(reader.ok()) << reader.status();
    Batch batch;
    *lines = 0;
    while (true) {
      auto more = (*reader)->NextBatch(absl::GetFlag(FLAGS_batch), &batch);
      CHECK(more.ok()) << more.status();
      if (!*more) break;
      *lines += batch.size;
    }
    if (stats != nullptr) *stats = (*reader)->stats();
  });
}

double ReaderSeconds(const std::string& path, uint32_t rank, uint32_t workers, uint64_t* lines) {
  return ReaderSeconds(BenchOptions({path}, rank, workers), lines);
}

uint64_t FileSize(const std::string& path) {
  struct stat st;
  CHECK_EQ(stat(path.c_str(), &st), 0) << path;
  return static_cast<uint64_t>(st.st_size);
}

// The sharded part: --workers readers over --shards gzip files.
void RunSharded() {
  SyntheticOptions g;
  g.out_dir = absl::GetFlag(FLAGS_dir) + "/sharded";
  g.train_lines = absl::GetFlag(FLAGS_lines);
  g.eval_lines = 0;
  g.train_shards = absl::GetFlag(FLAGS_shards);
  uint64_t data_bytes = 0;  // Uncompressed: the plain copy's size.
  const std::vector<std::string> plain = GenerateSynthetic(g).value().train_files;
  for (const std::string& path : plain) data_bytes += FileSize(path);
  g.gzip = true;
  const std::vector<std::string> gz = GenerateSynthetic(g).value().train_files;
  uint64_t gz_bytes = 0;
  for (const std::string& path : gz) gz_bytes += FileSize(path);
  const uint32_t workers = absl::GetFlag(FLAGS_workers);
  printf(
      "sharded: %llu lines in %zu gzip files (%.1f MB, %.1f MB uncompressed), "
      "%u workers, one epoch each\n",
      static_cast<unsigned long long>(g.train_lines), gz.size(), gz_bytes / 1e6, data_bytes / 1e6,
      workers);
  uint64_t total_lines = 0;
  uint64_t total_decompressed = 0;
  double total_seconds = 0;
  for (uint32_t rank = 0; rank < workers; ++rank) {
    uint64_t lines = 0;
    CriteoReader::Stats stats;
    const ReaderOptions o = BenchOptions(gz, rank, workers);
    const double seconds = ReaderSeconds(o, &lines, &stats);
    const size_t files = CriteoReader::Create(o).value()->Units(0).size();
    printf(
        "  worker %u: %zu files, %9llu lines, %7.1f MB decompressed (%.3f of the data), "
        "%8.0f lines/s\n",
        rank, files, static_cast<unsigned long long>(lines), stats.bytes_decompressed / 1e6,
        static_cast<double>(stats.bytes_decompressed) / data_bytes, lines / seconds);
    total_lines += lines;
    total_decompressed += stats.bytes_decompressed;
    total_seconds += seconds;
  }
  CHECK_EQ(total_lines, g.train_lines) << "the workers' shares do not cover the data once";
  uint64_t lines = 0;
  const double one = ReaderSeconds(BenchOptions(gz, 0, 1), &lines);
  printf(
      "  total: %.1f MB decompressed = %.3f x the data (the line-stripe reader: %u.000 x, "
      "every worker decompressed every file)\n",
      total_decompressed / 1e6, static_cast<double>(total_decompressed) / data_bytes, workers);
  printf(
      "  one reader of all the files: %8.0f lines/s; the %u workers' lines over the sum "
      "of their times: %8.0f lines/s (ratio %.3f)\n",
      lines / one, workers, total_lines / total_seconds,
      (total_lines / total_seconds) / (lines / one));
  ReaderOptions windowed = BenchOptions(gz, 0, 1);
  windowed.shuffle_buffer = absl::GetFlag(FLAGS_window);
  const double shuffled = ReaderSeconds(windowed, &lines);
  printf("  one reader with a shuffle window of %llu lines: %8.0f lines/s (ratio to none %.3f)\n",
         static_cast<unsigned long long>(windowed.shuffle_buffer), lines / shuffled,
         one / shuffled);
}

int Run() {
  SyntheticOptions g;
  g.out_dir = absl::GetFlag(FLAGS_dir);
  g.train_lines = absl::GetFlag(FLAGS_lines);
  g.eval_lines = 0;
  for (const bool gzip : {false, true}) {
    g.gzip = gzip;
    auto summary = GenerateSynthetic(g);
    CHECK(summary.ok()) << summary.status();
  }
  const std::string plain = g.out_dir + "/train.tsv";
  const std::string gz = plain + ".gz";
  const double n = static_cast<double>(g.train_lines);
  const double cat = ShellSeconds(absl::StrCat("cat ", plain, " | wc -l >/dev/null"));
  const double zcat = ShellSeconds(absl::StrCat("zcat ", gz, " | wc -l >/dev/null"));
  uint64_t lines = 0;
  const double reader_plain = ReaderSeconds(plain, 0, 1, &lines);
  CHECK_EQ(lines, g.train_lines);
  const double reader_gz = ReaderSeconds(gz, 0, 1, &lines);
  CHECK_EQ(lines, g.train_lines);
  const double reader_plain_r0of4 = ReaderSeconds(plain, 0, 4, &lines);
  printf("reader_bench: %llu lines (%s), batch %d, fastest of %d runs, 1 thread\n",
         static_cast<unsigned long long>(g.train_lines), plain.c_str(), absl::GetFlag(FLAGS_batch),
         absl::GetFlag(FLAGS_repeat));
  printf("  cat | wc -l          %10.0f lines/s\n", n / cat);
  printf("  CriteoReader plain   %10.0f lines/s   ratio to cat  %.3f\n", n / reader_plain,
         cat / reader_plain);
  printf("  zcat | wc -l         %10.0f lines/s\n", n / zcat);
  printf("  CriteoReader gzip    %10.0f lines/s   ratio to zcat %.3f\n", n / reader_gz,
         zcat / reader_gz);
  printf(
      "  CriteoReader plain, rank 0 of 4 (%llu lines, its byte range): "
      "%.0f of its lines/s\n",
      static_cast<unsigned long long>(lines), lines / reader_plain_r0of4);
  RunSharded();
  return 0;
}

}  // namespace
}  // namespace data
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "Reader throughput against cat/zcat | wc -l.");
  return shardps::data::Run();
}

// reader_bench: CriteoReader throughput (lines/s) against `cat FILE | wc -l`
// and `zcat FILE | wc -l` on the same generated file, printed as ratios.
// Prints figures; never passes or fails on time.
//
//   bazel run //bench:reader_bench -- --lines=1000000
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>

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

// Seconds to read all of this worker's share of `path`; `*lines` = examples.
double ReaderSeconds(const std::string& path, uint32_t rank, uint32_t workers,
                     uint64_t* lines) {
  ReaderOptions o;
  o.files = {path};
  for (int i = 0; i < kCriteoNumCategorical; ++i) {
    FieldSpec f;
    f.column = 1 + kCriteoNumDense + i;
    o.fields.push_back(f);
  }
  o.rank = rank;
  o.num_workers = workers;
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
  });
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
         static_cast<unsigned long long>(g.train_lines), plain.c_str(),
         absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_repeat));
  printf("  cat | wc -l          %10.0f lines/s\n", n / cat);
  printf("  CriteoReader plain   %10.0f lines/s   ratio to cat  %.3f\n",
         n / reader_plain, cat / reader_plain);
  printf("  zcat | wc -l         %10.0f lines/s\n", n / zcat);
  printf("  CriteoReader gzip    %10.0f lines/s   ratio to zcat %.3f\n", n / reader_gz,
         zcat / reader_gz);
  printf("  CriteoReader plain, rank 0 of 4 (%llu lines parsed, all scanned): "
         "%.0f file lines/s\n",
         static_cast<unsigned long long>(lines), n / reader_plain_r0of4);
  return 0;
}

}  // namespace
}  // namespace data
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "Reader throughput against cat/zcat | wc -l.");
  return shardps::data::Run();
}

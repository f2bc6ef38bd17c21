// ps_export: exports a model from a complete checkpoint for serving.
//
//   ps_export --config job.pbtxt --checkpoint_dir /ckpt [--clock N] --out DIR
//
// Restores the checkpoint (the job's best one if it kept one (BEST, periodic
// evaluation), else the latest complete one, or the one at --clock;
// every file verified first) and writes into DIR: dense.pt (the MLP weights
// as named LibTorch tensors, worker/export/dense_export.h), table-<id>.emb
// per sparse table (sorted keys and weight rows, the versioned format of
// worker/export/embedding_file.h) and manifest.txt (exporter.h). Prints
//
//   PS_EXPORT_RESULT tables=... rows=... dense_params=... clock=... out=...
//
// Exit status: 0 done, 1 export failed (checkpoint refused, I/O), 2 bad
// flags or config.
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "common/init.h"
#include "glog/logging.h"
#include "worker/export/exporter.h"
#include "worker/export/restored_job.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config (the checkpoint's job). Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Checkpoint root (checkpoint.dir of the job).");
ABSL_FLAG(int64_t, clock, -1,
          "Checkpoint clock to export (-1: the job's best one, "
          "<checkpoint_dir>/BEST, if it kept one; else the latest complete one).");
ABSL_FLAG(std::string, out, "", "Output directory (created if missing).");

namespace shardps {
namespace {

int Run() {
  if (absl::GetFlag(FLAGS_config).empty() || absl::GetFlag(FLAGS_checkpoint_dir).empty() ||
      absl::GetFlag(FLAGS_out).empty()) {
    LOG(ERROR) << "give --config, --checkpoint_dir and --out";
    return 2;
  }
  std::optional<uint64_t> clock;
  if (absl::GetFlag(FLAGS_clock) >= 0) clock = absl::GetFlag(FLAGS_clock);
  auto job =
      exporter::RestoreJob(absl::GetFlag(FLAGS_config), absl::GetFlag(FLAGS_checkpoint_dir), clock);
  if (!job.ok()) {
    LOG(ERROR) << job.status();
    return absl::IsInvalidArgument(job.status()) ? 2 : 1;
  }
  const exporter::RestoredJob& j = **job;
  auto summary =
      exporter::ExportModel(j.config, j.spec, static_cast<int64_t>(j.trainer->NumDenseParams()),
                            *j.store(), j.checkpoint, absl::GetFlag(FLAGS_out));
  if (!summary.ok()) {
    LOG(ERROR) << "export failed: " << summary.status();
    return 1;
  }
  std::printf("PS_EXPORT_RESULT tables=%zu rows=%" PRIu64 " dense_params=%" PRId64 " clock=%" PRIu64
              " out=%s\n",
              summary->tables.size(), summary->rows, summary->dense_params, j.checkpoint.clock,
              absl::GetFlag(FLAGS_out).c_str());
  std::printf("exported %zu embedding tables (%" PRIu64 " rows) and %" PRId64
              " dense parameters of the checkpoint at clock %" PRIu64 " to %s (see %s)\n",
              summary->tables.size(), summary->rows, summary->dense_params, j.checkpoint.clock,
              absl::GetFlag(FLAGS_out).c_str(), summary->manifest_path.c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "ps_export --config job.pbtxt --checkpoint_dir DIR [--clock N] --out DIR");
  return shardps::Run();
}

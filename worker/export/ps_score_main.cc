// ps_score: scores Criteo-format files with a model restored from a complete
// checkpoint, offline (no scheduler, no servers).
//
//   ps_score --config job.pbtxt --checkpoint_dir /ckpt [--clock N]
//            --data eval.tsv[,more.tsv.gz] --predictions out.txt
//
// Restores the checkpoint (the job's best one if it kept one (BEST, periodic
// evaluation), else the latest complete one, or the one at --clock)
// into in-process tables, scores every line of --data with the trainer's own
// evaluation (Trainer::Evaluate: same model code, batch size and reader, so
// the AUC equals the trainer's evaluation at that clock), writes one
// prediction per input line in input order ("nan" for a malformed line,
// which is skipped and logged as file:line like in training, within
// data.error_budget), and prints
//
//   PS_SCORE_RESULT lines=... examples=... malformed=... auc=... logloss=...
//                   clock=... checkpoint=...     (one line)
//
// and one human line. Exit status: 0 done, 1 scoring failed (checkpoint
// refused, data unreadable, error budget exceeded), 2 bad flags or config.
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "common/init.h"
#include "glog/logging.h"
#include "worker/export/prediction_writer.h"
#include "worker/export/restored_job.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config (the checkpoint's job). Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Checkpoint root (checkpoint.dir of the job).");
ABSL_FLAG(int64_t, clock, -1,
          "Checkpoint clock to load (-1: the job's best one, "
          "<checkpoint_dir>/BEST, if it kept one; else the latest complete one).");
ABSL_FLAG(std::vector<std::string>, data, {}, "Files to score (comma-separated; plain or gzip).");
ABSL_FLAG(std::string, predictions, "", "Output: one prediction per input line.");

namespace shardps {
namespace {

int Run() {
  const std::vector<std::string> files = absl::GetFlag(FLAGS_data);
  if (absl::GetFlag(FLAGS_config).empty() || absl::GetFlag(FLAGS_checkpoint_dir).empty() ||
      files.empty() || absl::GetFlag(FLAGS_predictions).empty()) {
    LOG(ERROR) << "give --config, --checkpoint_dir, --data and --predictions";
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
  auto writer =
      exporter::PredictionWriter::Create((*job)->config, files, absl::GetFlag(FLAGS_predictions));
  if (!writer.ok()) {
    LOG(ERROR) << writer.status();
    return 2;
  }
  auto result = (*job)->trainer->Evaluate(
      files, [&writer](const data::Batch& batch, absl::Span<const float> probs) {
        return (*writer)->Add(batch, probs);
      });
  absl::Status st = result.ok() ? (*writer)->Finish() : result.status();
  if (!st.ok()) {
    LOG(ERROR) << "scoring failed: " << st;
    return 1;
  }
  const exporter::LoadedCheckpoint& ckpt = (*job)->checkpoint;
  std::printf("PS_SCORE_RESULT lines=%" PRIu64 " examples=%" PRIu64 " malformed=%" PRIu64
              " auc=%.6f logloss=%.6f clock=%" PRIu64 " checkpoint=%s\n",
              (*writer)->lines(), result->examples, (*writer)->malformed(), result->auc,
              result->logloss, ckpt.clock, ckpt.dir.c_str());
  std::printf("scored %" PRIu64 " lines (%" PRIu64
              " malformed) with the checkpoint at clock %" PRIu64
              ": AUC %.6f, logloss %.6f; predictions in %s\n",
              (*writer)->lines(), (*writer)->malformed(), ckpt.clock, result->auc, result->logloss,
              absl::GetFlag(FLAGS_predictions).c_str());
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "ps_score --config job.pbtxt --checkpoint_dir DIR [--clock N] "
                       "--data FILE[,FILE] --predictions OUT");
  return shardps::Run();
}

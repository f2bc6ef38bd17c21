// PredictionWriter: writes one prediction per input line, in input order, for
// the batches an evaluation pass scores (Trainer::Evaluate's per-batch
// callback), so the output lines up with the input files line for line.
//
// Output: a text file, one line per input line: the predicted probability
// ("%.9g", which reads back as the same float), or "nan" for a malformed
// line, which the reader skips (and logs as "file:line: what", within
// data.error_budget) exactly as it does in training and evaluation.
//
// How lines are matched: the reader drops malformed lines without saying
// where, so the writer walks the same files with its own LineSource and the
// reader's LineParser (same format, columns and fields, from the job
// config): a line the parser refuses (or that is too long) is a "nan"; each
// line it accepts takes the next example's prediction, and its label must
// equal the example's (INTERNAL otherwise: the two walks disagree).
//
// The file appears only on Finish() (temporary name, fsync, rename):
// a failed scoring run leaves no partial predictions file.
//
// Thread-compatible: one thread calls Add/Finish.
#ifndef SHARDPS_WORKER_EXPORT_PREDICTION_WRITER_H_
#define SHARDPS_WORKER_EXPORT_PREDICTION_WRITER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"

namespace shardps {
namespace exporter {

class PredictionWriter {
 public:
  // `config` finalized; `files` exactly as given to the evaluation (one
  // epoch, in this order). Errors of the config's fields, or from creating
  // the output file (its directory must exist).
  static absl::StatusOr<std::unique_ptr<PredictionWriter>> Create(const JobConfig& config,
                                                                  std::vector<std::string> files,
                                                                  const std::string& out_path);
  ~PredictionWriter();
  PredictionWriter(const PredictionWriter&) = delete;
  PredictionWriter& operator=(const PredictionWriter&) = delete;

  // Writes the predictions of the next batch (probs.size() == batch.size),
  // preceded by "nan" for the malformed lines before each example. INTERNAL
  // if the input files do not hold these examples next; DATA_LOSS /
  // NOT_FOUND from reading them.
  absl::Status Add(const data::Batch& batch, absl::Span<const float> probs);

  // Writes "nan" for the malformed lines after the last example, then makes
  // the file appear. INTERNAL if a well-formed line was never scored.
  absl::Status Finish();

  uint64_t lines() const { return lines_; }          // Written so far.
  uint64_t malformed() const { return malformed_; }  // "nan" lines so far.

 private:
  struct Impl;
  explicit PredictionWriter(std::unique_ptr<Impl> impl);

  std::unique_ptr<Impl> impl_;
  uint64_t lines_ = 0;
  uint64_t malformed_ = 0;
};

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_PREDICTION_WRITER_H_

// ServedModel: one version of a job's model, restored from a complete
// checkpoint and held read-only for serving (the serving replica,
// replica/replica.h, is its one user outside the worker role).
//
// Load restores the checkpoint at a clock (FULL, or DELTA with its whole
// chain: the FULL rows, then each delta's deletions and rows, so a row
// evicted before the cut is absent) into a LOCAL parameter store with a
// Trainer over it, exactly as ps_score does (checkpoint_loader.h: every file
// verified before a row is written). It then walks every table once to
// compute the version's TableHash (common/table_hash.h: every row's
// (table id, key, weights), shared unadmitted rows under their reserved
// keys, as the checkpoint files hold them). Lookup asks the table whether a
// key has a row (no key set of its own, which each version would build and
// hold).
//
// WithDeltas builds the next version from this one instead of from its
// whole chain: a copy of this version's rows (weights, optimizer state,
// shared rows, bit for bit) plus, in order, each later link's deletions and
// rows. Every file of those links is read and verified (size and CRC32C
// against its manifest, then the reader's checks) before a row is applied,
// as Load does. The result equals Load of the same checkpoint when this
// version is exactly the chain's prefix; the caller (the replica) checks
// that by identity (clock and created_unix_micros of each link); WithDeltas
// checks that the first link applied is a DELTA on this version's clock.
//
// Predict parses Criteo-format lines with the reader's own LineParser
// (format, columns and fields of the job config) and scores them with
// Trainer::Predict: the same model code and evaluation pulls as
// Trainer::Evaluate, so a probability equals ps_score's for the same line
// and checkpoint (up to float rounding of a different batch shape).
//
// Errors: Load: those of RestoreCheckpoint (NOT_FOUND, DATA_LOSS,
// FAILED_PRECONDITION, naming the file or directory) and of the trainer.
// WithDeltas: those of the links' files, INVALID_ARGUMENT for links that do
// not continue this version (naming both clocks).
// Predict: INVALID_ARGUMENT "line <i>: <why>" (0-based index in the request)
// for a line the parser refuses; nothing is scored then. Lookup:
// INVALID_ARGUMENT for an unknown table id.
//
// Thread-safety: immutable after Load apart from Predict's scratch; Lookup
// and the accessors may run concurrently with anything; Predict calls are
// serialized by an internal mutex (the trainer is single-threaded). Blocks
// on CPU only (no network, no file I/O after Load).
#ifndef SHARDPS_WORKER_EXPORT_SERVED_MODEL_H_
#define SHARDPS_WORKER_EXPORT_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/mutex.h"
#include "proto/checkpoint.pb.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"
#include "worker/data/line_parser.h"
#include "worker/param_store.h"
#include "worker/trainer.h"

namespace shardps {
namespace exporter {

class ServedModel {
 public:
  // `config` finalized (common/config.h LoadJobConfig); `root` the job's
  // checkpoint root; `clock` a complete checkpoint under it.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Load(const JobConfig& config,
                                                           const std::string& root, uint64_t clock);
  // The version at `next` (a checkpoint resolved with its chain,
  // checkpoint_dir.h LoadCheckpoint; sizes are enough, the files read are
  // verified here) from this one plus next.chain[first..]: every link from
  // `first` on must be a DELTA, the one at `first` on this version's clock.
  // The bytes of the files read go to `bytes_read` (may be null). See the
  // top.
  absl::StatusOr<std::unique_ptr<ServedModel>> WithDeltas(
      const checkpoint::ResolvedCheckpoint& next, size_t first, uint64_t* bytes_read) const;

  ~ServedModel();
  ServedModel(const ServedModel&) = delete;
  ServedModel& operator=(const ServedModel&) = delete;

  uint64_t clock() const { return clock_; }        // The checkpoint's clock.
  const std::string& dir() const { return dir_; }  // Its directory.
  uint64_t table_hash() const { return table_hash_; }
  uint64_t rows() const { return rows_; }  // Rows hashed, every table.

  // probs gets one probability per line, in order. See the top for errors.
  absl::Status Predict(absl::Span<const absl::string_view> lines, std::vector<float>* probs);

  // For each key: whether it has a row in this version, and its weights
  // (dim floats; zeros when absent) appended to `values`. `found` and
  // `values` are overwritten.
  absl::Status Lookup(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t* dim,
                      std::vector<bool>* found, std::vector<float>* values) const;

 private:
  ServedModel() = default;
  // A model with empty tables: the store, the trainer and the line parser.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Empty(const JobConfig& config);
  uint64_t NumDenseChunks() const;
  absl::Status Index();  // Table hash and rows.

  // Constant after Load. Destroyed bottom-up: the trainer before its store.
  JobConfig config_;
  uint64_t clock_ = 0;
  std::string dir_;
  uint64_t table_hash_ = 0;
  uint64_t rows_ = 0;
  std::unique_ptr<ParamStore> params_;

  mutable Mutex predict_mu_;
  std::unique_ptr<Trainer> trainer_ ABSL_GUARDED_BY(predict_mu_);
  std::unique_ptr<data::LineParser> parser_ ABSL_GUARDED_BY(predict_mu_);
  data::Batch batch_ ABSL_GUARDED_BY(predict_mu_);
};

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_SERVED_MODEL_H_

// LocalModel: a job's model in this process, for serving: the tables in a
// LOCAL parameter store (worker/param_store.h) and the trainer's own model
// code over them (worker/trainer.h), as ps_score has them
// (restored_job.h). The serving replica's one door into the worker role
// (replica/served_model.h keeps the versions, the deltas and the running
// table hash on top of it; tests/structure/visibility_check.sh).
//
// What it does, and only that:
//  - Restore a complete checkpoint (FULL, or DELTA with its whole chain)
//    into the tables, with the servers' restore code
//    (checkpoint_loader.h: every file verified before a row is written).
//  - Read and verify a checkpoint's delta links (ReadLinks: size and
//    CRC32C against the manifest, then the reader's checks) and apply one
//    (Apply: per file its deletions, then its rows, as a restore applies a
//    chain's later links, without clearing the tables first).
//  - Apply one table's rows of the servers' delta stream (proto/ps.proto
//    VersionRows: its deletions, then its rows; weights only, the
//    optimizer state written as zero: a model serves weights).
//  - Tell a RowObserver, record by record, what each write replaces and
//    what it writes, so a caller keeps a sum over the rows (the replica's
//    table hash) without walking the tables.
//  - Copy (every row, bit for bit), walk the rows (ForEachRow), Lookup,
//    and Predict (Criteo-format lines parsed with the reader's own
//    LineParser, scored by Trainer::Predict: the same model code and
//    evaluation pulls as Trainer::Evaluate, so a probability equals
//    ps_score's for the same line and checkpoint, up to float rounding of
//    a different batch shape).
// It keeps no version: which links continue which state is the caller's.
//
// Rows: a table's rows, plus its shared unadmitted rows under their
// reserved keys (server/table.h), as the checkpoint files hold them.
//
// Errors: Create: the trainer's and the config's. Restore: those of
// RestoreCheckpoint (NOT_FOUND, DATA_LOSS, FAILED_PRECONDITION, naming the
// file or directory). ReadLinks: those of the links' files. Predict:
// INVALID_ARGUMENT "line <i>: <why>" (0-based index in the request) for a
// line the parser refuses; nothing is scored then. Lookup:
// INVALID_ARGUMENT for an unknown table id. Apply takes what its caller
// checked: files from ReadLinks of this job, stream rows of a table of this
// job with keys * dim weights (replica/served_model.h CheckStreamPart).
//
// Thread-safety: Restore, Apply and SetClock change the tables and need the
// model alone: no other call on it (its owner, the replica, calls them only
// on a model no reader holds). The rest may run concurrently with each
// other and with Predict, whose calls are serialized by an internal mutex
// (the trainer is single-threaded). Blocks on CPU only, apart from the file
// reads of Restore and ReadLinks.
#ifndef SHARDPS_WORKER_EXPORT_LOCAL_MODEL_H_
#define SHARDPS_WORKER_EXPORT_LOCAL_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "proto/ps.pb.h"

namespace shardps {

class ParamStore;
class Trainer;
namespace data {
class Batch;
class LineParser;
}  // namespace data

namespace exporter {

// One record written, as Apply sees it.
struct RowChange {
  uint32_t table_id = 0;
  uint64_t key = 0;
  uint32_t dim = 0;
  // The weights the table held for the key before (a row, or for a shared
  // key the shared row the write replaces); null when it held none.
  const float* before = nullptr;
  // The weights written; null for a deletion.
  const float* after = nullptr;
  // A shared unadmitted row under its reserved key: it always exists (a
  // write replaces it), and it is no row of a row count.
  bool shared = false;
};

// Told each record Apply writes, in order, before the next one is read.
class RowObserver {
 public:
  virtual ~RowObserver() = default;
  virtual void Changed(const RowChange& change) = 0;
};

class LocalModel {
 public:
  // A model with empty tables. `config` finalized (common/config.h
  // LoadJobConfig).
  static absl::StatusOr<std::unique_ptr<LocalModel>> Create(const JobConfig& config);
  ~LocalModel();
  LocalModel(const LocalModel&) = delete;
  LocalModel& operator=(const LocalModel&) = delete;

  // Restores the complete checkpoint at `clock` under `root` (its whole
  // chain: the FULL rows, then each delta's deletions and rows, so a row
  // evicted before the cut is absent), replacing every row, and sets the
  // tables' clock; returns its directory. Refuses a cut without the
  // model's dense weights (FAILED_PRECONDITION).
  absl::StatusOr<std::string> Restore(const std::string& root, uint64_t clock);

  // One delta checkpoint's files, read and verified; immutable, so one read
  // serves several models of the job.
  struct DeltaFiles;
  using Link = std::shared_ptr<const DeltaFiles>;
  // The files of next.chain[first..] (`next`: a checkpoint resolved with
  // its chain, checkpoint_dir.h LoadCheckpoint; sizes are enough, the
  // files are verified here), in order. Their bytes go to `bytes_read`
  // (may be null).
  absl::StatusOr<std::vector<Link>> ReadLinks(const checkpoint::ResolvedCheckpoint& next,
                                              size_t first, uint64_t* bytes_read) const;
  // Applies `link`'s deletions, then its rows (admission counts are the
  // trainer's: not applied). `observer` (null: none) is told each record
  // with what it replaces; without one nothing is read, only written.
  void Apply(const DeltaFiles& link, RowObserver* observer);
  // Applies one table's rows of a stream version part: its deletions, then
  // its rows, as Apply(link).
  void Apply(const VersionRows& rows, RowObserver* observer);
  // The tables' clock (the stamps written rows get).
  void SetClock(uint64_t clock);

  // A model holding this one's rows (weights, optimizer state, stamps and
  // shared rows, bit for bit); its clock is the caller's to set.
  absl::StatusOr<std::unique_ptr<LocalModel>> Copy() const;

  // Every row (see the top) with its weights.
  void ForEachRow(
      absl::FunctionRef<void(uint32_t table_id, uint64_t key, const float* weights, uint32_t dim)>
          visit) const;
  // The dim of table `table_id`; 0 when the job has no such table.
  uint32_t TableDim(uint32_t table_id) const;

  // probs gets one probability per line, in order. See the top for errors.
  absl::Status Predict(absl::Span<const absl::string_view> lines, std::vector<float>* probs);
  // For each key: whether it has a row, and its weights (dim floats; zeros
  // when absent) appended to `values`. `found` and `values` are
  // overwritten.
  absl::Status Lookup(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t* dim,
                      std::vector<bool>* found, std::vector<float>* values) const;

 private:
  LocalModel();
  uint64_t NumDenseChunks() const;

  // Constant after Create. Destroyed bottom-up: the trainer before its store.
  JobConfig config_;
  std::unique_ptr<ParamStore> params_;

  // Scratch of Apply (which needs the model alone).
  struct Scratch;
  std::unique_ptr<Scratch> scratch_;

  mutable Mutex predict_mu_;
  std::unique_ptr<Trainer> trainer_ ABSL_GUARDED_BY(predict_mu_);
  std::unique_ptr<data::LineParser> parser_ ABSL_GUARDED_BY(predict_mu_);
  std::unique_ptr<data::Batch> batch_ ABSL_GUARDED_BY(predict_mu_);
};

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_LOCAL_MODEL_H_

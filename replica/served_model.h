// ServedModel: one version of a job's model that the replica serves
// (replica.h): the model's tables and code in this process
// (exporter::LocalModel, worker/export/local_model.h, the replica's one door
// into the worker role) and what makes them a version: the clock of the
// cut they equal, the checkpoint's directory, the table hash and the row
// count.
//
// Load restores the checkpoint at a clock (FULL, or DELTA with its whole
// chain) into a new model, exactly as ps_score does, then walks every row
// once for the version's TableHash (common/table_hash.h: every row's (table
// id, key, weights), shared unadmitted rows under their reserved keys, as
// the checkpoint files hold them) and its row count. Lookup asks the table
// whether a key has a row (no key set of its own, which each version would
// build and hold).
//
// A later version is built from an earlier one and the deltas after it,
// without reading its whole chain:
//  - ReadDeltas checks that the links after this version continue it (the
//    first a DELTA on this version's clock, each next one on the one
//    before, of this job) and reads their files (each verified). The links
//    are immutable and shared, so one read serves several models.
//  - Advance applies links, in order, to this model IN PLACE. The table
//    hash and row count follow record by record (the running hash): the
//    hash is a wrapping sum of RowHash, so before a record is applied the
//    weights the model holds for its key (a row, or for a reserved key the
//    shared row it replaces) leave the sum and the written weights enter
//    it; a deletion of a held row takes it out (exporter::RowObserver). No
//    walk of the whole table. Debug builds (NDEBUG unset: the tests) check
//    the sum against a walk after each Advance (INTERNAL on a difference).
//  - CatchUp brings a model that is behind another one (the replica's idle
//    model, a version behind the served one) to the version after it: the
//    links between the two are applied without reading a row (the result
//    equals the other model, whose hash and rows it takes), then the new
//    links by Advance. So only the new links' records are read before
//    being written, once per version.
//  - Copy is a new model holding this one's rows (weights, optimizer state,
//    shared rows, bit for bit), hash, rows, clock and directory.
//  - WithDeltas is ReadDeltas, Copy, then Advance of the copy.
// The result equals Load of the same checkpoint when this version is
// exactly the chain's prefix; the caller (the replica) checks that by
// identity (clock and created_unix_micros of each link); ReadDeltas checks
// the clocks.
//
// The servers' delta stream (proto/ps.proto VersionPart) gives versions the
// same way: CheckStreamPart checks a part against the job, FromStream
// builds a FULL version, AdvanceStream and CatchUpStream apply DELTA ones
// as Advance and CatchUp apply links.
//
// Predict and Lookup are the model's (local_model.h): a probability equals
// ps_score's for the same line and checkpoint.
//
// Errors: Load: the checkpoint's (NOT_FOUND, DATA_LOSS,
// FAILED_PRECONDITION, naming the file or directory) and the trainer's.
// ReadDeltas and WithDeltas: those of the links' files, INVALID_ARGUMENT for
// links that do not continue this version (naming both clocks),
// FAILED_PRECONDITION for another job's. Advance: INVALID_ARGUMENT when the
// link before the first is not this version's clock (nothing applied).
// Predict: INVALID_ARGUMENT "line <i>: <why>" for a line the parser
// refuses. Lookup: INVALID_ARGUMENT for an unknown table id.
//
// Thread-safety: Advance, CatchUp and their stream forms change the model
// and need it alone: no other call on it (its owner, the replica, calls
// them only on a model no reader holds). Otherwise immutable apart from
// Predict's scratch: Lookup, Copy, ReadDeltas, CheckStreamPart and the
// accessors may run concurrently with each other and with Predict, whose
// calls are serialized inside the model. Blocks on CPU only, apart from the
// file reads of Load, ReadDeltas and WithDeltas.
#ifndef SHARDPS_REPLICA_SERVED_MODEL_H_
#define SHARDPS_REPLICA_SERVED_MODEL_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "proto/config.pb.h"
#include "proto/ps.pb.h"
#include "worker/export/local_model.h"

namespace shardps {
namespace replica {

class ServedModel {
 public:
  // `config` finalized (common/config.h LoadJobConfig); `root` the job's
  // checkpoint root; `clock` a complete checkpoint under it.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Load(const JobConfig& config,
                                                           const std::string& root, uint64_t clock);
  // One delta checkpoint's files, read and verified; immutable.
  using Link = exporter::LocalModel::Link;

  // The files of next.chain[first..] (`next`: a checkpoint resolved with its
  // chain, checkpoint_dir.h LoadCheckpoint; sizes are enough, the files read
  // are verified), in order: every link from `first` on must be a DELTA,
  // the one at `first` on this version's clock. The bytes of the files read
  // go to `bytes_read` (may be null). See the top.
  absl::StatusOr<std::vector<Link>> ReadDeltas(const checkpoint::ResolvedCheckpoint& next,
                                               size_t first, uint64_t* bytes_read) const;
  // Makes this model the version at `next` by applying `links`, the last
  // links.size() links of next.chain (from ReadDeltas, here or on another
  // model of the same job), in place. The caller guarantees that this
  // version is next.chain minus those links; the link before them must be
  // at this version's clock. No other call may use the model meanwhile.
  absl::Status Advance(const checkpoint::ResolvedCheckpoint& next, absl::Span<const Link> links);
  // Makes this model the version at `next` when it is behind `to` (another
  // model of the job, at the version before next's last links.size()
  // links) by `catch_up`, the links between them: applies catch_up without
  // reading a row (the tables then equal `to`'s, whose hash and rows it
  // takes), then Advance(next, links). The caller guarantees the chain
  // identity as for Advance; the clocks are checked (INVALID_ARGUMENT,
  // nothing applied). `to` may be served meanwhile (it is only read); this
  // model needs to be alone, as for Advance.
  absl::Status CatchUp(absl::Span<const Link> catch_up, const ServedModel& to,
                       const checkpoint::ResolvedCheckpoint& next, absl::Span<const Link> links);
  // A model holding this version (see the top).
  absl::StatusOr<std::unique_ptr<ServedModel>> Copy() const;

  // The servers' delta stream (proto/ps.proto VersionPart; the replica
  // follows it). A stream version is every server's part of one cut,
  // together holding every partition once, each checked by CheckStreamPart.
  // Its rows carry weights only: the model writes them with zero optimizer
  // state (it serves weights), so the table hash, a hash of weights, is the
  // one the cut's checkpoint files give.
  struct StreamVersion {
    uint64_t clock = 0;
    std::vector<std::shared_ptr<const VersionPart>> parts;
  };
  using StreamLink = std::shared_ptr<const StreamVersion>;
  // INVALID_ARGUMENT naming the part and what is wrong unless it fits this
  // job: its partition count, partitions in range and unique, tables of this
  // job with their dim, weights of keys * dim floats, every key in a
  // partition the part holds, at most kMaxPushAges push ages and only in
  // chunk 0 (VersionPart.push_ages_micros).
  static constexpr int kMaxPushAges = 4096;
  absl::Status CheckStreamPart(const VersionPart& part) const;
  // A model holding exactly `full`, a version of FULL parts.
  static absl::StatusOr<std::unique_ptr<ServedModel>> FromStream(const JobConfig& config,
                                                                 const StreamVersion& full);
  // Applies DELTA versions in order, in place (per part its deletions, then
  // its rows), the hash following as in Advance. The caller guarantees this
  // model holds a state each link's delta applies to (a cut at or after the
  // delta's base, in the same lineage). As Advance, the model must be alone.
  absl::Status AdvanceStream(absl::Span<const StreamLink> links);
  // As CatchUp: `catch_up` (ending at `to`'s clock) applied without reading
  // a row, then AdvanceStream(links).
  absl::Status CatchUpStream(absl::Span<const StreamLink> catch_up, const ServedModel& to,
                             absl::Span<const StreamLink> links);
  // The version at `next` from this one plus next.chain[first..], as a new
  // model: ReadDeltas, Copy, Advance.
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
  absl::Status Predict(absl::Span<const absl::string_view> lines, std::vector<float>* probs) {
    return model_->Predict(lines, probs);
  }

  // For each key: whether it has a row in this version, and its weights
  // (dim floats; zeros when absent) appended to `values`. `found` and
  // `values` are overwritten.
  absl::Status Lookup(uint32_t table_id, absl::Span<const uint64_t> keys, uint32_t* dim,
                      std::vector<bool>* found, std::vector<float>* values) const {
    return model_->Lookup(table_id, keys, dim, found, values);
  }

 private:
  ServedModel(std::string job_name, uint32_t num_partitions,
              std::unique_ptr<exporter::LocalModel> model);
  // A model with empty tables.
  static absl::StatusOr<std::unique_ptr<ServedModel>> Empty(const JobConfig& config);
  // Applies a stream version's parts (with `observer`, null: nothing read).
  void ApplyStream(const StreamVersion& version, exporter::RowObserver* observer);
  void Index();  // Table hash and rows, from a walk of every row.
  // The version of `to`, whose tables this model's now equal.
  void TakeVersionOf(const ServedModel& to);
  // Debug builds: INTERNAL naming `what` unless the running hash and row
  // count equal a walk's (Index). Release builds: OK.
  absl::Status CheckRunningHash(absl::string_view what);

  // Constant after construction.
  const std::string job_name_;
  const uint32_t num_partitions_;
  const std::unique_ptr<exporter::LocalModel> model_;

  // Written by Load, Copy and the advances only (see Thread-safety).
  uint64_t clock_ = 0;
  std::string dir_;
  uint64_t table_hash_ = 0;
  uint64_t rows_ = 0;
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_SERVED_MODEL_H_

// CriteoReader: streams batches of one worker's share of a list of TSV files
// (Criteo format or TSV_MULTIHOT), over several epochs.
//
// Splitting among workers. Every file is cut into stripes of `stripe_lines`
// consecutive lines; stripe s of file i (i = the file's index in `files`)
// belongs to worker (s + i) mod num_workers. So every line goes to exactly
// one worker, whether there is one file or many, and a worker's share is
// the same in every epoch. Each worker scans every file and skips the lines
// of other workers without parsing them (a memchr per line), which keeps
// this correct for gzip files, which cannot be seeked cheaply; the price is
// that every worker decompresses every file.
//
// Epochs and shuffling. The shuffle unit (block) is a file: epoch e visits
// the files in the order FileOrder(e), a Fisher-Yates permutation seeded by
// (shuffle_seed, e) with our own generator (identical on every platform), or
// in list order when shuffling is off. Lines within a file keep their order;
// to shuffle finer, write the data as several files.
//
// Positions. position() says where the next line will be read (epoch, file
// ordinal in the epoch's order, line index and uncompressed byte offset in
// the file, malformed lines so far). Seek(position) on a reader created with
// the same options resumes exactly after the last consumed line; a Batch
// carries the position after its last line, so a checkpoint can record the
// position of the last batch trained on. EncodePosition/DecodePosition give
// it a stable text form (for checkpoint manifests).
//
// Malformed lines (wrong column count, bad label, integer or hex id, too
// long) are counted, logged as "file:line: what" (1-based line numbers; the
// first 10, then every 1000th) and skipped. When their number exceeds
// `error_budget`, NextBatch fails with INVALID_ARGUMENT naming the file and
// line of the last one, and keeps failing until Seek().
//
// Thread-compatible: no locking and no thread-local or static state, so a
// reader can be created on one thread and used on another (one at a time).
#ifndef SHARDPS_WORKER_DATA_CRITEO_READER_H_
#define SHARDPS_WORKER_DATA_CRITEO_READER_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "worker/data/batch.h"
#include "worker/data/fields.h"
#include "worker/data/line_parser.h"
#include "worker/data/line_source.h"

namespace shardps {
namespace data {

struct ReaderOptions {
  std::vector<std::string> files;  // Plain or gzip, in any mix.
  DataConfig::Format format = DataConfig::CRITEO;
  int num_dense = kCriteoNumDense;
  // Columns per line (see NumColumns in fields.h).
  int num_columns = 1 + kCriteoNumDense + kCriteoNumCategorical;
  std::vector<FieldSpec> fields;  // From ResolveFields.
  uint64_t error_budget = 100;    // Malformed lines tolerated.
  uint32_t rank = 0;
  uint32_t num_workers = 1;
  uint32_t epochs = 1;
  bool shuffle = false;
  uint64_t shuffle_seed = 0;
  uint32_t stripe_lines = 1024;
  size_t max_line_bytes = 1 << 20;
};

// Reader options for `files` from a job config: format, dense count, columns,
// fields (ResolveFields) and error budget from it; for `training`, epochs
// (training.epochs, 0 = 1) and shuffling seeded by training.shuffle_seed;
// otherwise (evaluation) one epoch in file order. Errors of ResolveFields, or
// INVALID_ARGUMENT if rank >= num_workers.
absl::StatusOr<ReaderOptions> ReaderOptionsFromConfig(
    const JobConfig& config, std::vector<std::string> files, uint32_t rank,
    uint32_t num_workers, bool training);

// Text form of a position: "v1 epoch=E file=F line=L offset=O bad=B".
std::string EncodePosition(const ReaderPosition& position);
// INVALID_ARGUMENT if `text` is not an EncodePosition result.
absl::StatusOr<ReaderPosition> DecodePosition(absl::string_view text);

class CriteoReader {
 public:
  // Validates `options` (INVALID_ARGUMENT naming the option) and checks that
  // every file exists (NOT_FOUND naming it). Opens nothing yet.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Create(
      ReaderOptions options);

  CriteoReader(const CriteoReader&) = delete;
  CriteoReader& operator=(const CriteoReader&) = delete;

  // Fills `batch` (after Reset) with up to `max_batch` (> 0) examples of this
  // worker. true if it holds at least one; false at the end of the last
  // epoch (the batch is then empty). A batch may be short only at the very
  // end. Errors: INVALID_ARGUMENT when the error budget is exceeded,
  // DATA_LOSS on unreadable or corrupt files, NOT_FOUND if a file vanished;
  // the reader then stays failed until Seek(). Blocks on file I/O.
  absl::StatusOr<bool> NextBatch(int max_batch, Batch* batch);

  // Where the next line will be read from.
  ReaderPosition position() const;

  // Moves to `position` (from position() or Batch::end_position of a reader
  // with the same options). INVALID_ARGUMENT if it is out of range or its
  // offset is not a line start of that file; DATA_LOSS / NOT_FOUND from the
  // file. Clears a failed state.
  absl::Status Seek(const ReaderPosition& position);

  // The file indices (into options().files) in the order epoch `epoch`
  // visits them.
  std::vector<size_t> FileOrder(uint64_t epoch) const;
  // True if line `line` (0-based) of file `file_index` belongs to this worker.
  bool Owns(size_t file_index, uint64_t line) const;

  const ReaderOptions& options() const { return options_; }
  const std::vector<FieldSpec>& fields() const { return options_.fields; }
  uint64_t bad_lines() const { return bad_lines_; }

 private:
  explicit CriteoReader(ReaderOptions options);
  // Opens the current file (order_[file_ordinal_]) at (offset, line).
  absl::Status OpenCurrent(uint64_t offset, uint64_t line);
  // Reads lines into `batch` until it is full or the file ends.
  absl::Status ReadFromCurrent(int max_batch, Batch* batch);
  // Counts and logs a malformed line; the budget error once exceeded.
  absl::Status BadLine(uint64_t line_index, absl::string_view what);
  void StartEpoch(uint64_t epoch);

  // Constant after construction.
  const ReaderOptions options_;
  // Reading state.
  LineParser parser_;
  uint64_t epoch_ = 0;
  std::vector<size_t> order_;  // FileOrder(epoch_).
  uint64_t file_ordinal_ = 0;
  std::unique_ptr<LineSource> source_;  // Null between files.
  uint64_t bad_lines_ = 0;
  absl::Status failed_;
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_CRITEO_READER_H_

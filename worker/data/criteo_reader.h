// CriteoReader: streams batches of one worker's share of a list of TSV files
// (Criteo format or TSV_MULTIHOT), over several epochs.
//
// Splitting among workers: a ShardPlan (shard_plan.h) gives each worker its
// read units for each epoch, so that every line is read by exactly one
// worker per epoch and no worker opens what is not its own: with at least as
// many files as workers, whole files dealt round-robin in the epoch's
// shuffled file order (each gzip file is decompressed once per epoch in the
// whole job); with fewer, plain files split at line boundaries into W byte
// ranges and gzip files dealt whole. Shares can differ by a file; a worker
// whose data ends first finishes first, which every consistency mode
// handles (a finished worker leaves the set of workers a step waits for).
//
// Shuffling. Epochs visit the files in a seeded order per epoch (shuffle),
// and lines go through a shuffle *window* of `shuffle_buffer` lines: the
// reader reads the next `shuffle_buffer` lines of its units (across unit
// boundaries, never across epochs), returns them in a Fisher-Yates order
// drawn from (shuffle_seed, epoch, where the window starts), then reads the
// next window. Unlike a sliding shuffle buffer (tf.data's), a window is
// rebuilt exactly from where it starts, so a position stays a few numbers.
// shuffle_buffer 0 or 1: lines in file order. Memory: the window's text,
// about shuffle_buffer x the mean line length.
//
// Positions. position() says where reading resumes (ReaderPosition in
// batch.h: epoch, unit, the line and byte offset where the current window
// starts, lines of it already returned, malformed lines so far). Seek() on a
// reader created with the same options (and the same files) re-reads that
// window and skips what was returned, so it resumes exactly after the last
// consumed line. A Batch carries the position after its last line, so a
// checkpoint can record the position of the last batch trained on.
// EncodePosition/DecodePosition give it a stable text form (for checkpoint
// manifests); positions of the previous format (v1, line stripes) are
// refused.
//
// Malformed lines (wrong column count, bad label, integer or hex id, too
// long) are counted when they come out of the window, logged as
// "file:line: what" (1-based line numbers; "file: line at byte O: what" in a
// byte range that does not start the file, where the line number is not
// known; the first 10, then every 1000th) and skipped. When their number
// exceeds `error_budget`, NextBatch fails with INVALID_ARGUMENT naming the
// file and line of the last one, and keeps failing until Seek().
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
#include "worker/data/shard_plan.h"

namespace shardps {
namespace data {

// The largest shuffle window, in lines (about 4 GiB of Criteo text).
inline constexpr uint64_t kMaxShuffleBuffer = uint64_t{1} << 24;

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
  uint64_t shuffle_buffer = 0;  // Lines per shuffle window; 0 or 1 = off.
                                // At most kMaxShuffleBuffer.
  size_t max_line_bytes = 1 << 20;
};

// Reader options for `files` from a job config: format, dense count, columns,
// fields (ResolveFields) and error budget from it; for `training`, epochs
// (training.epochs, 0 = 1), the file order shuffled and the shuffle window
// of data.shuffle_buffer lines, both seeded by training.shuffle_seed;
// otherwise (evaluation) one epoch in file order, no line shuffling. Errors of ResolveFields, or
// INVALID_ARGUMENT if rank >= num_workers.
absl::StatusOr<ReaderOptions> ReaderOptionsFromConfig(const JobConfig& config,
                                                      std::vector<std::string> files, uint32_t rank,
                                                      uint32_t num_workers, bool training);

// Text form of a position:
// "v2 epoch=E unit=U line=L offset=O taken=T bad=B samples=S" (a text
// without " samples=S", as written before it was recorded, decodes with 0).
std::string EncodePosition(const ReaderPosition& position);
// INVALID_ARGUMENT if `text` is not an EncodePosition result.
absl::StatusOr<ReaderPosition> DecodePosition(absl::string_view text);

class CriteoReader {
 public:
  // Validates `options` (INVALID_ARGUMENT naming the option), checks that
  // every file exists (NOT_FOUND naming it) and reads its size and first two
  // bytes (gzip or not) for the shard plan.
  static absl::StatusOr<std::unique_ptr<CriteoReader>> Create(ReaderOptions options);

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
  // with the same options). INVALID_ARGUMENT if it is out of range, its
  // offset is not a line start of that file or `taken` is not inside the
  // window; DATA_LOSS / NOT_FOUND from the file. Clears a failed state.
  // Blocks while it re-reads the window (up to shuffle_buffer lines).
  absl::Status Seek(const ReaderPosition& position);

  // The file indices (into options().files) in the order epoch `epoch`
  // visits them, and this worker's read units of that epoch.
  std::vector<size_t> FileOrder(uint64_t epoch) const { return plan_.FileOrder(epoch); }
  std::vector<ReadUnit> Units(uint64_t epoch) const { return plan_.Units(epoch); }

  // What this reader has read from disk since it was created.
  struct Stats {
    uint64_t bytes_decompressed = 0;  // Uncompressed bytes zlib produced.
    uint64_t bytes_read_plain = 0;    // Bytes read from plain files.
    uint64_t lines = 0;               // Lines taken into shuffle windows.
  };
  Stats stats() const;

  const ReaderOptions& options() const { return options_; }
  const std::vector<FieldSpec>& fields() const { return options_.fields; }
  uint64_t bad_lines() const { return bad_lines_; }

 private:
  // One line held in the shuffle window.
  struct Held {
    uint64_t unit;  // Ordinal in units_.
    uint64_t line;  // In the unit.
    uint64_t offset;
    size_t text_begin;  // In window_text_.
    uint32_t text_size;
    bool too_long;
  };

  CriteoReader(ReaderOptions options, ShardPlan plan);
  void StartEpoch(uint64_t epoch);
  // Where the next line of units_ will be read: (unit, line, offset).
  ReaderPosition Cursor() const;
  // Opens units_[unit_] at its first line, or at (offset, line) exactly.
  absl::Status OpenUnit(bool at_start, uint64_t offset, uint64_t line);
  void CloseUnit();
  // Reads the next window (up to shuffle_buffer lines, at least 1) of this
  // epoch from the cursor and draws its order; empty at the epoch's end.
  absl::Status FillWindow();
  // Parses the next line of the window into `batch`.
  absl::Status Emit(Batch* batch);
  // Counts and logs a malformed line; the budget error once exceeded.
  absl::Status BadLine(const Held& held, absl::string_view what);

  // Constant after construction.
  const ReaderOptions options_;
  const ShardPlan plan_;
  // Reading state.
  LineParser parser_;
  uint64_t epoch_ = 0;
  std::vector<ReadUnit> units_;         // plan_.Units(epoch_).
  uint64_t unit_ = 0;                   // The unit being read (ordinal in units_).
  std::unique_ptr<LineSource> source_;  // Null between units.
  Stats closed_;                        // Of the sources already closed.
  // The shuffle window: where it starts, its lines and their order, and
  // how many of them were returned.
  ReaderPosition window_start_;
  std::string window_text_;
  std::vector<Held> window_;
  std::vector<uint32_t> window_order_;
  uint64_t taken_ = 0;
  uint64_t bad_lines_ = 0;
  uint64_t samples_ = 0;  // Lines returned in batches from the data's start.
  absl::Status failed_;
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_CRITEO_READER_H_

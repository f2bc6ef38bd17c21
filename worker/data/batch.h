// A batch of parsed examples, and the reader position it ends at.
//
// A Batch is meant to be reused: Reset() clears it but keeps the capacity of
// every buffer, so filling it again does not allocate once it has grown.
//
// Layout for B = size examples:
//   labels  B floats (0 or 1)
//   dense   B x num_dense floats, row-major, already transformed
//           (log(1 + max(x, 0)); a missing value is 0)
//   fields  one CSR bag per categorical field, in ResolveFields order:
//           example i has keys[offsets[i] .. offsets[i+1]); offsets has B + 1
//           entries, offsets[0] = 0. A missing value is one MissingKey(f).
//
// Thread-compatible: no internal locking; one thread fills it at a time.
#ifndef SHARDPS_WORKER_DATA_BATCH_H_
#define SHARDPS_WORKER_DATA_BATCH_H_

#include <cstdint>
#include <vector>

namespace shardps {
namespace data {

// Where a reader is (see criteo_reader.h). Reading resumes at the shuffle
// window that starts at line `line` (0-based, counted from the unit's first
// line) at uncompressed byte `offset` of the `unit`-th read unit of epoch
// `epoch` (shard_plan.h), of which the first `taken` lines (in the window's
// shuffled order) were already returned. `unit` = the epoch's unit count
// with line = offset = 0 is the end of the epoch; line = offset = 0 is also
// the start of any unit. `bad_lines` is the number of malformed lines met
// so far (so a restored reader keeps its error budget); `samples` the
// number of lines returned in batches from the start of the data to here (so
// a worker resumed from a position counts every sample it trained). A
// default position is the start of the data.
struct ReaderPosition {
  uint64_t epoch = 0;
  uint64_t unit = 0;
  uint64_t line = 0;
  uint64_t offset = 0;
  uint64_t taken = 0;
  uint64_t bad_lines = 0;
  uint64_t samples = 0;

  bool operator==(const ReaderPosition& o) const {
    return epoch == o.epoch && unit == o.unit && line == o.line && offset == o.offset &&
           taken == o.taken && bad_lines == o.bad_lines && samples == o.samples;
  }
  bool operator!=(const ReaderPosition& o) const { return !(*this == o); }
};

// One categorical field's keys for a batch, in CSR form.
struct SparseBag {
  std::vector<int64_t> offsets;  // size + 1 entries.
  std::vector<uint64_t> keys;
};

struct Batch {
  int size = 0;
  int num_dense = 0;
  std::vector<float> labels;
  std::vector<float> dense;
  std::vector<SparseBag> fields;
  // The reader's position after the last line of this batch: restoring it
  // resumes with the line after.
  ReaderPosition end_position;

  // Empties the batch for `num_dense` dense features and `num_fields` bags,
  // keeping buffer capacity.
  void Reset(int num_dense_features, int num_fields) {
    size = 0;
    num_dense = num_dense_features;
    labels.clear();
    dense.clear();
    fields.resize(num_fields);
    for (SparseBag& bag : fields) {
      bag.offsets.assign(1, 0);
      bag.keys.clear();
    }
  }

  // Drops any partially appended example beyond `size` (used by the parser
  // to undo a line that turned out malformed).
  void Truncate() {
    labels.resize(size);
    dense.resize(static_cast<size_t>(size) * num_dense);
    for (SparseBag& bag : fields) {
      bag.offsets.resize(size + 1);
      bag.keys.resize(bag.offsets[size]);
    }
  }
};

}  // namespace data
}  // namespace shardps

#endif  // SHARDPS_WORKER_DATA_BATCH_H_

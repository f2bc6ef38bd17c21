// The trainer's data side (internal to worker/trainer): batches read and
// made ready for a step on a thread of their own, a few steps ahead.
//
// A Prepared step holds the batch, its keys deduplicated per model table
// (one dedup function for every mode: worker/model/dedup.h), each field's
// bags as indices into those unique keys, and the buffers the pull fills.
//
// Thread-safety: Preparer is not thread-safe. DataPipeline's Next and
// Recycle are called by one consumer thread; the pipeline reads on its own.
#ifndef SHARDPS_WORKER_TRAINER_DATA_H_
#define SHARDPS_WORKER_TRAINER_DATA_H_

#include <cstdint>
#include <deque>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/statusor.h"
#include "common/mutex.h"
#include "worker/data/batch.h"
#include "worker/data/criteo_reader.h"
#include "worker/model/dedup.h"
#include "worker/model/model.h"

namespace shardps {
namespace trainer_internal {

// A batch made ready for a step: keys deduplicated per table, bags as
// indices into the unique rows, buffers for the pulled rows. Reused.
struct Prepared {
  data::Batch batch;
  std::vector<std::vector<uint64_t>> unique_keys;  // Per model table.
  std::vector<std::vector<int64_t>> indices;       // Per field.
  std::vector<std::vector<float>> rows;            // Per model table.
  std::vector<float> dense_params;                 // Whole chunks.
  std::vector<TableRows> table_rows;
  std::vector<FieldBag> field_bags;
  // A split pull's two parts (worker/trainer_split_pull.h), per model table:
  // the keys of each part, their positions in unique_keys and their rows.
  struct PullPart {
    std::vector<std::vector<uint64_t>> keys;
    std::vector<std::vector<uint32_t>> pos;
    std::vector<std::vector<float>> rows;
    // kOwnWrites: each key's position in the previous step's unique keys.
    std::vector<std::vector<uint32_t>> prev_pos;
    // The rows carry their optimizer state (weights then state, per row):
    // kOwnWrites replayed, all of them; kUntouched with the cache, the
    // first `warm[t]` of each table (to be cached), the others without.
    bool with_state = false;
    std::vector<size_t> warm;
    // With the embedding cache: the minimum clock known when the part's
    // pull was sent (worker/embedding_cache.h).
    uint64_t read_clock = 0;
  };
  PullPart parts[2];  // [kUntouched], [kOwnWrites].
  // Replayed own writes: the dense chunks with their optimizer state.
  std::vector<float> dense_state;
  // Split with no previous step: every row not cached is in kUntouched,
  // which also pulls the dense chunks; kOwnWrites is empty.
  bool alone = false;
  // Split against the previous step and its kOwnWrites part replayed.
  bool own_replayed = false;
  // With the embedding cache: the positions in unique_keys served from it,
  // per model table (the parts hold the others), and the plan's scratch:
  // the misses to be cached, and those not (EmbeddingCache::PlanStep).
  std::vector<std::vector<uint32_t>> cache_hits;
  std::vector<std::vector<uint32_t>> cache_misses;
  std::vector<std::vector<uint32_t>> cache_cold;
};

// Turns batches into Prepared steps with one deduper per table.
class Preparer {
 public:
  // `spec` must outlive the Preparer.
  explicit Preparer(const ModelSpec& spec) : spec_(spec), dedup_(spec.tables.size()) {}

  // Fills p's keys, indices and row buffers from p->batch.
  void Prepare(Prepared* p);

 private:
  const ModelSpec& spec_;
  std::vector<KeyDeduper> dedup_;
};

// Reads and prepares batches on its own thread, up to `depth` ahead.
class DataPipeline {
 public:
  DataPipeline(std::unique_ptr<data::CriteoReader> reader, const ModelSpec& spec, int batch_size,
               int depth);
  ~DataPipeline();
  DataPipeline(const DataPipeline&) = delete;
  DataPipeline& operator=(const DataPipeline&) = delete;

  // The next prepared step (blocks); nullptr at the end of the data; the
  // reader's error once it failed.
  absl::StatusOr<std::unique_ptr<Prepared>> Next();

  // Gives a step's buffers back for reuse (null is ignored).
  void Recycle(std::unique_ptr<Prepared> p);

 private:
  void Loop();

  const std::unique_ptr<data::CriteoReader> reader_;
  Preparer preparer_;
  const int batch_size_;
  const int num_dense_;
  const size_t num_fields_;
  Mutex mu_;
  CondVar changed_;
  std::vector<std::unique_ptr<Prepared>> free_ ABSL_GUARDED_BY(mu_);
  std::deque<std::unique_ptr<Prepared>> ready_ ABSL_GUARDED_BY(mu_);
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  bool stop_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
  std::thread thread_;
};

}  // namespace trainer_internal
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_DATA_H_

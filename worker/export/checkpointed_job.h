// CheckpointedJob (tests only): a job's training state in this process,
// trained by hand (pushes, clocks, eviction sweeps) in a LOCAL parameter
// store with the model's dense weights, and checkpointed as the servers and
// the scheduler do it (StoreSnapshot, WriteSnapshot, a MANIFEST): FULL
// checkpoints and DELTA ones with their chain. Each checkpoint is also the
// servers' stream version of the same cut (server/version_log.h
// MakeVersionPart: one server holding every partition, in small chunks).
// For the tests of what serves a job's versions (worker/export/local_model,
// replica/).
//
// Failures are gtest failures (ASSERT/EXPECT); a test checks
// HasFatalFailure after a call.
//
// Thread-compatible.
#ifndef SHARDPS_WORKER_EXPORT_CHECKPOINTED_JOB_H_
#define SHARDPS_WORKER_EXPORT_CHECKPOINTED_JOB_H_

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "proto/config.pb.h"
#include "proto/ps.pb.h"

namespace shardps {

class ParamStore;
class TableStore;
class Trainer;

namespace export_testing {

// A small DLRM job with eviction and admission (shared unadmitted rows) on
// its sparse table, 16 partitions.
JobConfig SmallJobConfig();
constexpr uint32_t kSparseTable = 1, kDenseTable = 2, kSparseDim = 8;

// The key of index i that Train pushes.
inline uint64_t Key(uint64_t i) { return i * 7919 + 3; }

class CheckpointedJob {
 public:
  explicit CheckpointedJob(const JobConfig& config);
  ~CheckpointedJob();
  CheckpointedJob(const CheckpointedJob&) = delete;
  CheckpointedJob& operator=(const CheckpointedJob&) = delete;

  // Two pushes of keys Key(first) .. Key(last - 1) of the sparse table at
  // `clock` (admission needs two; the first one trains the shared rows);
  // the dense chunk 0 moves too.
  void Train(uint64_t clock, uint64_t first, uint64_t last);
  // The eviction sweep at `clock`: rows evicted.
  uint64_t Evict(uint64_t clock);
  // The checkpoint at `clock` under `root` (its MANIFEST's
  // created_unix_micros is `clock`): FULL without a base, else a delta on
  // `base`, the checkpoint before.
  void Checkpoint(const std::string& root, uint64_t clock, std::optional<uint64_t> base);

  // The stream version of each checkpoint written, by clock: its parts'
  // chunks (generation 1).
  using Parts = std::vector<std::shared_ptr<const VersionPart>>;
  const std::map<uint64_t, Parts>& versions() const { return versions_; }

 private:
  TableStore* store();

  const JobConfig config_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<Trainer> trainer_;
  uint32_t generation_ = 0;
  std::vector<std::string> chain_;
  std::map<uint64_t, Parts> versions_;
};

// A job's history as four checkpoints under `root`: FULL at
// 10, then DELTAs at 20, 30 and 40, each on the one before, with
// overwritten, new, evicted and re-admitted rows (shared rows move). Key(5)
// is served at 10, evicted before 20 and written again at 35; Key(320) is
// created after 10 and evicted at 30. Returns the stream versions.
std::map<uint64_t, CheckpointedJob::Parts> WriteFourVersions(const JobConfig& config,
                                                             const std::string& root);

}  // namespace export_testing
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_CHECKPOINTED_JOB_H_

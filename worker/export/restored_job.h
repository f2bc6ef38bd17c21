// A job's model restored from one of its checkpoints, in this process: the
// common first half of ps_score and ps_export.
//
// RestoreJob loads the job config, builds a LOCAL parameter store
// (worker/param_store.h) and a Trainer over it (the trainer's own model and
// evaluation code, on the CPU), then fills the store from the checkpoint
// (checkpoint_loader.h: every table's rows as the servers had them at the
// cut, all files verified first). Trainer::Evaluate then scores exactly as
// the trainer's evaluation at the checkpoint's clock does: evaluation pulls
// that never insert rows, unseen keys reading the table's initial value (with
// admission: the shared unadmitted row of their partition, restored from the
// checkpoint; server/table.h), the config's batch size.
//
// Errors: the config's (file:line), the checkpoint loader's (naming the
// checkpoint file or directory), the trainer's.
//
// Thread-compatible (the trainer is single-threaded).
#ifndef SHARDPS_WORKER_EXPORT_RESTORED_JOB_H_
#define SHARDPS_WORKER_EXPORT_RESTORED_JOB_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "worker/export/checkpoint_loader.h"
#include "worker/model/model.h"
#include "worker/param_store.h"
#include "worker/trainer.h"

namespace shardps {
namespace exporter {

struct RestoredJob {
  JobConfig config;  // Finalized.
  ModelSpec spec;
  // Members are destroyed bottom-up: the trainer before the store it uses.
  std::unique_ptr<ParamStore> params;  // Local; holds the restored tables.
  std::unique_ptr<Trainer> trainer;
  LoadedCheckpoint checkpoint;

  TableStore* store() const { return params->local_tables(); }
};

// `clock`: the checkpoint at that clock; nullopt: the latest complete one.
absl::StatusOr<std::unique_ptr<RestoredJob>> RestoreJob(const std::string& config_path,
                                                        const std::string& checkpoint_root,
                                                        std::optional<uint64_t> clock);

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_RESTORED_JOB_H_

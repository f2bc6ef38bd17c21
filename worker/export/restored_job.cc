#include "worker/export/restored_job.h"

#include <utility>

#include "common/config.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/export/best_checkpoint.h"

namespace shardps {
namespace exporter {

absl::StatusOr<std::unique_ptr<RestoredJob>> RestoreJob(const std::string& config_path,
                                                        const std::string& checkpoint_root,
                                                        std::optional<uint64_t> clock) {
  auto job = std::make_unique<RestoredJob>();
  ASSIGN_OR_RETURN(job->config, LoadJobConfig(config_path));
  ASSIGN_OR_RETURN(job->spec, ModelSpecFromConfig(job->config));
  ASSIGN_OR_RETURN(job->params, MakeLocalParamStore(job->config));
  TrainerOptions options;
  options.config = job->config;
  options.params = job->params.get();
  options.model_options.device = c10::Device(c10::DeviceType::CPU);
  ASSIGN_OR_RETURN(job->trainer, Trainer::Create(std::move(options)));
  const uint64_t chunk = job->config.cluster().dense_chunk_size();
  const uint64_t chunks = (job->trainer->NumDenseParams() + chunk - 1) / chunk;
  if (!clock) clock = BestCheckpointClock(checkpoint_root);  // Else the latest.
  ASSIGN_OR_RETURN(job->checkpoint,
                   RestoreCheckpoint(job->config, checkpoint_root, clock, chunks, job->store()));
  LOG(INFO) << "restored " << job->checkpoint.rows << " rows (" << job->checkpoint.bytes
            << " bytes) from " << job->checkpoint.dir << " (clock " << job->checkpoint.clock << ")";
  return job;
}

}  // namespace exporter
}  // namespace shardps

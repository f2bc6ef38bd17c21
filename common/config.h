// Loading and validating the job config (proto/config.proto).
//
// A config is text-format protobuf. Loading fills in the documented defaults
// and checks everything several processes must agree on; every error names
// the file, the line and the field, and says what is wrong:
//
//   job.pbtxt:12:5: tables[1] ("user_id").dim: must be > 0 for a SPARSE table
//
// Thread-safety: the functions are pure (LoadJobConfig reads a file).
#ifndef SHARDPS_COMMON_CONFIG_H_
#define SHARDPS_COMMON_CONFIG_H_

#include <cstdint>
#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/config.pb.h"

namespace shardps {

// Parses `text` (named `filename` in errors), fills defaults, validates.
// INVALID_ARGUMENT with file:line:field on any problem.
absl::StatusOr<JobConfig> ParseJobConfig(absl::string_view text, absl::string_view filename);

// Reads and parses `path`. NOT_FOUND if it cannot be read.
absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path);

// Fills defaults and validates an already-built config (e.g. after flags
// overrode fields). Errors name the field; there are no lines to name.
absl::Status FinalizeJobConfig(JobConfig* config);

// A 64-bit fingerprint of what every process of a job must agree on: tables,
// fields, model and the cluster's partitioning and consistency. Data paths,
// epochs and checkpoint settings are not part of it. Stable across processes
// and runs of the same build.
uint64_t ConfigFingerprint(const JobConfig& config);

// Whether the job evaluates checkpoints periodically (eval_every_steps or
// eval_every_epochs set; common/eval_cadence.h turns the latter into the
// former).
bool PeriodicEvaluation(const TrainingConfig& training);

// The fp32 elements of a DENSE table whose size neither its dense_size nor
// the servers' knowledge of the model fixes (a TORCHSCRIPT model's, a table
// no model reads): as many whole cluster.dense_chunk_size chunks as one
// cluster.max_message_bytes message of fp32 values holds (at least one).
uint64_t UnsizedDenseTableSize(const JobConfig& config);

// The table named `name`, or nullptr.
const TableConfig* FindTable(const JobConfig& config, absl::string_view name);

// The effective staleness of the config's mode: 0 for BSP, `staleness` for
// SSP, "unbounded" (UINT32_MAX) for ASP.
uint32_t EffectiveStaleness(const ClusterConfig& cluster);
// cluster.on_worker_loss, with its default for the mode when unset (WAIT for
// BSP, REASSIGN otherwise).
ClusterConfig::OnWorkerLoss EffectiveOnWorkerLoss(const ClusterConfig& cluster);

}  // namespace shardps

#endif  // SHARDPS_COMMON_CONFIG_H_

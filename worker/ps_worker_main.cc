// ps_worker: trains on its share of the data.
//
//   ps_worker --config job.pbtxt --scheduler host:port [--rank N]   PS mode
//   ps_worker --config job.pbtxt --local                            local mode
//
// What each mode does, and the exit statuses: worker/ps_worker.h.
#include <string>

#include "absl/flags/flag.h"
#include "common/config.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/metrics.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "worker/ps_worker.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config. Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, scheduler, shardps::EnvOr("SHARDPS_SCHEDULER", ""),
          "Scheduler host:port (PS mode). Env: SHARDPS_SCHEDULER.");
ABSL_FLAG(bool, local, false, "Local mode: tables in this process, no servers.");
ABSL_FLAG(int, rank, std::stoi(shardps::EnvOr("SHARDPS_INDEX", "-1")),
          "Worker rank to ask for (-1: any). Env: SHARDPS_INDEX (e.g. the "
          "Kubernetes completion index).");
ABSL_FLAG(std::string, device, "auto", "auto, cpu or cuda.");
ABSL_FLAG(uint64_t, max_steps, 0,
          "Stop at this clock (0: training.max_steps, or the data's end); a restarted "
          "worker stops at the same clock.");
ABSL_FLAG(std::string, loss_log, "", "Write per-step losses here.");
ABSL_FLAG(bool, checksum, false,
          "Print a checksum of the final weights of the rows this worker "
          "trained (tests: determinism and local/PS parity).");
ABSL_FLAG(int, step_delay_ms, 0, "Testing: sleep this long in every step.");
ABSL_FLAG(std::string, wire, "fp32", "Values on the wire: fp32, fp16 or bf16.");
ABSL_FLAG(std::string, testing_exit_mid_push, "",
          "Testing: RANK:CLOCK:MARKER. Worker RANK pushes step CLOCK to one server "
          "only and exits (code 86), as one killed between its pushes; only while "
          "file MARKER does not exist (it is created first).");

namespace {

shardps::WorkerOptions Options() {
  shardps::WorkerOptions o;
  o.config_path = absl::GetFlag(FLAGS_config);
  o.scheduler = absl::GetFlag(FLAGS_scheduler);
  o.rank = absl::GetFlag(FLAGS_rank);
  o.device = absl::GetFlag(FLAGS_device);
  o.max_steps = absl::GetFlag(FLAGS_max_steps);
  o.loss_log = absl::GetFlag(FLAGS_loss_log);
  o.checksum = absl::GetFlag(FLAGS_checksum);
  o.step_delay_ms = absl::GetFlag(FLAGS_step_delay_ms);
  o.wire = absl::GetFlag(FLAGS_wire);
  o.testing_exit_mid_push = absl::GetFlag(FLAGS_testing_exit_mid_push);
  return o;
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "ps_worker --config job.pbtxt (--scheduler host:port | --local)");
  shardps::TuneMallocForLargeMessages();
  if (absl::Status st = shardps::InitTlsFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  if (absl::Status st = shardps::InitJobSecretFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  auto config = shardps::LoadJobConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    LOG(ERROR) << config.status().message();
    return 2;
  }
  if (absl::Status st = shardps::metrics::StartExposerFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  if (absl::GetFlag(FLAGS_local)) return shardps::RunLocalWorker(*std::move(config), Options());
  if (absl::GetFlag(FLAGS_scheduler).empty()) {
    LOG(ERROR) << "give --scheduler host:port (or --local)";
    return 2;
  }
  return shardps::RunPsWorker(*std::move(config), Options());
}

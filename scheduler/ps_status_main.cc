// ps_status: prints a running job's status from its scheduler.
//
//   ps_status --scheduler host:port [--json]
#include <cstdio>

#include "absl/flags/flag.h"
#include "common/init.h"
#include "google/protobuf/util/json_util.h"
#include "scheduler/client.h"

ABSL_FLAG(std::string, scheduler, shardps::EnvOr("SHARDPS_SCHEDULER", ""),
          "Scheduler address host:port. Env: SHARDPS_SCHEDULER.");
ABSL_FLAG(bool, json, false, "Print the raw status as JSON.");

namespace {

const char* StateName(shardps::MemberState s) {
  switch (s) {
    case shardps::ALIVE: return "alive";
    case shardps::DEAD: return "DEAD";
    case shardps::FINISHED: return "finished";
    default: return "not registered";
  }
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_status --scheduler host:port");
  shardps::SchedulerClient client(absl::GetFlag(FLAGS_scheduler));
  auto status = client.JobStatus();
  if (!status.ok()) {
    std::fprintf(stderr, "ps_status: %s\n", std::string(status.status().message()).c_str());
    return 1;
  }
  if (absl::GetFlag(FLAGS_json)) {
    std::string json;
    (void)google::protobuf::util::MessageToJsonString(*status, &json);
    std::printf("%s\n", json.c_str());
    return 0;
  }
  std::printf("job %s: %s, clocks min %llu max %llu (largest spread %llu), "
              "%.0f samples/s, train loss %.4f, eval AUC %.4f\n",
              status->job_name().c_str(), status->state().c_str(),
              (unsigned long long)status->min_clock(),
              (unsigned long long)status->max_clock(),
              (unsigned long long)status->max_spread(), status->samples_per_sec(),
              status->train_loss(), status->eval_auc());
  for (const auto& m : status->members()) {
    std::printf("  %-6s %2u  %-9s %-21s clock %-8llu heartbeat %.1fs ago\n",
                m.role() == shardps::SERVER ? "server" : "worker", m.index(),
                StateName(m.state()), m.address().c_str(),
                (unsigned long long)m.clock(), m.last_heartbeat_age_sec());
  }
  return 0;
}

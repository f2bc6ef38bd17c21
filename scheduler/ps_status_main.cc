// ps_status: prints a running job's status from its scheduler.
//
//   ps_status --scheduler host:port [--json]
//   ps_status --scheduler host:port --checkpoint [--timeout_sec 600]
//   ps_status --scheduler host:port --servers N [--timeout_sec 600]
//
// --checkpoint asks the scheduler for a checkpoint now (the consistent cut at
// the first clock no worker has started) and waits until it is written.
// --servers moves partitions so that the job runs on N servers, at the first
// clock no worker has started (docs/design.md, "Resharding"), and waits for
// the move.
// Exit status: 0 done, 1 the scheduler refused or could not be reached, 2 bad
// flags (no --scheduler: a one-line usage error).
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "common/client/scheduler_client.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/tls.h"
#include "google/protobuf/util/json_util.h"

ABSL_FLAG(std::string, scheduler, shardps::EnvOr("SHARDPS_SCHEDULER", ""),
          "Scheduler address host:port. Env: SHARDPS_SCHEDULER.");
ABSL_FLAG(bool, json, false, "Print the raw status as JSON.");
ABSL_FLAG(bool, checkpoint, false,
          "Take a checkpoint now and wait until it is written; prints its clock.");
ABSL_FLAG(int32_t, timeout_sec, 600, "With --checkpoint or --servers: how long to wait.");
ABSL_FLAG(int32_t, servers, 0,
          "Move partitions so that the job runs on this many servers (at the next clock "
          "boundary; servers beyond the current ones must have registered, cluster.max_servers); "
          "waits for the move and prints it.");

namespace {

const char* StateName(shardps::MemberState s) {
  switch (s) {
    case shardps::ALIVE:
      return "alive";
    case shardps::DEAD:
      return "DEAD";
    case shardps::FINISHED:
      return "finished";
    default:
      return "not registered";
  }
}

// --checkpoint: a checkpoint now, and its clock.
int AskCheckpoint(shardps::SchedulerClient* client) {
  auto clock = client->CheckpointNow(absl::Seconds(absl::GetFlag(FLAGS_timeout_sec)));
  if (!clock.ok()) {
    std::fprintf(stderr, "ps_status: checkpoint: %s\n", clock.status().ToString().c_str());
    return 1;
  }
  std::printf("checkpoint at clock %llu written\n", (unsigned long long)*clock);
  return 0;
}

// --servers N: a move to N servers, and what it moved.
int AskReshard(shardps::SchedulerClient* client, int32_t servers) {
  if (servers < 0) {
    std::fprintf(stderr, "ps_status: --servers must be positive\n");
    return 2;
  }
  auto moved = client->Reshard(static_cast<uint32_t>(servers),
                               absl::Seconds(absl::GetFlag(FLAGS_timeout_sec)));
  if (!moved.ok()) {
    std::fprintf(stderr, "ps_status: reshard: %s\n", moved.status().ToString().c_str());
    return 1;
  }
  std::printf("%u servers: %u partitions moved at clock %llu, map version %llu\n", servers,
              moved->partitions_moved(), (unsigned long long)moved->clock(),
              (unsigned long long)moved->map_version());
  return 0;
}

// The job's state, its members, moves, cuts and recoveries, for people.
void PrintStatus(const shardps::JobStatusResponse& status) {
  std::printf(
      "job %s: %s, clocks min %llu max %llu (largest spread %llu), "
      "%.0f samples/s, train loss %.4f, eval AUC %.4f\n",
      status.job_name().c_str(), status.state().c_str(), (unsigned long long)status.min_clock(),
      (unsigned long long)status.max_clock(), (unsigned long long)status.max_spread(),
      status.samples_per_sec(), status.train_loss(), status.eval_auc());
  for (const auto& m : status.members()) {
    std::printf("  %-6s %2u  %-9s %-21s clock %-8llu heartbeat %.1fs ago%s%s\n",
                m.role() == shardps::SERVER ? "server" : "worker", m.index(), StateName(m.state()),
                m.address().c_str(), (unsigned long long)m.clock(), m.last_heartbeat_age_sec(),
                m.restarts() ? (", restarted " + std::to_string(m.restarts()) + "x").c_str() : "",
                m.reason().empty() ? "" : (" (" + m.reason() + ")").c_str());
  }
  if (status.reshards() > 0) {
    std::printf("partition map version %llu on %u servers: %u reshards moved %llu partitions\n",
                (unsigned long long)status.map_version(), status.map_servers(), status.reshards(),
                (unsigned long long)status.partitions_moved());
  }
  if (status.last_checkpoint_hold_sec() > 0) {
    std::printf(
        "last checkpoint: workers held %.3f s (copy), files written in %.3f s behind "
        "them\n",
        status.last_checkpoint_hold_sec(), status.last_checkpoint_write_sec());
  }
  if (status.versions() > 0) {
    std::printf(
        "versions between checkpoints: %llu, the last at clock %llu (workers held %.3f s)\n",
        (unsigned long long)status.versions(), (unsigned long long)status.last_version(),
        status.last_version_hold_sec());
  }
  for (const auto& r : status.recoveries()) {
    std::printf("recovery: %s (%s): restarted at clock %llu%s, generation %llu; ", r.kind().c_str(),
                r.cause().c_str(), (unsigned long long)r.clock(),
                r.initial() ? " (initial values)" : "", (unsigned long long)r.generation());
    if (r.complete()) {
      std::printf("%.2f s = detect %.2f + wait %.2f + restore %.2f + rewind %.2f\n", r.total_sec(),
                  r.detect_sec(), r.wait_sec(), r.restore_sec(), r.rewind_sec());
    } else {
      std::printf("in progress\n");
    }
  }
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_status --scheduler host:port");
  if (absl::Status st = shardps::InitTlsFromFlags(); !st.ok()) {
    std::fprintf(stderr, "ps_status: %s\n", st.ToString().c_str());
    return 2;
  }
  if (absl::Status st = shardps::InitJobSecretFromFlags(); !st.ok()) {
    std::fprintf(stderr, "ps_status: %s\n", st.ToString().c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_scheduler).empty()) {
    std::fprintf(stderr,
                 "ps_status: no scheduler: give --scheduler host:port (or SHARDPS_SCHEDULER)\n");
    return 2;
  }
  shardps::SchedulerClient client(absl::GetFlag(FLAGS_scheduler));
  if (absl::GetFlag(FLAGS_checkpoint)) return AskCheckpoint(&client);
  if (const int32_t servers = absl::GetFlag(FLAGS_servers); servers != 0) {
    return AskReshard(&client, servers);
  }
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
  PrintStatus(*status);
  return 0;
}

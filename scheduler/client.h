// SchedulerClient: what servers and workers call on the scheduler.
//
// Calls are blocking with deadlines. UNAVAILABLE (scheduler not up yet, or
// restarting) is retried with backoff inside Register; other calls return
// the status for the caller to decide. The heartbeat thread calls `on_stop`
// once, with a reason, when the scheduler says the job ended, when it
// declared this process dead, or when it has been unreachable for
// `give_up_after`.
//
// Thread-safe: one client may be used from several threads.
#ifndef SHARDPS_SCHEDULER_CLIENT_H_
#define SHARDPS_SCHEDULER_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "proto/scheduler.grpc.pb.h"

namespace shardps {

class SchedulerClient {
 public:
  explicit SchedulerClient(const std::string& address);
  ~SchedulerClient();
  SchedulerClient(const SchedulerClient&) = delete;
  SchedulerClient& operator=(const SchedulerClient&) = delete;

  // Registers, retrying UNAVAILABLE and DEADLINE_EXCEEDED until `timeout`;
  // ALREADY_EXISTS too (a restarted process waits for its old self to be
  // declared dead).
  absl::StatusOr<RegisterResponse> Register(const RegisterRequest& request,
                                            absl::Duration timeout);

  // Starts heartbeats every `period`. `on_stop(reason)` is called at most
  // once, from the heartbeat thread.
  void StartHeartbeats(Role role, uint32_t index, uint64_t job_id,
                       absl::Duration period, absl::Duration give_up_after,
                       std::function<void(const std::string&)> on_stop);

  absl::StatusOr<PartitionMapProto> GetPartitionMap(uint64_t min_version,
                                                    absl::Duration timeout);
  absl::Status WaitClock(uint32_t rank, uint64_t step, absl::Duration timeout);
  // `position`: the worker's data position after step clock-1 (recorded in
  // checkpoints at `clock`); may be empty.
  absl::Status Tick(uint32_t rank, uint64_t clock, const std::string& position = "");
  absl::Status Barrier(const std::string& name, uint32_t rank,
                       absl::Duration timeout);
  absl::Status ReportMetrics(const MetricsReport& report);
  absl::StatusOr<JobStatusResponse> JobStatus();

 private:
  std::unique_ptr<Scheduler::Stub> stub_;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CLIENT_H_

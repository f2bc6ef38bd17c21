// SchedulerClient: what servers and workers call on the scheduler.
//
// Calls are blocking with deadlines. UNAVAILABLE (scheduler not up yet, or
// restarting) is retried with backoff inside Register, and in every other
// call for up to `unreachable_budget` (then returned). The heartbeat thread
// calls `on_stop` once, with a reason, when the scheduler says the job
// ended, when it declared this process dead, or when it has been
// unreachable for `give_up_after`.
//
// Scheduler restarts (ps_scheduler --recover): with EnableRejoin, when a
// heartbeat answer says the scheduler does not know this process, the
// heartbeat thread registers again with RegisterRequest.rejoin carrying the
// last acknowledged tick (clock and data position), the largest step
// WaitClock granted, and the largest map version seen; the other calls
// retry their UNAVAILABLE meanwhile.
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
#include "common/mutex.h"
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
  // Asks for a checkpoint now; returns its clock once written.
  absl::StatusOr<uint64_t> CheckpointNow(absl::Duration timeout);

  // Call before StartHeartbeats. `base`: the process's registration
  // (role, address, fingerprint) with requested_index set to its index.
  // `map_version`: the map version the process holds (servers; may be null).
  void EnableRejoin(RegisterRequest base, std::function<uint64_t()> map_version);
  // A worker that resumed at `clock` from `position` (its state to rejoin
  // with until its first tick).
  void NoteResume(uint64_t clock, const std::string& position);
  // How long calls retry UNAVAILABLE (default 60 s).
  void set_unreachable_budget(absl::Duration d) { unreachable_budget_ = d; }

 private:
  // Runs `call` until it returns something other than UNAVAILABLE or the
  // budget is spent.
  absl::Status Retrying(const char* what, const std::function<absl::Status()>& call);
  void RejoinNow();

  std::unique_ptr<Scheduler::Stub> stub_;
  absl::Duration unreachable_budget_ = absl::Seconds(60);
  // What a rejoin reports.
  mutable Mutex mu_;
  std::optional<RegisterRequest> rejoin_base_ ABSL_GUARDED_BY(mu_);
  std::function<uint64_t()> map_version_ ABSL_GUARDED_BY(mu_);
  uint64_t acked_clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::string acked_position_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> granted_ ABSL_GUARDED_BY(mu_);
  uint64_t map_version_seen_ ABSL_GUARDED_BY(mu_) = 0;
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_CLIENT_H_

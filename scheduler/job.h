// The job coordinator: the scheduler's gRPC-free core. It ties membership,
// the clock service, barriers, metrics and the job's lifecycle together; the
// gRPC service (scheduler_service.h) is a thin shell over it.
//
// Lifecycle: "waiting" until every server and worker has registered once,
// then "running"; "done" when every worker has sent its final report or died
// (at least one finished); "failed: <why>" when a server stays dead past
// cluster.server_deadline_ms. Heartbeat answers carry stop = true once the
// job ended, so servers and workers exit.
//
// Failure detection: Sweep() (called periodically by Start()'s thread)
// declares silent members dead. A dead worker leaves the clock minimum; the
// servers are told the new set of active workers (BSP closes clocks over
// it) through the notifier. A dead server pauses every worker's next start
// until it registers again or the deadline passes.
//
// Thread-safe. Blocking calls (GetPartitionMap, WaitClock, Barrier, WaitDone)
// take deadlines.
#ifndef SHARDPS_SCHEDULER_JOB_H_
#define SHARDPS_SCHEDULER_JOB_H_

#include <atomic>
#include <functional>
#include <map>
#include <optional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"
#include "scheduler/clock.h"
#include "scheduler/membership.h"

namespace shardps {

class JobCoordinator {
 public:
  // Called (outside locks) when servers must learn a new active-worker set
  // or partition map: (map, active worker ranks).
  using ServerNotifier = std::function<void(const PartitionMapProto& map,
                                            const std::vector<uint32_t>& active)>;

  // Writes a checkpoint at `clock` (every worker is held there; all pushes of
  // steps < clock are acknowledged), recording `positions` (rank -> data
  // position after step clock-1). Called from the checkpoint thread.
  using Checkpointer = std::function<absl::Status(
      uint64_t clock, const std::map<uint32_t, std::string>& positions)>;

  // A job resumed from a checkpoint: every worker restarts at `clock` from
  // its recorded position; `restore` is called once every server has
  // registered, before any worker may start.
  struct Resume {
    uint64_t clock = 0;
    std::map<uint32_t, std::string> positions;
    std::function<absl::Status()> restore;
  };

  JobCoordinator(JobConfig config, ServerNotifier notifier);
  ~JobCoordinator();
  JobCoordinator(const JobCoordinator&) = delete;
  JobCoordinator& operator=(const JobCoordinator&) = delete;

  // Starts the failure-detection thread (and the checkpoint thread if a
  // checkpointer is set and checkpoint.every_steps / every_seconds > 0).
  void Start();

  // Call before Start().
  void SetCheckpointer(Checkpointer checkpointer);
  void SetResume(Resume resume);
  // Asks for a checkpoint as soon as possible (at max granted step + 1).
  void RequestCheckpoint();
  // Clocks of the checkpoints written so far.
  std::vector<uint64_t> Checkpoints() const;
  // The partition map once every server has registered.
  std::optional<PartitionMapProto> Map() const { return members_.Map(); }

  absl::Status Register(const RegisterRequest& request, RegisterResponse* response);
  absl::Status Heartbeat(const HeartbeatRequest& request, HeartbeatResponse* response);
  absl::Status GetPartitionMap(const GetPartitionMapRequest& request,
                               PartitionMapProto* response);
  absl::Status WaitClock(const WaitClockRequest& request, WaitClockResponse* response);
  absl::Status Tick(const TickRequest& request, TickResponse* response);
  // Blocks until every worker has entered barrier `name`, finished (reported
  // done) or died.
  absl::Status Barrier(const BarrierRequest& request);
  absl::Status ReportMetrics(const MetricsReport& report);
  void JobStatus(JobStatusResponse* response) const;

  // One failure-detection pass at `now` (public for tests).
  void Sweep(absl::Time now);

  // Blocks until the job is done (OK) or failed (ABORTED with the reason), or
  // `deadline` (DEADLINE_EXCEEDED).
  absl::Status WaitDone(absl::Time deadline);

  ClockService& clock() { return clock_; }

 private:
  void CheckpointLoop();
  // Holds the clock at the first every_steps multiple nobody has started.
  void HoldFirstCut();
  bool ReadyLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  enum class State { kWaiting, kRunning, kDone, kFailed };

  void NotifyServers();
  void UpdateStateLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  bool AllRegisteredOnce() const;
  std::string SummaryLocked() const ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const JobConfig config_;
  const uint64_t fingerprint_;
  const ServerNotifier notifier_;
  const absl::Time start_time_;

  Membership members_;
  ClockService clock_;

  mutable Mutex mu_;
  CondVar changed_;
  State state_ ABSL_GUARDED_BY(mu_) = State::kWaiting;
  std::string failure_ ABSL_GUARDED_BY(mu_);
  std::map<uint32_t, MetricsReport> reports_ ABSL_GUARDED_BY(mu_);
  std::vector<bool> final_ ABSL_GUARDED_BY(mu_);
  std::map<std::string, std::vector<bool>> barriers_ ABSL_GUARDED_BY(mu_);
  // Latest (clock, data position) each worker reported with a tick.
  std::map<uint32_t, std::pair<uint64_t, std::string>> positions_ ABSL_GUARDED_BY(mu_);
  Checkpointer checkpointer_;
  std::optional<Resume> resume_;
  bool restored_ ABSL_GUARDED_BY(mu_) = false;  // Resume: servers restored.
  bool checkpoint_requested_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::thread checkpointer_thread_;

  std::atomic<bool> stop_{false};
  std::thread sweeper_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_H_

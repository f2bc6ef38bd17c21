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
#include "absl/status/statusor.h"
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
  // A restarted scheduler taking over a running job (ps_scheduler
  // --recover): the live servers and workers rejoin (RegisterRequest.rejoin)
  // with their clocks, data positions and map versions; nothing is rolled
  // back. Until a worker has rejoined, its clock calls get UNAVAILABLE (it
  // retries); the job fails if someone has not rejoined within
  // cluster.server_deadline_ms. `last_checkpoint` is the clock of the last
  // complete checkpoint (0 if none): the next cut comes after it.
  void SetRecover(uint64_t last_checkpoint);
  // checkpoint.recovery PARTIAL (SSP/ASP): a server that registers again
  // after dying gets `restore(index, address)` (its partitions from the last
  // complete checkpoint) before the clocks resume. Inexact: the other
  // servers' partitions and the workers do not roll back. Call before Start().
  using ServerRestorer = std::function<absl::Status(uint32_t index, const std::string& address)>;
  void SetPartialRecovery(ServerRestorer restore);
  // Asks for a checkpoint as soon as possible: at the first clock no worker
  // has started (which may move an every_steps hold earlier).
  void RequestCheckpoint();
  // RequestCheckpoint, then blocks until a checkpoint placed after the
  // request is written. Returns its clock, the checkpointer's error,
  // FAILED_PRECONDITION if checkpoints are off or the job ended first, or
  // DEADLINE_EXCEEDED (the checkpoint still happens later).
  absl::StatusOr<uint64_t> CheckpointNow(absl::Time deadline);
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
  // Recover mode: UNAVAILABLE until worker `rank` has rejoined.
  absl::Status CheckRejoined(uint32_t rank) const;
  void ApplyRejoin(const RegisterRequest& request, uint32_t index);
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
  std::optional<uint64_t> recover_;
  ServerRestorer partial_restore_;
  Mutex partial_mu_;  // Taken before mu_, never after.
  std::thread partial_thread_ ABSL_GUARDED_BY(partial_mu_);  // A partial restore.  // SetRecover: the last checkpoint's clock.
  bool restored_ ABSL_GUARDED_BY(mu_) = false;  // Resume: servers restored.
  // On-demand checkpoints: requests made, and the last request a completed
  // cut served (cuts are placed after the requests they serve).
  uint64_t requested_seq_ ABSL_GUARDED_BY(mu_) = 0;
  uint64_t completed_seq_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status last_cut_status_ ABSL_GUARDED_BY(mu_);
  uint64_t last_cut_clock_ ABSL_GUARDED_BY(mu_) = 0;
  bool cut_loop_over_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<uint64_t> checkpoints_ ABSL_GUARDED_BY(mu_);
  std::thread checkpointer_thread_;

  std::atomic<bool> stop_{false};
  std::thread sweeper_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_JOB_H_

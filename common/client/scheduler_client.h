// SchedulerClient: what servers and workers call on the scheduler.
//
// Calls are blocking with deadlines. UNAVAILABLE (scheduler not up yet, or
// restarting) is retried with backoff inside Register and WaitStart, and in
// every other call for up to `unreachable_budget` (then returned). The
// heartbeat thread calls `on_stop` once, with a reason, when the scheduler
// says the job ended, when another process took this one's slot, or when
// it has been unreachable for `give_up_after`.
//
// One client is one process: it draws a random incarnation at construction
// and sends it with every registration and heartbeat (membership.h). The
// calls that must belong to the job's current generation (WaitClock, Tick,
// Barrier, ReportMetrics) carry set_generation()'s value.
//
// Rejoining: with EnableRejoin, when a heartbeat answer says the scheduler
// does not know this process (it restarted) or declared it dead, the
// heartbeat thread registers again with RegisterRequest.rejoin carrying the
// last acknowledged tick (clock and data position), the largest step
// WaitClock granted, the largest map version seen, the generation, and
// whether it finished (with its last report); the other calls retry their
// UNAVAILABLE meanwhile.
//
// Thread-safe: one client may be used from several threads.
#ifndef SHARDPS_COMMON_CLIENT_SCHEDULER_CLIENT_H_
#define SHARDPS_COMMON_CLIENT_SCHEDULER_CLIENT_H_

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <utility>

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
  absl::StatusOr<RegisterResponse> Register(const RegisterRequest& request, absl::Duration timeout);

  // Starts heartbeats every `period`. `on_stop(job_ended, reason)` is
  // called at most once, from the heartbeat thread; job_ended: the scheduler
  // says the job is over (reason says how), else this process must stop.
  void StartHeartbeats(Role role, uint32_t index, uint64_t job_id, absl::Duration period,
                       absl::Duration give_up_after,
                       std::function<void(bool job_ended, const std::string& reason)> on_stop);

  // Where worker `rank` (re)starts: blocks until the scheduler has a start
  // point newer than `after_generation` (any, if unset) or the job ended
  // (job_ended set: also when the heartbeats saw the end first). Waits in
  // slices, retrying UNAVAILABLE, for at most `timeout`; DEADLINE_EXCEEDED
  // then names what the scheduler waits for.
  absl::StatusOr<WaitStartResponse> WaitStart(uint32_t rank,
                                              std::optional<uint64_t> after_generation,
                                              absl::Duration timeout);

  absl::StatusOr<PartitionMapProto> GetPartitionMap(uint64_t min_version, absl::Duration timeout);
  absl::Status WaitClock(uint32_t rank, uint64_t step, absl::Duration timeout);
  // `position`: the worker's data position after step clock-1 (recorded in
  // checkpoints at `clock`); may be empty.
  // `samples`: TickRequest.samples.
  absl::Status Tick(uint32_t rank, uint64_t clock, const std::string& position = "",
                    uint64_t samples = 0);
  // `adopt` (may be null): set to BarrierResponse.adopt_rank when the
  // scheduler answers with a lost share to train first (the barrier was not
  // passed).
  absl::Status Barrier(const std::string& name, uint32_t rank, absl::Duration timeout,
                       std::optional<uint32_t>* adopt = nullptr);
  absl::Status ReportMetrics(const MetricsReport& report);
  // Asks the scheduler to roll the job back to its last complete checkpoint
  // (RollBackRequest): step `clock` cannot be redone exactly.
  absl::Status RequestRollBack(uint32_t rank, uint64_t clock, const std::string& cause);
  absl::StatusOr<JobStatusResponse> JobStatus();
  // Asks for a checkpoint now; returns its clock once written.
  absl::StatusOr<uint64_t> CheckpointNow(absl::Duration timeout);
  // ps_status --servers: moves partitions so that the job runs on `servers`
  // servers (scheduler.proto ReshardRequest); waits up to `timeout`.
  absl::StatusOr<ReshardResponse> Reshard(uint32_t servers, absl::Duration timeout);
  // Periodic evaluation (JobCoordinator::Evaluation): reports `request`'s
  // result, if any, and waits up to `timeout` for a checkpoint to evaluate.
  // Fills rank-independent fields (incarnation, timeout); retries
  // UNAVAILABLE.
  absl::StatusOr<EvaluationResponse> Evaluation(EvaluationRequest request, absl::Duration timeout);

  // Call before StartHeartbeats. `base`: the process's registration
  // (role, address, fingerprint) with requested_index set to its index.
  // `map_version`: the map version the process holds (servers; may be null).
  // `generation`: the job generation the process is in (servers: the one
  // its tables were restored into; null: set_generation's value).
  // `on_rejoined`: called with the scheduler's answer after each successful
  // rejoin (servers adopt its control_token; may be null). `add_state`:
  // adds the process's own state to each rejoin (servers: the owners of
  // their map; may be null).
  void EnableRejoin(RegisterRequest base, std::function<uint64_t()> map_version,
                    std::function<uint64_t()> generation = nullptr,
                    std::function<void(const RegisterResponse&)> on_rejoined = nullptr,
                    std::function<void(Rejoin*)> add_state = nullptr);
  // A worker that (re)started at `clock` from `position` in `generation`
  // (its state to rejoin with until its first tick; clock calls carry the
  // generation from now on).
  void NoteStart(uint64_t generation, uint64_t clock, const std::string& position);
  void set_generation(uint64_t generation) { generation_ = generation; }
  uint64_t generation() const { return generation_; }
  // The job's minimum clock in the last WaitClock or Tick answer, if that
  // call was of the current generation (set_generation's); else nullopt.
  std::optional<uint64_t> min_clock() const;
  // The newest generation heartbeat answers reported (0 before any).
  uint64_t scheduler_generation() const { return scheduler_generation_; }
  // Whether the heartbeats saw the job end, and why it failed if it did.
  bool job_ended() const { return job_ended_; }
  uint64_t incarnation() const { return incarnation_; }

 private:
  // Runs `call` until it returns something other than UNAVAILABLE or the
  // budget is spent.
  absl::Status Retrying(const char* what, const std::function<absl::Status()>& call);
  // Registers again with the state to rejoin with; the scheduler's refusal.
  absl::Status RejoinNow();

  std::unique_ptr<Scheduler::Stub> stub_;
  const uint64_t incarnation_;
  std::atomic<uint64_t> generation_{0};
  std::atomic<uint64_t> scheduler_generation_{0};
  std::atomic<bool> job_ended_{false};
  const absl::Duration unreachable_budget_ = absl::Seconds(60);  // Calls retry UNAVAILABLE.
  // What a rejoin reports.
  mutable Mutex mu_;
  std::optional<RegisterRequest> rejoin_base_ ABSL_GUARDED_BY(mu_);
  std::function<uint64_t()> map_version_ ABSL_GUARDED_BY(mu_);
  std::function<void(Rejoin*)> add_rejoin_state_ ABSL_GUARDED_BY(mu_);
  std::function<uint64_t()> generation_source_ ABSL_GUARDED_BY(mu_);
  std::function<void(const RegisterResponse&)> on_rejoined_ ABSL_GUARDED_BY(mu_);
  uint64_t acked_clock_ ABSL_GUARDED_BY(mu_) = 0;
  std::string acked_position_ ABSL_GUARDED_BY(mu_);
  std::optional<uint64_t> granted_ ABSL_GUARDED_BY(mu_);
  uint64_t map_version_seen_ ABSL_GUARDED_BY(mu_) = 0;
  bool finished_ ABSL_GUARDED_BY(mu_) = false;
  std::optional<MetricsReport> last_report_ ABSL_GUARDED_BY(mu_);
  // (generation, min_clock) of the last WaitClock or Tick answer.
  std::optional<std::pair<uint64_t, uint64_t>> min_clock_ ABSL_GUARDED_BY(mu_);
  std::atomic<bool> stop_{false};
  std::thread heartbeat_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_CLIENT_SCHEDULER_CLIENT_H_

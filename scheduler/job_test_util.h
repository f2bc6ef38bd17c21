// Test helpers for the job coordinator (job.h): fake servers that record
// what the coordinator asks of them and keep real checkpoint files, a small
// job config, and workers driven by hand through the coordinator's
// requests. Test-only.
#ifndef SHARDPS_SCHEDULER_JOB_TEST_UTIL_H_
#define SHARDPS_SCHEDULER_JOB_TEST_UTIL_H_

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/manifest.h"
#include "common/config.h"
#include "common/mutex.h"
#include "gtest/gtest.h"
#include "scheduler/checkpoint_chain.h"
#include "scheduler/job.h"
#include "scheduler/server_ops.h"

namespace shardps::testing {

// A new path under the test's temporary directory, unique per call and
// absent (a checkpoint.dir the scheduler or its fake servers create).
inline std::string FreshCheckpointDir(const std::string& label) {
  static std::atomic<int> next{0};
  const std::string dir = ::testing::TempDir() + "/" + label + "_" + std::to_string(getpid()) +
                          "_" + std::to_string(next++);
  std::filesystem::remove_all(dir);
  return dir;
}

// What a fake server's cut at `clock` leaves in its checkpoint directory
// under `root`: one part file of `bytes` bytes holding every one of
// `partitions` partitions as far as a MANIFEST can tell (its size and CRC
// are right; no server could read it). Returns its manifest entry.
inline std::vector<checkpoint::CheckpointFile> WriteCutFiles(const std::string& root,
                                                             uint64_t clock, uint32_t partitions,
                                                             size_t bytes) {
  const absl::StatusOr<std::string> dir = checkpoint::CreateCheckpointDir(root, clock);
  EXPECT_TRUE(dir.ok()) << dir.status();
  const std::string contents(bytes, 'r');
  checkpoint::CheckpointFile file;
  file.set_name("part-0000.shard");
  file.set_size(bytes);
  file.set_crc32c(checkpoint::Crc32cExtend(0, contents.data(), contents.size()));
  for (uint32_t p = 0; p < partitions; ++p) file.add_partitions(p);
  std::ofstream(*dir + "/" + file.name(), std::ios::binary) << contents;
  return {file};
}

// Fake servers: they record what the coordinator asks of them and answer as
// told, and keep the job's checkpoints with the real CheckpointChain (full
// or delta, a MANIFEST over one small part file per cut, GC, restore
// points) under checkpoint.dir.
class FakeServerOps final : public ServerOps {
 public:
  struct Cut {
    uint64_t clock = 0, generation = 0, max_granted = 0;
    Positions positions;
    bool delta_on_last = false;
    bool delta = false;  // The chain made it a delta.
  };
  struct Restored {
    std::optional<uint32_t> index;
    RestorePoint point;
    uint64_t generation = 0;
  };

  // `job` (not owned; set later with set_job) is read for the furthest
  // step granted at each call.
  explicit FakeServerOps(const JobConfig& config, const JobCoordinator* job = nullptr)
      : config_(config), job_(job), chain_(config) {}
  void set_job(const JobCoordinator* job) { job_ = job; }

  absl::Status CopyCut(const PartitionMapProto&, uint64_t generation, uint64_t clock,
                       bool delta_on_last) override {
    MutexLock lock(&mu_);
    copying_ = {clock, generation,    MaxGranted(),
                {},    delta_on_last, chain_.BeginCut(absl::Now(), delta_on_last)};
    return absl::OkStatus();
  }
  // What LastCopySizes answers (the servers' rows and bytes per partition
  // at the last full copy).
  void SetCopySizes(PartitionSizes sizes) {
    MutexLock lock(&mu_);
    sizes_ = std::move(sizes);
  }
  PartitionSizes LastCopySizes() const override {
    MutexLock lock(&mu_);
    return sizes_;
  }
  absl::Status FinishCut(const PartitionMapProto&, uint64_t generation, uint64_t clock,
                         const Positions& positions) override {
    MutexLock lock(&mu_);
    if (!write_error_.ok()) return write_error_;
    const auto files = WriteCutFiles(config_.checkpoint().dir(), clock,
                                     config_.cluster().num_partitions(), 16 + clock % 7);
    absl::Status st = chain_.Complete(clock, generation, files, positions);
    if (!st.ok()) return st;
    copying_.positions = positions;
    cuts_.push_back(copying_);
    return st;
  }
  bool CanCutVersion() const override {
    MutexLock lock(&mu_);
    return chain_.base_clock().has_value();
  }
  absl::Status VersionCut(const PartitionMapProto&, uint64_t, uint64_t clock) override {
    MutexLock lock(&mu_);
    if (!chain_.base_clock()) return absl::FailedPreconditionError("no base");
    versions_.push_back(clock);
    return absl::OkStatus();
  }
  void PinCheckpoints(const std::vector<uint64_t>& clocks) override {
    MutexLock lock(&mu_);
    pinned_ = clocks;
    chain_.Pin(clocks);
  }
  void CollectGarbage() override {
    MutexLock lock(&mu_);
    chain_.CollectGarbage();
  }
  std::vector<uint64_t> pinned() const {
    MutexLock lock(&mu_);
    return pinned_;
  }
  absl::StatusOr<std::vector<RestorePoint>> RestorePoints() override {
    MutexLock lock(&mu_);
    return chain_.RestorePoints();
  }
  absl::StatusOr<RestoreStats> Restore(const PartitionMapProto&, std::optional<uint32_t> index,
                                       const RestorePoint& point, uint64_t generation) override {
    MutexLock lock(&mu_);
    restores_.push_back({index, point, generation});
    if (!index) chain_.Restored(point);
    RestoreStats stats;
    stats.rows = point.initial ? 0 : 100;
    return stats;
  }

  // Resharding: what each server was asked, and the furthest step any
  // worker had been granted then (the clocks are held during a move).
  struct Added {
    uint32_t index = 0;
    uint64_t clock = 0;
    std::vector<uint32_t> partitions;
    AddStep step;
    uint64_t max_granted = 0;
  };
  struct Switched {
    uint32_t index = 0;
    uint64_t version = 0, max_granted = 0;
    std::vector<uint32_t> owner, drop;
  };
  absl::StatusOr<RestoreStats> AddPartitions(const PartitionMapProto&, uint32_t index,
                                             const RestorePoint& point,
                                             const std::vector<uint32_t>& partitions, uint64_t,
                                             const AddStep& step) override {
    MutexLock lock(&mu_);
    if (step.catch_up_from && failed_catch_ups_ < fail_catch_ups_) {
      ++failed_catch_ups_;
      return catch_up_error_;
    }
    added_.push_back({index, point.clock, partitions, step, MaxGranted()});
    RestoreStats stats;
    stats.rows = partitions.size();
    return stats;
  }
  absl::Status SwitchMap(const PartitionMapProto& map, uint32_t index,
                         const std::vector<uint32_t>& drop, const std::vector<uint32_t>&) override {
    MutexLock lock(&mu_);
    switched_.push_back({index, map.version(), MaxGranted(),
                         std::vector<uint32_t>(map.owner().begin(), map.owner().end()), drop});
    return absl::OkStatus();
  }
  std::vector<Added> added() const {
    MutexLock lock(&mu_);
    return added_;
  }
  std::vector<Switched> switched() const {
    MutexLock lock(&mu_);
    return switched_;
  }

  // Writes a complete FULL checkpoint at `clock` with `positions`, as an
  // earlier scheduler of the job would have, and returns it as a restore
  // point.
  RestorePoint WriteEarlierCheckpoint(uint64_t clock, const Positions& positions) {
    CheckpointChain earlier(config_);
    earlier.BeginCut(absl::Now(), /*delta_on_last=*/false);
    const auto files =
        WriteCutFiles(config_.checkpoint().dir(), clock, config_.cluster().num_partitions(), 16);
    EXPECT_TRUE(earlier.Complete(clock, /*generation=*/1, files, positions).ok());
    RestorePoint p;
    p.initial = false;
    p.clock = clock;
    p.dir = checkpoint::CheckpointPath(config_.checkpoint().dir(), clock);
    p.positions = positions;
    p.chain = {checkpoint::CheckpointId(clock)};
    return p;
  }
  // The first `n` catch-ups fail with `st` (a destination restarted
  // between the steps of a move answers ABORTED).
  void FailCatchUps(int n, absl::Status st) {
    MutexLock lock(&mu_);
    fail_catch_ups_ = n;
    catch_up_error_ = std::move(st);
  }
  void FailWrites(absl::Status st) {
    MutexLock lock(&mu_);
    write_error_ = std::move(st);
  }
  std::vector<Cut> cuts() const {
    MutexLock lock(&mu_);
    return cuts_;
  }
  std::vector<uint64_t> versions() const {
    MutexLock lock(&mu_);
    return versions_;
  }
  std::vector<Restored> restores() const {
    MutexLock lock(&mu_);
    return restores_;
  }

 private:
  uint64_t MaxGranted() const {
    return job_ ? const_cast<JobCoordinator*>(job_)->clock().MaxGranted() : 0;
  }

  const JobConfig config_;
  const JobCoordinator* job_;
  mutable Mutex mu_;
  CheckpointChain chain_ ABSL_GUARDED_BY(mu_);
  Cut copying_ ABSL_GUARDED_BY(mu_);
  std::vector<Cut> cuts_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> versions_ ABSL_GUARDED_BY(mu_);
  std::vector<Restored> restores_ ABSL_GUARDED_BY(mu_);
  PartitionSizes sizes_ ABSL_GUARDED_BY(mu_);
  int fail_catch_ups_ ABSL_GUARDED_BY(mu_) = 0;
  int failed_catch_ups_ ABSL_GUARDED_BY(mu_) = 0;
  absl::Status catch_up_error_ ABSL_GUARDED_BY(mu_);
  absl::Status write_error_ ABSL_GUARDED_BY(mu_);
  std::vector<uint64_t> pinned_ ABSL_GUARDED_BY(mu_);
  std::vector<Added> added_ ABSL_GUARDED_BY(mu_);
  std::vector<Switched> switched_ ABSL_GUARDED_BY(mu_);
};

// A small job: one table, one server, two workers, checkpoints every
// `every_steps` steps into `dir` (a fresh temporary directory if unset;
// "": checkpoints off).
inline JobConfig Config(uint64_t every_steps, ConsistencyMode mode = ASP,
                        std::optional<std::string> dir = std::nullopt) {
  JobConfig c;
  c.set_name("test-job");  // Checkpoints name their job.
  auto* t = c.add_tables();
  t->set_id(1);
  t->set_name("emb");
  t->set_dim(4);
  t->mutable_optimizer()->mutable_sgd()->set_learning_rate(1);
  c.mutable_data()->add_train_files("x");
  c.mutable_cluster()->set_num_servers(1);
  c.mutable_cluster()->set_num_workers(2);
  c.mutable_cluster()->set_mode(mode);
  if (mode == SSP) c.mutable_cluster()->set_staleness(1);
  // Short heartbeats: a new process takes a silent slot after 100 ms.
  c.mutable_cluster()->set_heartbeat_ms(50);
  c.mutable_cluster()->set_dead_after_ms(60000);
  c.mutable_checkpoint()->set_dir(dir ? *dir : FreshCheckpointDir("job"));
  c.mutable_checkpoint()->set_every_steps(every_steps);
  EXPECT_TRUE(FinalizeJobConfig(&c).ok());
  return c;
}

inline RegisterRequest Req(const JobConfig& c, Role role, int index, uint64_t incarnation) {
  RegisterRequest r;
  r.set_config_fingerprint(ConfigFingerprint(c));
  r.set_role(role);
  if (role == SERVER) r.set_address("127.0.0.1:" + std::to_string(1000 + incarnation));
  if (index >= 0) r.set_requested_index(index);
  r.set_incarnation(incarnation);
  return r;
}

inline void RegisterAll(JobCoordinator* job, const JobConfig& c) {
  RegisterResponse resp;
  ASSERT_TRUE(job->Register(Req(c, SERVER, 0, 1), &resp).ok());
  ASSERT_TRUE(job->Register(Req(c, WORKER, 0, 2), &resp).ok());
  ASSERT_TRUE(job->Register(Req(c, WORKER, 1, 3), &resp).ok());
}

inline absl::StatusOr<WaitStartResponse> StartOf(JobCoordinator* job, uint32_t rank,
                                                 std::optional<uint64_t> after = std::nullopt,
                                                 uint32_t timeout_ms = 20000) {
  WaitStartRequest request;
  request.set_rank(rank);
  if (after) request.set_after_generation(*after);
  request.set_timeout_ms(timeout_ms);
  WaitStartResponse response;
  absl::Status st = job->WaitStart(request, &response);
  if (!st.ok()) return st;
  return response;
}

// Step t of worker `rank` in `generation`: wait for the clock, tick.
inline absl::Status Step(JobCoordinator* job, uint32_t rank, uint64_t generation, uint64_t t,
                         uint32_t timeout_ms = 20000) {
  WaitClockRequest w;
  w.set_rank(rank);
  w.set_step(t);
  w.set_timeout_ms(timeout_ms);
  w.set_generation(generation);
  WaitClockResponse wr;
  absl::Status st = job->WaitClock(w, &wr);
  if (!st.ok()) return st;
  TickRequest tick;
  tick.set_rank(rank);
  tick.set_clock(t + 1);
  tick.set_generation(generation);
  tick.set_position("w" + std::to_string(rank) + "@" + std::to_string(t + 1));
  TickResponse tr;
  return job->Tick(tick, &tr);
}

inline absl::Status Finish(JobCoordinator* job, uint32_t rank, uint64_t generation) {
  MetricsReport done;
  done.set_rank(rank);
  done.set_done(true);
  done.set_final(true);
  done.set_generation(generation);
  return job->ReportMetrics(done);
}

// Runs two workers for `steps` steps, `delay` per step, then reports done.
inline std::vector<std::thread> RunWorkers(JobCoordinator* job, uint64_t steps,
                                           absl::Duration delay) {
  std::vector<std::thread> workers;
  for (uint32_t r = 0; r < 2; ++r) {
    workers.emplace_back([job, r, steps, delay] {
      auto start = StartOf(job, r);
      ASSERT_TRUE(start.ok()) << start.status();
      for (uint64_t t = start->clock(); t < steps; ++t) {
        ASSERT_TRUE(Step(job, r, start->generation(), t).ok()) << t;
        absl::SleepFor(delay * (r + 1));
      }
      ASSERT_TRUE(Finish(job, r, start->generation()).ok());
    });
  }
  return workers;
}

// Waits until `n` checkpoints were written (the final one comes from the
// control thread after the workers finished).
inline void WaitCheckpoints(const JobCoordinator& job, size_t n) {
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (job.Checkpoints().size() < n && absl::Now() < deadline) {
    absl::SleepFor(absl::Milliseconds(5));
  }
}

}  // namespace shardps::testing

#endif  // SHARDPS_SCHEDULER_JOB_TEST_UTIL_H_

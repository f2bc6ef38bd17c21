// recovery_bench: what a server failure costs, and what a checkpoint costs,
// for a sparse table of --rows rows (default 1M and 10M; dim 16, Adagrad:
// 16 weights + 16 accumulators a row).
//
// Per size, a real job: ps_scheduler and 2 ps_server child processes on
// fixed loopback ports (ASP, heartbeat 200 ms, dead after 2 s, checkpoints
// on demand only); this process is the job's only worker (SchedulerClient +
// PsClient, as ps_worker: WaitClock, push, Tick). It
//  1. fills the table with exactly N distinct random keys (pushes of
//     --batch keys a step; a push of a missing key creates the row);
//  2. takes a checkpoint (CheckpointNow) while it keeps stepping, and reads
//     the scheduler's last cut: workers held for the servers' in-memory copy
//     vs the files written behind them (beside one thread's memcpy of a
//     server's share into fresh pages, the copy's bound);
//  3. measures this disk's own sequential write (4 MiB blocks + fsync) and
//     read (after POSIX_FADV_DONTNEED) of a scratch file as large as the
//     checkpoint, next to it, in this run; then evicts the checkpoint's files
//     from the page cache (fdatasync + POSIX_FADV_DONTNEED; residency checked
//     with mincore), so the restore reads from the disk like the scratch read;
//  4. SIGKILLs server 1 and, as a supervisor would, starts it again with the
//     same argv --restart_delay_ms later, while the worker keeps stepping
//     (small pulls and pushes of existing keys, --idle_step_ms apart) and
//     rewinds when refused as of a stale generation (WaitStart);
//  5. waits for the scheduler's RecoveryReport and prints, per size and rep,
//     the checkpoint and recovery figures beside the disk's, with ratios.
// Steps 2-5 run --reps times per job. Every figure printed is measured in
// this run, with the CPU the servers and every other process used meanwhile
// (another build on this 2-core machine slows everything: check the "CPU of
// other processes" rows). Figures only: nothing passes or fails on time.
//
//   bazel build -c opt //bench:recovery_bench && bazel-bin/bench/recovery_bench
//       [--rows=1000000,10000000] [--reps=1] [--work_dir=/tmp/shardps_recovery_bench]
//
// ps_scheduler and ps_server are found in this binary's runfiles (they are
// its data), whatever configuration bazel-bin points at; --ps_scheduler and
// --ps_server override. Needs free disk in --work_dir for up to 3 kept
// checkpoints and the scratch file (a checkpoint is 136 B a row here: 1.4 GB
// at 10M rows), and RAM for the servers' rows, a copy and a restore (~5 GB
// at 10M rows). The work files are removed at the end
// (--keep_logs keeps the processes' logs).
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <sstream>
#include <string>
#include <thread>
#include <tuple>
#include <type_traits>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/client/ps_client.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "common/generation.h"
#include "common/init.h"
#include "common/partition.h"
#include "common/status_macros.h"

ABSL_FLAG(std::vector<std::string>, rows, std::vector<std::string>({"1000000", "10000000"}),
          "Table sizes (rows), comma-separated; one job each.");
ABSL_FLAG(int, reps, 1, "Checkpoint + kill + recovery cycles per size (one job).");
ABSL_FLAG(std::string, work_dir, "/tmp/shardps_recovery_bench",
          "Config, logs, checkpoints and the disk's scratch file go here.");
ABSL_FLAG(uint32_t, batch, 100000, "Keys per push while filling the table.");
ABSL_FLAG(uint32_t, idle_keys, 1000, "Keys per step (pull + push) after the fill.");
ABSL_FLAG(int, idle_step_ms, 20, "Pause between the worker's steps after the fill.");
ABSL_FLAG(int, restart_delay_ms, 1000, "The supervisor's delay before restarting server 1.");
ABSL_FLAG(int, recovery_timeout_sec, 300, "Give up waiting for a recovery after this.");
ABSL_FLAG(std::string, recovery, "exact",
          "checkpoint.recovery: exact (every server restores, the worker rewinds) or "
          "partial (only the restarted server restores its partitions).");
ABSL_FLAG(std::string, ps_scheduler, "", "ps_scheduler binary (default: from runfiles).");
ABSL_FLAG(std::string, ps_server, "", "ps_server binary (default: from runfiles).");
ABSL_FLAG(bool, keep_logs, false, "Keep the config and the processes' logs (not the data).");

#include "bench/recovery_bench_report.h"
#include "bench/recovery_bench_util.h"
#include "bench/recovery_bench_worker.h"

namespace shardps::rbench {
namespace {

// ---- one size -------------------------------------------------------------------

// One checkpoint + kill + recovery cycle's figures.

std::string ConfigText(const std::string& name, const std::string& ckpt) {
  return absl::StrCat(
      R"pb(
name: ")pb",
      name, R"pb("
tables {
  id: 1 name: "emb" kind: SPARSE dim: 16 seed: 7
  init { kind: UNIFORM scale: 0.01 }
  optimizer { adagrad { learning_rate: 0.05 initial_accumulator: 0.1 } }
  max_keys_per_request: )pb",
      std::max<uint64_t>(absl::GetFlag(FLAGS_batch), absl::GetFlag(FLAGS_idle_keys)),
      R"pb(
}
data { train_files: "unused" }
cluster {
  num_servers: 2 num_workers: 1 num_partitions: 256 mode: ASP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 60000
}
checkpoint { dir: ")pb",
      ckpt, R"pb(" recovery: )pb", absl::GetFlag(FLAGS_recovery) == "partial" ? "PARTIAL" : "EXACT",
      R"pb( }
)pb");
}

absl::StatusOr<std::vector<Cycle>> RunSize(uint64_t rows, const std::string& scheduler_bin,
                                           const std::string& server_bin) {
  const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_work_dir), "/rows-", rows);
  const std::string ckpt = absl::StrCat(dir, "/ckpt-", rows);
  std::filesystem::remove_all(dir);  // Ours: an old checkpoint would be resumed.
  std::filesystem::create_directories(dir);
  const std::string config_path = dir + "/job.pbtxt";
  std::ofstream(config_path) << ConfigText(absl::StrCat("recovery-bench-", rows), ckpt);
  ASSIGN_OR_RETURN(JobConfig config, LoadJobConfig(config_path));

  testing::Subprocess sched;
  const std::string address = absl::StrCat("127.0.0.1:", testing::FreePort());
  const std::string sched_log = dir + "/scheduler.log";
  RETURN_IF_ERROR(
      sched.Start({scheduler_bin, "--config=" + config_path, "--listen=" + address}, sched_log));
  RETURN_IF_ERROR(
      WaitForLine(sched, "ps_scheduler", "PS_SCHEDULER_LISTENING ", sched_log, absl::Seconds(60))
          .status());
  std::vector<std::string> server_argv[2];
  std::string server_log[2];
  std::unique_ptr<testing::Subprocess> servers[2];
  for (int i = 0; i < 2; ++i) {
    server_argv[i] = {server_bin, "--config=" + config_path, "--scheduler=" + address,
                      absl::StrCat("--index=", i),
                      absl::StrCat("--listen=127.0.0.1:", testing::FreePort())};
    server_log[i] = absl::StrCat(dir, "/server-", i, ".log");
    servers[i] = std::make_unique<testing::Subprocess>();
    RETURN_IF_ERROR(servers[i]->Start(server_argv[i], server_log[i]));
  }
  for (int i = 0; i < 2; ++i) {
    RETURN_IF_ERROR(WaitForLine(*servers[i], absl::StrCat("ps_server ", i), "PS_SERVER_LISTENING ",
                                server_log[i], absl::Seconds(60))
                        .status());
  }
  SchedulerClient ops(address);  // The operator's view (ps_status).

  // The worker runs on its own thread from the fill to the end.
  auto worker = std::make_unique<Worker>(config, address);
  RETURN_IF_ERROR(worker->Join());
  Progress(absl::StrCat(rows, " rows: job formed; filling"));
  // What the worker thread reports: the fill's end and time, its error.
  struct {
    std::mutex mu;
    bool filled = false;
    double fill_sec = 0;
    absl::Status status;
  } shared;
  std::atomic<bool> stop{false};
  std::thread worker_thread([&] {
    const absl::Time t = absl::Now();
    absl::Status st = worker->Fill(rows, absl::GetFlag(FLAGS_batch));
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      shared.filled = true;
      shared.fill_sec = Secs(absl::Now() - t);
      shared.status = st;
    }
    if (!st.ok()) return;
    st = worker->Idle(rows, absl::GetFlag(FLAGS_idle_keys),
                      absl::Milliseconds(absl::GetFlag(FLAGS_idle_step_ms)),
                      [&stop] { return stop.load(); });
    std::lock_guard<std::mutex> lock(shared.mu);
    shared.status = st;
  });
  // Stops and joins the worker thread on every return.
  struct Joiner {
    std::atomic<bool>* stop;
    std::thread* t;
    ~Joiner() {
      *stop = true;
      if (t->joinable()) t->join();
    }
  } joiner{&stop, &worker_thread};
  auto worker_failed = [&]() -> absl::Status {
    std::lock_guard<std::mutex> lock(shared.mu);
    if (shared.status.ok()) return absl::OkStatus();
    return absl::InternalError(absl::StrCat("worker: ", shared.status.message()));
  };
  double fill_sec = 0;
  while (true) {
    {
      std::lock_guard<std::mutex> lock(shared.mu);
      fill_sec = shared.fill_sec;
      if (shared.filled) break;
    }
    absl::SleepFor(absl::Milliseconds(20));
  }
  RETURN_IF_ERROR(worker_failed());
  Progress(absl::StrCat(rows, " rows filled in ", fill_sec, " s"));

  std::vector<Cycle> cycles;
  for (int rep = 0; rep < absl::GetFlag(FLAGS_reps); ++rep) {
    Cycle c;
    c.rows = rows;
    c.fill_rows_per_sec = rep == 0 ? rows / fill_sec : std::nan("");  // Printed "-".
    // Checkpoint: the worker keeps stepping, so the cut is reached.
    absl::Time t = absl::Now();
    const std::vector<pid_t> job = {0, sched.pid(), servers[0]->pid(), servers[1]->pid()};
    CpuWindow ckpt_cpu(job);
    ASSIGN_OR_RETURN(const uint64_t clock, ops.CheckpointNow(absl::Minutes(10)));
    c.ckpt_request_sec = Secs(absl::Now() - t);
    // Servers alive throughout: their CPU counts from the window's start.
    std::tie(c.ckpt_server_cores, c.ckpt_other_cores) =
        ckpt_cpu.End({servers[0]->pid(), servers[1]->pid()});
    ASSIGN_OR_RETURN(const JobStatusResponse after_cut, ops.JobStatus());
    c.hold_sec = after_cut.last_checkpoint_hold_sec();
    c.write_sec = after_cut.last_checkpoint_write_sec();
    ASSIGN_OR_RETURN(const std::string ckpt_dir, CheckpointDir(ckpt, clock));
    c.ckpt_bytes = BytesUnder(ckpt_dir);
    Progress(absl::StrCat("checkpoint at clock ", clock, ": ", c.ckpt_bytes, " bytes; held ",
                          c.hold_sec, " s, written in ", c.write_sec, " s"));
    // The disk, on the checkpoint's filesystem, with as many bytes.
    ASSIGN_OR_RETURN(c.disk, MeasureDisk(dir + "/disk-scratch", c.ckpt_bytes));
    // The copy's bound: each server copies its half on its own core.
    ASSIGN_OR_RETURN(c.memcpy_half, MeasureMemcpy(c.ckpt_bytes / 2));
    // The restore must read the checkpoint from the disk, as the scratch read.
    const std::vector<std::string> ckpt_files = FilesUnder(ckpt);  // Every kept one.
    c.resident_before = Resident(FilesUnder(ckpt_dir));
    RETURN_IF_ERROR(Evict(ckpt_files));
    c.resident_after = Resident(ckpt_files);
    RETURN_IF_ERROR(worker_failed());

    // Kill server 1; restart it as a supervisor does.
    ASSIGN_OR_RETURN(const JobStatusResponse before, ops.JobStatus());
    const int known = before.recoveries_size();
    Progress(absl::StrCat("disk: write ", c.disk.write_mbps, " MB/s, read ", c.disk.read_mbps,
                          " MB/s; killing server 1"));
    const int rewinds = worker->rewinds();
    const absl::Time killed = absl::Now();
    servers[1]->Signal(SIGKILL);
    (void)servers[1]->Wait(absl::Seconds(30));
    absl::SleepFor(absl::Milliseconds(absl::GetFlag(FLAGS_restart_delay_ms)));
    servers[1] = std::make_unique<testing::Subprocess>();
    RETURN_IF_ERROR(servers[1]->Start(server_argv[1], server_log[1]));
    c.spawned = Secs(absl::Now() - killed);
    RETURN_IF_ERROR(WaitForLine(*servers[1], "ps_server 1", "PS_SERVER_LISTENING ", server_log[1],
                                absl::Seconds(60))
                        .status());
    c.listening = Secs(absl::Now() - killed);
    // The restore's window: from the new process listening (it registers,
    // and the restore starts, within milliseconds) to the recovery seen
    // complete (polled every 50 ms).
    CpuWindow restore_cpu({0, sched.pid(), servers[0]->pid(), servers[1]->pid()});

    // Wait for the scheduler's report of that recovery.
    const absl::Time deadline =
        absl::Now() + absl::Seconds(absl::GetFlag(FLAGS_recovery_timeout_sec));
    std::optional<RecoveryReport> report;
    std::string state;
    while (!report) {
      RETURN_IF_ERROR(worker_failed());
      auto st = ops.JobStatus();
      if (st.ok()) {
        state = st->state();
        if (state.rfind("failed", 0) == 0) return absl::AbortedError("the job " + state);
        for (int i = known; i < st->recoveries_size(); ++i) {
          if (st->recoveries(i).complete()) report = st->recoveries(i);
        }
      }
      if (!report && absl::Now() >= deadline) {
        return absl::DeadlineExceededError(absl::StrCat(
            "no complete recovery ", absl::GetFlag(FLAGS_recovery_timeout_sec),
            " s after the kill (job state: ", state, "); scheduler log:\n", Tail(sched_log, 20)));
      }
      if (!report) absl::SleepFor(absl::Milliseconds(50));
    }
    c.recovery = *report;
    std::tie(c.restore_server_cores, c.restore_other_cores) =
        restore_cpu.End({servers[0]->pid(), servers[1]->pid()});
    // The worker counts its rewind once its WaitStart has returned (a
    // partial recovery rewinds nobody).
    for (int i = 0; i < 500 && report->kind() == "rollback" && worker->rewinds() == rewinds; ++i) {
      absl::SleepFor(absl::Milliseconds(10));
    }
    c.rewinds = worker->rewinds() - rewinds;
    c.last_heartbeat = report->started_unix_sec() - UnixSec(killed);
    Progress(
        absl::StrCat("recovery (", report->kind(), ") complete in ", report->total_sec(), " s"));
    cycles.push_back(c);
  }

  // Stop: the worker first (its heartbeats end with it), then the servers and
  // the scheduler. A clean "done" would take a final checkpoint of every row.
  stop = true;
  worker_thread.join();
  const absl::Status final_worker = worker_failed();
  worker.reset();
  for (auto& s : servers) Stop(*s, absl::Seconds(60));
  Stop(sched, absl::Seconds(30));
  RETURN_IF_ERROR(final_worker);
  return cycles;
}

// Removes what RunSize wrote under its dir (all of it, or all but the logs).
void Cleanup(uint64_t rows) {
  const std::string dir = absl::StrCat(absl::GetFlag(FLAGS_work_dir), "/rows-", rows);
  if (!absl::GetFlag(FLAGS_keep_logs)) {
    std::filesystem::remove_all(dir);
    std::error_code ec;
    std::filesystem::remove(absl::GetFlag(FLAGS_work_dir), ec);  // Only if empty.
    return;
  }
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("ckpt-", 0) == 0 || name.rfind("disk-scratch", 0) == 0) {
      std::filesystem::remove_all(e.path(), ec);
    }
  }
}

int Main() {
  auto scheduler_bin = FindBinary(absl::GetFlag(FLAGS_ps_scheduler), "scheduler/ps_scheduler");
  auto server_bin = FindBinary(absl::GetFlag(FLAGS_ps_server), "server/ps_server");
  if (!scheduler_bin.ok() || !server_bin.ok()) {
    std::fprintf(
        stderr, "%s\n",
        (!scheduler_bin.ok() ? scheduler_bin.status() : server_bin.status()).ToString().c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_recovery) != "exact" && absl::GetFlag(FLAGS_recovery) != "partial") {
    std::fprintf(stderr, "--recovery: exact or partial\n");
    return 2;
  }
  std::vector<uint64_t> sizes;
  for (const std::string& s : absl::GetFlag(FLAGS_rows)) {
    uint64_t n;
    if (!absl::SimpleAtoi(s, &n) || n == 0) {
      std::fprintf(stderr, "--rows: \"%s\" is not a positive row count\n", s.c_str());
      return 2;
    }
    sizes.push_back(n);
  }
  const int reps = std::max(1, absl::GetFlag(FLAGS_reps));
  absl::SetFlag(&FLAGS_reps, reps);
  const std::string work = absl::GetFlag(FLAGS_work_dir);
  std::filesystem::create_directories(work);
  // Room for up to 3 checkpoints (keep: 3) and the scratch file, at a
  // generous 200 bytes a row.
  const uint64_t largest = *std::max_element(sizes.begin(), sizes.end());
  const uint64_t need = largest * 200 * (std::min(reps, 3) + 1);
  struct statvfs fs;
  if (statvfs(work.c_str(), &fs) == 0 && uint64_t{fs.f_bavail} * fs.f_frsize < need) {
    std::fprintf(stderr, "%s has %.1f GB free; %llu rows need about %.1f GB\n", work.c_str(),
                 uint64_t{fs.f_bavail} * fs.f_frsize / 1e9,
                 static_cast<unsigned long long>(largest), need / 1e9);
    return 2;
  }
  std::printf(
      "recovery_bench: sparse table dim %u, Adagrad; 2 servers, 1 worker (this "
      "process), ASP, recovery %s; heartbeat 200 ms, dead after 2000 ms; server 1 "
      "SIGKILLed and restarted %d ms later; %d rep(s) per size; work dir %s\n",
      kDim, absl::GetFlag(FLAGS_recovery).c_str(), absl::GetFlag(FLAGS_restart_delay_ms), reps,
      work.c_str());
  std::printf("binaries: %s, %s\n", scheduler_bin->c_str(), server_bin->c_str());
  std::fflush(stdout);
  std::vector<Cycle> all;
  for (uint64_t rows : sizes) {
    auto cycles = RunSize(rows, *scheduler_bin, *server_bin);
    Cleanup(rows);
    if (!cycles.ok()) {
      std::fprintf(stderr, "%llu rows: %s\n", static_cast<unsigned long long>(rows),
                   cycles.status().ToString().c_str());
      return 1;
    }
    all.insert(all.end(), cycles->begin(), cycles->end());
  }
  std::printf(
      "\nMB = 1e6 bytes, GB = 1e9. The disk rates are of one sequential stream on the "
      "checkpoint's filesystem, of as many bytes as the checkpoint, in this run. Before each "
      "kill the checkpoint's files were evicted from the page cache (fdatasync + "
      "POSIX_FADV_DONTNEED; residency by mincore below), so the restore reads them from the "
      "disk as the disk read did. Restore = the scheduler's Restore RPCs (recovery exact: to "
      "both servers in parallel; partial: to the restarted one): read + verify the files, "
      "clear and refill the tables.\n\n");
  PrintTable(all);
  std::fflush(stdout);
  return 0;
}

}  // namespace
}  // namespace shardps::rbench

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "recovery_bench [--rows=1000000,10000000] [--reps=1] [--work_dir=DIR]");
  shardps::TuneMallocForLargeMessages();
  signal(SIGPIPE, SIG_IGN);
  return shardps::rbench::Main();
}

// recovery_bench's results: one checkpoint + kill + recovery cycle
// (Cycle) and the table it prints (recovery_bench.cc). Header-only, for this
// bench.
#ifndef SHARDPS_BENCH_RECOVERY_BENCH_REPORT_H_
#define SHARDPS_BENCH_RECOVERY_BENCH_REPORT_H_

#include "bench/recovery_bench_util.h"

namespace shardps::rbench {

struct Cycle {
  uint64_t rows = 0;
  double fill_rows_per_sec = 0;
  uint64_t ckpt_bytes = 0;
  double ckpt_request_sec = 0;  // CheckpointNow call: cut reached + copy + write.
  double hold_sec = 0, write_sec = 0;
  MemcpyTimes memcpy_half;  // One thread, half the checkpoint's bytes.
  DiskRates disk;
  double resident_before = 0, resident_after = 0;  // Checkpoint pages cached.
  RecoveryReport recovery;
  // From the kill, seconds: the victim's last heartbeat (negative), the
  // restart spawned, the new process listening.
  double last_heartbeat = 0, spawned = 0, listening = 0;
  int rewinds = 0;  // Of the worker (refused as stale, restarted by WaitStart).
  // CPU, in cores: the two servers', and every process outside this job's
  // (another build on the machine skews the figures; 0 = quiet), over the
  // CheckpointNow call and over the restore window (listening -> complete).
  double ckpt_server_cores = 0, ckpt_other_cores = 0;
  double restore_server_cores = 0, restore_other_cores = 0;
};

// ---- output ----------------------------------------------------------------------

inline void PrintTable(const std::vector<Cycle>& cycles) {
  auto row = [&](const char* label, auto value, const char* fmt) {
    std::printf("%-52s", label);
    for (const Cycle& c : cycles) {
      char cell[64];
      const auto v = value(c);
      if constexpr (std::is_floating_point_v<decltype(v)>) {
        if (std::isnan(v)) {
          std::printf(" %14s", "-");
          continue;
        }
      }
      std::snprintf(cell, sizeof cell, fmt, v);
      std::printf(" %14s", cell);
    }
    std::printf("\n");
  };
  auto section = [](const char* title) { std::printf("%s\n", title); };
  const int reps = absl::GetFlag(FLAGS_reps);
  std::printf("%-52s", "");
  for (size_t i = 0; i < cycles.size(); ++i) {
    char head[64];
    if (reps > 1) {
      std::snprintf(head, sizeof head, "%.3gM rep %zu", cycles[i].rows / 1e6, i % reps + 1);
    } else {
      std::snprintf(head, sizeof head, "%.3gM rows", cycles[i].rows / 1e6);
    }
    std::printf(" %14s", head);
  }
  std::printf("\n");
  using C = const Cycle&;
  section("table");
  row(
      "  rows", [](C c) { return static_cast<unsigned long long>(c.rows); }, "%llu");
  row(
      "  rows restored (RecoveryReport.rows)",
      [](C c) { return static_cast<unsigned long long>(c.recovery.rows()); }, "%llu");
  row(
      "  fill, M rows/s (pushes, for information)", [](C c) { return c.fill_rows_per_sec / 1e6; },
      "%.3f");
  section("checkpoint (CheckpointNow; two-phase cut)");
  row(
      "  size, GB", [](C c) { return c.ckpt_bytes / 1e9; }, "%.3f");
  row(
      "  bytes per row", [](C c) { return static_cast<double>(c.ckpt_bytes) / c.rows; }, "%.1f");
  row(
      "  workers held (servers' in-memory copy), s", [](C c) { return c.hold_sec; }, "%.3f");
  row(
      "  one thread's memcpy of half the bytes, fresh pages, s",
      [](C c) { return c.memcpy_half.fresh; }, "%.3f");
  row(
      "  the same into pages already touched, s", [](C c) { return c.memcpy_half.touched; },
      "%.3f");
  row(
      "  hold / memcpy to fresh pages (a server copies half)",
      [](C c) { return c.hold_sec / c.memcpy_half.fresh; }, "%.1f");
  row(
      "  files written behind the workers, s", [](C c) { return c.write_sec; }, "%.3f");
  row(
      "  CheckpointNow call (cut reached + copy + write), s",
      [](C c) { return c.ckpt_request_sec; }, "%.3f");
  row(
      "  checkpoint write, MB/s", [](C c) { return c.ckpt_bytes / kMB / c.write_sec; }, "%.0f");
  row(
      "  disk sequential write + fsync (same run), MB/s", [](C c) { return c.disk.write_mbps; },
      "%.0f");
  row(
      "  checkpoint write / disk write",
      [](C c) { return c.ckpt_bytes / kMB / c.write_sec / c.disk.write_mbps; }, "%.2f");
  row(
      "  hold / (hold + write): workers' wait now vs before",
      [](C c) { return c.hold_sec / (c.hold_sec + c.write_sec); }, "%.3f");
  row(
      "  servers' CPU over the CheckpointNow call, cores", [](C c) { return c.ckpt_server_cores; },
      "%.2f");
  section(absl::GetFlag(FLAGS_recovery) == "partial"
              ? "restore (partial: the restarted server restores its partitions)"
              : "restore (every server restores the checkpoint; Restore RPCs in parallel)");
  row(
      "  new checkpoint's pages cached before eviction, %",
      [](C c) { return 100 * c.resident_before; }, "%.1f");
  row(
      "  kept checkpoints' pages cached at the kill, %", [](C c) { return 100 * c.resident_after; },
      "%.1f");
  row(
      "  bytes read (RecoveryReport.bytes), GB", [](C c) { return c.recovery.bytes() / 1e9; },
      "%.3f");
  row(
      "  restore, s", [](C c) { return c.recovery.restore_sec(); }, "%.3f");
  row(
      "  restore, MB/s", [](C c) { return c.recovery.bytes() / kMB / c.recovery.restore_sec(); },
      "%.0f");
  row(
      "  restore, M rows/s", [](C c) { return c.recovery.rows() / 1e6 / c.recovery.restore_sec(); },
      "%.2f");
  row(
      "  disk sequential read, cache evicted (same run), MB/s",
      [](C c) { return c.disk.read_mbps; }, "%.0f");
  row(
      "  restore rate / disk read rate",
      [](C c) { return c.recovery.bytes() / kMB / c.recovery.restore_sec() / c.disk.read_mbps; },
      "%.3f");
  row(
      "  servers' CPU, listening -> recovery seen complete, cores",
      [](C c) { return c.restore_server_cores; }, "%.2f");
  row(
      "  restore time / disk read time of the same bytes",
      [](C c) { return c.recovery.restore_sec() / (c.recovery.bytes() / kMB / c.disk.read_mbps); },
      "%.2f");
  section("recovery (RecoveryReport), s");
  row(
      "  kind", [](C c) { return c.recovery.kind().c_str(); }, "%s");
  row(
      "  detect: last heartbeat -> failure detected", [](C c) { return c.recovery.detect_sec(); },
      "%.3f");
  row(
      "  wait: detected -> every server registered", [](C c) { return c.recovery.wait_sec(); },
      "%.3f");
  row(
      "  restore: Restore RPCs", [](C c) { return c.recovery.restore_sec(); }, "%.3f");
  row(
      "  rewind: restored -> the worker restarted", [](C c) { return c.recovery.rewind_sec(); },
      "%.3f");
  row(
      "  total", [](C c) { return c.recovery.total_sec(); }, "%.3f");
  row(
      "  the worker's rewinds (stale generation -> WaitStart)", [](C c) { return c.rewinds; },
      "%d");
  row(
      "  restore share of total",
      [](C c) { return c.recovery.restore_sec() / c.recovery.total_sec(); }, "%.3f");
  section("machine (2 servers, scheduler and this worker share its cores)");
  row(
      "  cores", [](C) { return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN)); }, "%d");
  row(
      "  CPU of other processes, checkpoint window, cores", [](C c) { return c.ckpt_other_cores; },
      "%.2f");
  row(
      "  CPU of other processes, restore window, cores", [](C c) { return c.restore_other_cores; },
      "%.2f");
  section("timeline from the SIGKILL, s");
  row(
      "  server 1's last heartbeat", [](C c) { return c.last_heartbeat; }, "%+.3f");
  row(
      "  supervisor restarted it", [](C c) { return c.spawned; }, "%+.3f");
  row(
      "  new process listening", [](C c) { return c.listening; }, "%+.3f");
  row(
      "  failure detected", [](C c) { return c.last_heartbeat + c.recovery.detect_sec(); },
      "%+.3f");
  row(
      "  every server registered",
      [](C c) { return c.last_heartbeat + c.recovery.detect_sec() + c.recovery.wait_sec(); },
      "%+.3f");
  row(
      "  every server restored",
      [](C c) {
        return c.last_heartbeat + c.recovery.detect_sec() + c.recovery.wait_sec() +
               c.recovery.restore_sec();
      },
      "%+.3f");
  row(
      "  the worker restarted (recovery complete)",
      [](C c) { return c.last_heartbeat + c.recovery.total_sec(); }, "%+.3f");
}

}  // namespace shardps::rbench

#endif  // SHARDPS_BENCH_RECOVERY_BENCH_REPORT_H_

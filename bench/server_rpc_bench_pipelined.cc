// server_rpc_bench's pipelined W client (--role=pipelined_client): the real
// PsClient (common/client/ps_client.h), used as a worker with prefetch uses
// it. While step t's push is in flight, step t + 1's pull is in flight too,
// and the client draws step t + 2's batch:
//
//   draw t+2 | wait pull t+1, wait push t | send pull t+2, send push t+1
//
// so the server serves a push and a pull at once and the client's own work
// (the draw, encoding the gradients, decoding the rows) overlaps both. The
// pull of step t + 1 does not see step t's push (ASP staleness 1, as a
// prefetching worker's pull; the worker applies its own pending push to its
// prefetched rows, docs/design.md). Prints ROWS and TIMES as the serial
// client: TIMES' pull and push are the time spent waiting for each.
#include <array>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "bench/server_rpc_bench.h"
#include "bench/server_zipf.h"
#include "common/client/ps_client.h"
#include "common/codec.h"
#include "common/init.h"

namespace shardps::bench {

namespace {

// One step's batch: its keys and the rows pulled for them.
struct Slot {
  std::vector<uint64_t> ranks, keys;
  std::vector<float> rows;
};

}  // namespace

int RunPipelinedClient() {
  TuneMallocForLargeMessages();  // As ps_worker does.
  const int dim = absl::GetFlag(FLAGS_dim);
  PsClient::Options options;
  options.encoding = absl::GetFlag(FLAGS_encoding) == "bf16" ? Encoding::kBf16 : Encoding::kFp32;
  PartitionMapProto map;  // One server owns every partition (map version 1).
  map.set_version(1);
  map.set_num_partitions(kPartitions);
  for (uint32_t p = 0; p < kPartitions; ++p) map.add_owner(0);
  map.add_server_addresses(absl::GetFlag(FLAGS_address));
  auto client = PsClient::Create(options, map, nullptr);
  if (!client.ok()) {
    std::fprintf(stderr, "PsClient: %s\n", client.status().ToString().c_str());
    return 1;
  }
  PsClient& ps = **client;
  ZipfBatches zipf(kIds, 1.0, absl::GetFlag(FLAGS_seed));
  const std::vector<float> grads(size_t{kDraws} * dim, 0.001f);
  std::array<Slot, 3> slots;
  for (Slot& s : slots) s.rows.resize(size_t{kDraws} * dim);
  auto pull = [&](Slot& s, uint64_t clock) {
    return ps.PullAsync(
        {{1, static_cast<uint32_t>(dim), s.keys.data(), s.keys.size(), s.rows.data()}}, TRAIN,
        clock);
  };
  auto push = [&](Slot& s, uint64_t clock) {
    return ps.PushAsync(
        {{1, static_cast<uint32_t>(dim), s.keys.data(), s.keys.size(), grads.data()}}, clock, 1.0f,
        /*to_every_server=*/false);
  };
  auto failed = [](const char* what, const absl::Status& st) {
    std::fprintf(stderr, "%s: %s\n", what, st.ToString().c_str());
    return 1;
  };
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const int total = warmup + absl::GetFlag(FLAGS_steps);
  uint64_t rows = 0;
  StepTimes times;
  Clock::time_point start = Clock::now();
  // Step t's batch lives in slots[t % 3]: a step's keys and rows stay
  // untouched while its pull or push is in flight.
  zipf.Next(kDraws, &slots[0].ranks, &slots[0].keys);
  std::unique_ptr<PsClient::Op> pulling = pull(slots[0], 0), pushing;
  for (int step = 0; step < total; ++step) {
    if (step == warmup) {
      start = Clock::now();
      rows = 0;
      times = StepTimes();
    }
    Slot& cur = slots[step % 3];
    Slot& next = slots[(step + 1) % 3];
    Clock::time_point t = Clock::now();
    if (step + 1 < total) zipf.Next(kDraws, &next.ranks, &next.keys);
    times.draw += Seconds(t);
    t = Clock::now();
    absl::Status st = pulling->Wait();  // Step t's rows.
    times.pull += Seconds(t);
    if (!st.ok()) return failed("pull", st);
    t = Clock::now();
    if (pushing != nullptr) {  // Step t - 1's push.
      st = pushing->Wait();
      if (!st.ok()) return failed("push", st);
    }
    times.push += Seconds(t);
    if (step + 1 < total) pulling = pull(next, step + 1);
    pushing = push(cur, step);  // Computed from step t's rows, in a worker.
    rows += cur.keys.size();
  }
  const absl::Status st = pushing->Wait();
  if (!st.ok()) return failed("push", st);
  std::printf("ROWS %llu SECONDS %.6f\n", static_cast<unsigned long long>(rows), Seconds(start));
  times.Print(absl::GetFlag(FLAGS_steps));
  return 0;
}

}  // namespace shardps::bench

#include "scheduler/checkpoint_client.h"

#include <grpcpp/grpcpp.h>

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/client/ps_channel.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "proto/ps.grpc.pb.h"
#include "scheduler/checkpoint_chain.h"

namespace shardps {
namespace {

std::unique_ptr<ParameterServer::Stub> Stub(const std::string& address) {
  return NewParameterServerStubOrDie(address);
}

absl::Status NameServer(const absl::Status& s, uint32_t index, const std::string& address) {
  if (s.ok()) return s;
  return absl::Status(s.code(), absl::StrCat("server ", index, " (", address, "): ", s.message()));
}

// Runs `call(server index, address)` on the servers `which` (all if unset)
// of `map` in parallel; the first error wins. PERMISSION_DENIED is retried
// for up to 2 s: a server that has just registered may not have adopted the
// control token from the answer yet.
absl::Status ForEachServer(const PartitionMapProto& map, std::optional<uint32_t> which,
                           const std::function<absl::Status(uint32_t, const std::string&)>& call) {
  auto with_retry = [&call](uint32_t i, const std::string& address) {
    const absl::Time give_up = absl::Now() + absl::Seconds(2);
    while (true) {
      absl::Status st = call(i, address);
      if (!absl::IsPermissionDenied(st) || absl::Now() > give_up) return st;
      absl::SleepFor(absl::Milliseconds(100));
    }
  };
  std::vector<std::future<absl::Status>> results;
  for (uint32_t i = 0; i < static_cast<uint32_t>(map.server_addresses_size()); ++i) {
    if (which && *which != i) continue;
    results.push_back(std::async(std::launch::async, with_retry, i, map.server_addresses(i)));
  }
  if (results.empty()) {
    return absl::InvalidArgumentError(absl::StrCat("no server ", which.value_or(0)));
  }
  absl::Status first;
  for (auto& r : results) {
    absl::Status st = r.get();
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

// The servers' side of each call; the chain's policy (full or delta, the
// MANIFEST, GC, restore points) is the CheckpointChain's.
class GrpcServerOps final : public ServerOps {
 public:
  GrpcServerOps(const JobConfig& config, uint64_t control_token)
      : num_partitions_(config.cluster().num_partitions()),
        control_token_(control_token),
        chain_(config) {}

  void PinCheckpoints(const std::vector<uint64_t>& clocks) override { chain_.Pin(clocks); }

  absl::Status CopyCut(const PartitionMapProto& map, uint64_t generation, uint64_t clock,
                       bool delta_on_last) override {
    const bool delta = chain_.BeginCut(absl::Now(), delta_on_last);
    absl::Status st = Copy(map, generation, clock, delta);
    if (delta && absl::IsFailedPrecondition(st) &&
        st.message().find("stale generation") == absl::string_view::npos) {
      // A server without the base (e.g. restarted): everyone writes in full.
      LOG(WARNING) << "delta checkpoint at clock " << clock << " refused (" << st.message()
                   << "); writing a full one";
      chain_.WriteInFull();
      st = Copy(map, generation, clock, false);
    }
    return st;
  }

  bool CanCutVersion() const override { return chain_.base_clock().has_value(); }

  absl::Status VersionCut(const PartitionMapProto& map, uint64_t generation,
                          uint64_t clock) override {
    if (!chain_.base_clock()) {
      return absl::FailedPreconditionError(
          absl::StrCat("version at clock ", clock, ": no complete checkpoint to be a delta on"));
    }
    return ForEachServer(map, std::nullopt, [&](uint32_t i, const std::string& address) {
      CheckpointRequest request = Request(generation, clock, /*delta=*/true);
      request.set_phase(CheckpointRequest::VERSION);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(10)));
      CheckpointResponse response;
      return NameServer(FromGrpcStatus(Stub(address)->Checkpoint(&ctx, request, &response)), i,
                        address);
    });
  }

  absl::Status FinishCut(const PartitionMapProto& map, uint64_t generation, uint64_t clock,
                         const Positions& positions) override {
    std::vector<CheckpointResponse> responses(map.server_addresses_size());
    absl::Status st = ForEachServer(map, std::nullopt, [&](uint32_t i, const std::string& address) {
      CheckpointRequest request = Request(generation, clock, chain_.cut_delta());
      request.set_phase(CheckpointRequest::COLLECT);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(30)));
      return NameServer(FromGrpcStatus(Stub(address)->Checkpoint(&ctx, request, &responses[i])), i,
                        address);
    });
    if (!st.ok()) return st;
    std::vector<checkpoint::CheckpointFile> files;
    for (const CheckpointResponse& r : responses)
      files.insert(files.end(), r.written().begin(), r.written().end());
    return chain_.Complete(clock, generation, files, positions);
  }

  void CollectGarbage() override { chain_.CollectGarbage(); }

  absl::StatusOr<std::vector<RestorePoint>> RestorePoints() override {
    return chain_.RestorePoints();
  }

  absl::StatusOr<RestoreStats> Restore(const PartitionMapProto& map, std::optional<uint32_t> index,
                                       const RestorePoint& point, uint64_t generation) override {
    RestoreRequest request;
    request.set_generation(generation);
    request.set_control_token(control_token_);
    if (point.initial) {
      request.set_initial(true);
    } else {
      request.set_clock(point.clock);
    }
    request.set_map_version(map.version());  // Each server restores what this map gives it.
    for (uint32_t owner : map.owner()) request.add_partition_owner(owner);
    std::vector<RestoreResponse> responses(map.server_addresses_size());
    const absl::Status st = ForEachServer(map, index, [&](uint32_t i, const std::string& address) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(30)));
      return NameServer(FromGrpcStatus(Stub(address)->Restore(&ctx, request, &responses[i])), i,
                        address);
    });
    if (!st.ok()) return st;
    RestoreStats stats;
    for (const RestoreResponse& r : responses) {
      stats.rows += r.rows();
      stats.bytes += r.bytes_read();
      stats.files += r.files_read();
    }
    // The next delta continues the restored checkpoint's chain (every
    // server remembers it as a base); a single server restored the latest
    // checkpoint, which is the chain's end already.
    if (!index) chain_.Restored(point);
    return stats;
  }

  absl::StatusOr<RestoreStats> AddPartitions(const PartitionMapProto& map, uint32_t index,
                                             const RestorePoint& point,
                                             const std::vector<uint32_t>& partitions,
                                             uint64_t generation, const AddStep& step) override {
    RestoreRequest request;
    request.set_generation(generation);
    request.set_control_token(control_token_);
    request.set_clock(point.clock);
    for (uint32_t p : partitions) request.add_partitions(p);
    request.set_precopy(step.precopy);
    if (step.catch_up_from) request.set_catch_up_from(*step.catch_up_from);
    RestoreResponse response;
    const absl::Status st = ForEachServer(map, index, [&](uint32_t i, const std::string& address) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(30)));
      return NameServer(FromGrpcStatus(Stub(address)->Restore(&ctx, request, &response)), i,
                        address);
    });
    if (!st.ok()) return st;
    RestoreStats stats;
    stats.rows = response.rows();
    stats.bytes = response.bytes_read();
    stats.files = response.files_read();
    stats.paced = absl::Milliseconds(response.paced_ms());
    return stats;
  }

  absl::Status SwitchMap(const PartitionMapProto& map, uint32_t index,
                         const std::vector<uint32_t>& drop,
                         const std::vector<uint32_t>& active) override {
    ControlRequest request;
    request.set_control_token(control_token_);
    request.set_map_version(map.version());
    for (uint32_t owner : map.owner()) request.add_partition_owner(owner);
    for (uint32_t p : drop) request.add_drop_partitions(p);
    for (uint32_t r : active) request.add_active_workers(r);
    return ForEachServer(map, index, [&](uint32_t i, const std::string& address) {
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(10)));
      ControlResponse response;
      return NameServer(FromGrpcStatus(Stub(address)->Control(&ctx, request, &response)), i,
                        address);
    });
  }

 private:
  CheckpointRequest Request(uint64_t generation, uint64_t clock, bool delta) const {
    CheckpointRequest request;
    request.set_control_token(control_token_);
    request.set_clock(clock);
    request.set_generation(generation);
    request.set_delta(delta);
    if (delta) request.set_base_clock(*chain_.base_clock());
    return request;
  }

  absl::Status Copy(const PartitionMapProto& map, uint64_t generation, uint64_t clock, bool delta) {
    std::vector<CheckpointResponse> responses(map.server_addresses_size());
    absl::Status st = ForEachServer(map, std::nullopt, [&](uint32_t i, const std::string& address) {
      CheckpointRequest request = Request(generation, clock, delta);
      request.set_phase(CheckpointRequest::COPY);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(10)));
      return NameServer(FromGrpcStatus(Stub(address)->Checkpoint(&ctx, request, &responses[i])), i,
                        address);
    });
    if (st.ok() && !delta) NoteSizes(responses);
    return st;
  }

  // The rows and bytes per partition of a full copy, summed over the
  // servers; left as they were if a server does not report them.
  void NoteSizes(const std::vector<CheckpointResponse>& responses) {
    PartitionSizes sizes;
    sizes.rows.assign(num_partitions_, 0);
    sizes.bytes.assign(num_partitions_, 0);
    for (const CheckpointResponse& r : responses) {
      if (r.partition_rows_size() != r.partitions_size() ||
          r.partition_bytes_size() != r.partitions_size()) {
        return;  // Unknown.
      }
      for (int k = 0; k < r.partitions_size(); ++k) {
        if (r.partitions(k) >= num_partitions_) return;
        sizes.rows[r.partitions(k)] += r.partition_rows(k);
        sizes.bytes[r.partitions(k)] += r.partition_bytes(k);
      }
    }
    sizes_ = std::move(sizes);
  }

  PartitionSizes LastCopySizes() const override { return sizes_; }

  const uint32_t num_partitions_;
  const uint64_t control_token_;
  CheckpointChain chain_;
  PartitionSizes sizes_;  // Of the last full copy (deltas keep it).
};

}  // namespace

std::unique_ptr<ServerOps> MakeGrpcServerOps(const JobConfig& config, uint64_t control_token) {
  return std::make_unique<GrpcServerOps>(config, control_token);
}

}  // namespace shardps

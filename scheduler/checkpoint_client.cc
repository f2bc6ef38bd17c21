#include "scheduler/checkpoint_client.h"

#include <grpcpp/grpcpp.h>

#include <future>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/client/ps_channel.h"
#include "common/config.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "proto/ps.grpc.pb.h"

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

class GrpcServerOps final : public ServerOps {
 public:
  GrpcServerOps(JobConfig config, uint64_t control_token)
      : config_(std::move(config)), control_token_(control_token) {}

  void PinCheckpoints(const std::vector<uint64_t>& clocks) override { pinned_ = clocks; }

  absl::Status CopyCut(const PartitionMapProto& map, uint64_t generation, uint64_t clock,
                       bool delta_on_last) override {
    cut_time_ = absl::Now();
    // A delta on the previous complete checkpoint, unless this is the first
    // one or the chain already has kMaxDeltasPerFull deltas (a move's
    // catch-up: whenever there is a previous one).
    cut_delta_ = !chain_.empty() &&
                 (delta_on_last ||
                  (config_.checkpoint().delta() && chain_.size() <= checkpoint::kMaxDeltasPerFull));
    absl::Status st = Copy(map, generation, clock, cut_delta_);
    if (cut_delta_ && absl::IsFailedPrecondition(st) &&
        st.message().find("stale generation") == absl::string_view::npos) {
      // A server without the base (e.g. restarted): everyone writes in full.
      LOG(WARNING) << "delta checkpoint at clock " << clock << " refused (" << st.message()
                   << "); writing a full one";
      cut_delta_ = false;
      st = Copy(map, generation, clock, false);
    }
    return st;
  }

  bool CanCutVersion() const override { return !chain_.empty(); }

  absl::Status VersionCut(const PartitionMapProto& map, uint64_t generation,
                          uint64_t clock) override {
    if (chain_.empty()) {
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
      CheckpointRequest request = Request(generation, clock, cut_delta_);
      request.set_phase(CheckpointRequest::COLLECT);
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(30)));
      return NameServer(FromGrpcStatus(Stub(address)->Checkpoint(&ctx, request, &responses[i])), i,
                        address);
    });
    if (!st.ok()) return st;
    checkpoint::CheckpointManifest manifest;
    manifest.set_format_version(checkpoint::kManifestFormatVersion);
    manifest.set_checkpoint_id(checkpoint::CheckpointId(clock));
    manifest.set_clock(clock);
    manifest.set_job_name(config_.name());
    manifest.set_config_fingerprint(ConfigFingerprint(config_));
    manifest.set_num_partitions(config_.cluster().num_partitions());
    if (cut_delta_) {
      manifest.set_kind(checkpoint::CheckpointManifest::DELTA);
      manifest.set_base_id(chain_.back());
      for (const std::string& id : chain_) manifest.add_chain(id);
    } else {
      manifest.set_kind(checkpoint::CheckpointManifest::FULL);
    }
    manifest.add_chain(checkpoint::CheckpointId(clock));
    manifest.set_created_unix_micros(absl::ToUnixMicros(absl::Now()));
    manifest.set_cut_unix_micros(absl::ToUnixMicros(cut_time_));
    manifest.set_generation(generation);
    for (const CheckpointResponse& r : responses) {
      for (const auto& file : r.written()) *manifest.add_files() = file;
    }
    for (const auto& [rank, position] : positions) {
      auto* p = manifest.add_worker_positions();
      p->set_rank(rank);
      p->set_position(position);
    }
    const std::string root = config_.checkpoint().dir();
    st = checkpoint::WriteManifest(checkpoint::CheckpointPath(root, clock), manifest);
    if (!st.ok()) return st;
    chain_.assign(manifest.chain().begin(), manifest.chain().end());
    CollectGarbage();
    return absl::OkStatus();
  }

  void CollectGarbage() override {
    checkpoint::GcOptions gc;
    gc.keep = config_.checkpoint().keep();
    gc.verify_file_crcs = false;  // Sizes: the servers check CRCs when they read.
    gc.pinned = pinned_;
    auto collected = checkpoint::GarbageCollect(config_.checkpoint().dir(), gc);
    if (!collected.ok()) LOG(WARNING) << "checkpoint GC: " << collected.status();
  }

  absl::StatusOr<std::vector<RestorePoint>> RestorePoints() override {
    std::vector<RestorePoint> points;
    const std::string& root = config_.checkpoint().dir();
    if (root.empty()) return points;
    auto entries = checkpoint::ListCheckpoints(root);
    if (absl::IsNotFound(entries.status())) return points;
    if (!entries.ok()) return entries.status();
    checkpoint::LoadManifestOptions options;
    options.verify_file_crcs = false;
    for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
      auto resolved = checkpoint::LoadCheckpoint(root, it->clock, options);
      if (!resolved.ok()) {
        if (points.empty()) {
          LOG(WARNING) << it->dir
                       << " is not a complete checkpoint: " << resolved.status().message();
        }
        continue;
      }
      const checkpoint::CheckpointManifest& m = resolved->manifest;
      // Job name and partition count must match; each server checks every
      // table's schema per file. (The config fingerprint is not compared: it
      // includes the server count, and a checkpoint may be restored onto
      // another one.)
      if (m.job_name() != config_.name() ||
          m.num_partitions() != config_.cluster().num_partitions()) {
        return absl::FailedPreconditionError(absl::StrCat(
            resolved->dir, ": checkpoint of job \"", m.job_name(), "\" with ", m.num_partitions(),
            " partitions; this job is \"", config_.name(), "\" with ",
            config_.cluster().num_partitions(), " (use another checkpoint.dir)"));
      }
      RestorePoint p;
      p.initial = false;
      p.clock = m.clock();
      p.dir = resolved->dir;
      for (const auto& wp : m.worker_positions()) p.positions[wp.rank()] = wp.position();
      p.chain.assign(m.chain().begin(), m.chain().end());
      points.push_back(std::move(p));
    }
    return points;
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
    if (!index) chain_ = point.chain;
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
    if (delta) request.set_base_clock(*checkpoint::ParseCheckpointId(chain_.back()));
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
    if (!st.ok() || delta) return st;
    const uint32_t parts = config_.cluster().num_partitions();
    PartitionSizes sizes;
    sizes.rows.assign(parts, 0);
    sizes.bytes.assign(parts, 0);
    for (const CheckpointResponse& r : responses) {
      if (r.partition_rows_size() != r.partitions_size() ||
          r.partition_bytes_size() != r.partitions_size()) {
        return st;  // A server that does not report them: unknown.
      }
      for (int k = 0; k < r.partitions_size(); ++k) {
        if (r.partitions(k) >= parts) return st;
        sizes.rows[r.partitions(k)] += r.partition_rows(k);
        sizes.bytes[r.partitions(k)] += r.partition_bytes(k);
      }
    }
    sizes_ = std::move(sizes);
    return st;
  }

  PartitionSizes LastCopySizes() const override { return sizes_; }

  const JobConfig config_;
  const uint64_t control_token_;
  // The chain of the last complete checkpoint written or restored (empty:
  // the next one is FULL).
  std::vector<std::string> chain_;
  bool cut_delta_ = false;        // The cut being written is a delta.
  PartitionSizes sizes_;          // Of the last full copy (deltas keep it).
  absl::Time cut_time_;           // When CopyCut of the cut being written began.
  std::vector<uint64_t> pinned_;  // Kept by GC whatever checkpoint.keep says.
};

}  // namespace

std::unique_ptr<ServerOps> MakeGrpcServerOps(const JobConfig& config, uint64_t control_token) {
  return std::make_unique<GrpcServerOps>(config, control_token);
}

}  // namespace shardps

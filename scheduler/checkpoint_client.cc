#include "scheduler/checkpoint_client.h"

#include <grpcpp/grpcpp.h>

#include <future>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/config.h"
#include "common/grpc_status.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "proto/ps.grpc.pb.h"
#include "server/checkpoint/checkpoint_dir.h"
#include "server/checkpoint/manifest.h"

namespace shardps {
namespace {

std::unique_ptr<ParameterServer::Stub> Stub(const std::string& address) {
  return ParameterServer::NewStub(
      grpc::CreateChannel(address, ChannelCredentialsFromFlagsOrDie()));
}

// Runs `call(server index, address)` on every server in parallel; the first
// error wins.
absl::Status ForEachServer(const PartitionMapProto& map,
                           const std::function<absl::Status(int, const std::string&)>& call) {
  std::vector<std::future<absl::Status>> results;
  for (int i = 0; i < map.server_addresses_size(); ++i) {
    results.push_back(std::async(std::launch::async, call, i, map.server_addresses(i)));
  }
  absl::Status first;
  for (auto& r : results) {
    absl::Status st = r.get();
    if (first.ok() && !st.ok()) first = st;
  }
  return first;
}

// What the checkpointer remembers between checkpoints: the chain of the last
// complete one (empty until the first; then the next one is FULL).
struct ChainState {
  std::vector<std::string> chain;
};

// Asks every server to write its files at `clock` (a delta on `base_clock`
// if `delta`); fills `responses`. The first server error, naming it.
absl::Status WriteServerFiles(const PartitionMapProto& map, const std::string& root,
                              uint64_t clock, bool delta, uint64_t base_clock,
                              std::vector<CheckpointResponse>* responses) {
  responses->assign(map.server_addresses_size(), CheckpointResponse());
  return ForEachServer(map, [&](int i, const std::string& address) {
    CheckpointRequest request;
    request.set_dir(root);
    request.set_clock(clock);
    request.set_delta(delta);
    request.set_base_clock(base_clock);
    grpc::ClientContext ctx;
    ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(30)));
    absl::Status s = FromGrpcStatus(Stub(address)->Checkpoint(&ctx, request, &(*responses)[i]));
    if (!s.ok()) {
      return absl::Status(s.code(), absl::StrCat("server ", i, " (", address, "): ", s.message()));
    }
    return s;
  });
}

}  // namespace

JobCoordinator::Checkpointer MakeCheckpointer(const JobConfig& config, MapGetter get_map) {
  auto state = std::make_shared<ChainState>();
  return [config, get_map, state](
             uint64_t clock, const std::map<uint32_t, std::string>& positions) -> absl::Status {
    std::optional<PartitionMapProto> map = get_map();
    if (!map) return absl::FailedPreconditionError("checkpoint: no partition map yet");
    const std::string root = config.checkpoint().dir();
    // A delta on the previous complete checkpoint, unless this is the first
    // one or the chain already has kMaxDeltasPerFull deltas.
    bool delta = config.checkpoint().delta() && !state->chain.empty() &&
                 state->chain.size() <= checkpoint::kMaxDeltasPerFull;
    const std::string base_id = delta ? state->chain.back() : "";
    const uint64_t base_clock = delta ? *checkpoint::ParseCheckpointId(base_id) : 0;
    std::vector<CheckpointResponse> responses;
    absl::Status st = WriteServerFiles(*map, root, clock, delta, base_clock, &responses);
    if (delta && absl::IsFailedPrecondition(st)) {
      // A server without the base (e.g. restarted): everyone writes in full.
      LOG(WARNING) << "delta checkpoint at clock " << clock << " refused (" << st.message()
                   << "); writing a full one";
      delta = false;
      st = WriteServerFiles(*map, root, clock, false, 0, &responses);
    }
    if (!st.ok()) return st;
    checkpoint::CheckpointManifest manifest;
    manifest.set_format_version(checkpoint::kManifestFormatVersion);
    manifest.set_checkpoint_id(checkpoint::CheckpointId(clock));
    manifest.set_clock(clock);
    manifest.set_job_name(config.name());
    manifest.set_config_fingerprint(ConfigFingerprint(config));
    manifest.set_num_partitions(config.cluster().num_partitions());
    if (delta) {
      manifest.set_kind(checkpoint::CheckpointManifest::DELTA);
      manifest.set_base_id(base_id);
      for (const std::string& id : state->chain) manifest.add_chain(id);
    } else {
      manifest.set_kind(checkpoint::CheckpointManifest::FULL);
    }
    manifest.add_chain(checkpoint::CheckpointId(clock));
    manifest.set_created_unix_micros(absl::ToUnixMicros(absl::Now()));
    for (const CheckpointResponse& r : responses) {
      for (const auto& file : r.written()) *manifest.add_files() = file;
    }
    for (const auto& [rank, position] : positions) {
      auto* p = manifest.add_worker_positions();
      p->set_rank(rank);
      p->set_position(position);
    }
    const std::string dir = checkpoint::CheckpointPath(root, clock);
    st = checkpoint::WriteManifest(dir, manifest);
    if (!st.ok()) return st;
    state->chain.assign(manifest.chain().begin(), manifest.chain().end());
    checkpoint::GcOptions gc;
    gc.keep = config.checkpoint().keep();
    auto collected = checkpoint::GarbageCollect(root, gc);
    if (!collected.ok()) LOG(WARNING) << "checkpoint GC: " << collected.status();
    return absl::OkStatus();
  };
}

namespace {

// One server's Restore RPC; errors name the server.
absl::StatusOr<RestoreResponse> RestoreOn(uint32_t index, const std::string& address,
                                          const RestoreRequest& request) {
  RestoreResponse response;
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Minutes(30)));
  const absl::Status s = FromGrpcStatus(Stub(address)->Restore(&ctx, request, &response));
  if (!s.ok()) {
    return absl::Status(s.code(),
                        absl::StrCat("server ", index, " (", address, "): ", s.message()));
  }
  return response;
}

}  // namespace

std::function<absl::Status()> MakeRestorer(const JobConfig& config, MapGetter get_map,
                                           const std::string& checkpoint_dir) {
  return [get_map, checkpoint_dir]() -> absl::Status {
    std::optional<PartitionMapProto> map = get_map();
    if (!map) return absl::FailedPreconditionError("restore: no partition map yet");
    RestoreRequest request;
    request.set_manifest(checkpoint_dir);
    return ForEachServer(*map, [&](int i, const std::string& address) -> absl::Status {
      auto response = RestoreOn(i, address, request);
      if (!response.ok()) return response.status();
      LOG(INFO) << "server " << i << " restored " << response->rows() << " rows from "
                << response->files_read() << " files of " << checkpoint_dir;
      return absl::OkStatus();
    });
  };
}

ServerRestorer MakeServerRestorer(const JobConfig& config) {
  RestoreRequest request;
  request.set_root(config.checkpoint().dir());  // The latest complete checkpoint.
  return [request](uint32_t index, const std::string& address) -> absl::Status {
    auto response = RestoreOn(index, address, request);
    if (!response.ok()) return response.status();
    LOG(INFO) << "partial recovery: server " << index << " restored " << response->rows()
              << " rows of its partitions from " << response->checkpoint_dir() << " (clock "
              << response->clock() << "); the other servers and the workers went on";
    return absl::OkStatus();
  };
}

absl::StatusOr<JobCoordinator::Resume> FindResume(const JobConfig& config, MapGetter map) {
  auto latest = checkpoint::LatestComplete(config.checkpoint().dir());
  if (!latest.ok()) return latest.status();
  // Job name and partition count must match; the servers check every
  // table's schema per file. (The config fingerprint is not compared: it
  // includes the server count, and a checkpoint may be restored onto another.)
  if (latest->manifest.job_name() != config.name() ||
      latest->manifest.num_partitions() != config.cluster().num_partitions()) {
    return absl::FailedPreconditionError(absl::StrCat(
        latest->dir, ": checkpoint of job \"", latest->manifest.job_name(), "\" with ",
        latest->manifest.num_partitions(), " partitions; this job is \"", config.name(),
        "\" with ", config.cluster().num_partitions()));
  }
  JobCoordinator::Resume resume;
  resume.clock = latest->manifest.clock();
  for (const auto& p : latest->manifest.worker_positions()) {
    resume.positions[p.rank()] = p.position();
  }
  resume.restore = MakeRestorer(config, std::move(map), latest->dir);
  LOG(INFO) << "resuming from " << latest->dir << " at clock " << resume.clock;
  return resume;
}

}  // namespace shardps

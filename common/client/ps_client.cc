#include "common/client/ps_client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/client/ps_channel.h"
#include "common/client/ps_client_wire.h"
#include "common/generation.h"
#include "common/grpc_status.h"
#include "glog/logging.h"
#include "proto/ps.grpc.pb.h"

namespace shardps {
namespace {

using ps_client_internal::AddPullTable;
using ps_client_internal::AddPushTable;
using ps_client_internal::Part;
using ps_client_internal::ScatterPull;
using ps_client_internal::TableRef;

ValueEncoding ToProto(Encoding e) {
  switch (e) {
    case Encoding::kFp16:
      return FP16;
    case Encoding::kBf16:
      return BF16;
    default:
      return FP32;
  }
}

bool Retryable(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
         s.error_code() == grpc::StatusCode::ABORTED;
}

}  // namespace

class PsClient::Impl {
 public:
  Impl(const Options& options, MapSource source)
      : options_(options), source_(std::move(source)), generation_(options.generation) {}

  uint64_t generation() const { return generation_.load(std::memory_order_acquire); }
  void set_generation(uint64_t g) { generation_.store(g, std::memory_order_release); }

  absl::Status SetMap(const PartitionMapProto& proto) {
    std::vector<uint32_t> owners(proto.owner().begin(), proto.owner().end());
    auto map =
        PartitionMap::FromOwners(proto.version(), std::move(owners), proto.server_addresses_size());
    if (!map.ok()) return map.status();
    std::vector<std::shared_ptr<ParameterServer::Stub>> stubs;
    for (const std::string& address : proto.server_addresses()) {
      auto stub = NewParameterServerStub(address, options_.max_message_bytes);
      if (!stub.ok()) return stub.status();
      stubs.push_back(*std::move(stub));
    }
    MutexLock lock(&mu_);
    if (map_ && map_->version() > proto.version()) return absl::OkStatus();
    map_ = std::make_shared<const PartitionMap>(*std::move(map));
    stubs_ = std::move(stubs);
    return absl::OkStatus();
  }

  // A server refused `stale_version`: fetch a newer map, unless another
  // operation already did (asking for current + 1 would wait for a map that
  // may never come).
  absl::Status Refresh(uint64_t stale_version) {
    if (map_version() > stale_version) return absl::OkStatus();
    auto proto = source_ ? source_(stale_version + 1) : absl::UnavailableError("no map source");
    if (!proto.ok()) return proto.status();
    return SetMap(*proto);
  }

  uint64_t map_version() const {
    MutexLock lock(&mu_);
    return map_ ? map_->version() : 0;
  }

  // Groups the given (table, positions) by server under the current map,
  // splitting parts that would exceed the message size.
  std::vector<Part> Group(const std::vector<TableRef>& tables,
                          const std::vector<std::pair<uint32_t, std::vector<uint32_t>>>& subset,
                          bool to_every_server, std::shared_ptr<const PartitionMap>* map_out,
                          std::vector<std::shared_ptr<ParameterServer::Stub>>* stubs_out) {
    std::shared_ptr<const PartitionMap> map;
    {
      MutexLock lock(&mu_);
      map = map_;
      *stubs_out = stubs_;
    }
    *map_out = map;
    const uint32_t servers = map->num_servers();
    std::vector<std::vector<std::pair<uint32_t, std::vector<uint32_t>>>> per_server(servers);
    for (const auto& [t, positions] : subset) {
      std::vector<std::vector<uint32_t>> by_server(servers);
      if (servers == 1) {
        by_server[0] = positions;  // One server owns every key.
      } else {
        for (uint32_t pos : positions) {
          by_server[map->ServerOf(tables[t].table_id, tables[t].keys[pos])].push_back(pos);
        }
      }
      for (uint32_t s = 0; s < servers; ++s) {
        if (!by_server[s].empty()) per_server[s].emplace_back(t, std::move(by_server[s]));
      }
    }
    std::vector<Part> parts;
    const uint64_t budget = options_.max_message_bytes * 9 / 10;
    for (uint32_t s = 0; s < servers; ++s) {
      if (per_server[s].empty()) {
        if (to_every_server) parts.push_back(Part{s, {}});
        continue;
      }
      Part part{s, {}};
      uint64_t bytes = 0;
      for (auto& [t, positions] : per_server[s]) {
        const uint64_t row = 8 + uint64_t{tables[t].dim} * BytesPerValue(options_.encoding);
        size_t begin = 0;
        while (begin < positions.size()) {
          const uint64_t room = budget > bytes ? (budget - bytes) / row : 0;
          if (room == 0 && !part.items.empty()) {
            parts.push_back(std::move(part));
            part = Part{s, {}};
            bytes = 0;
            continue;
          }
          const size_t take =
              std::min<size_t>(positions.size() - begin, std::max<uint64_t>(room, 1));
          part.items.emplace_back(t, std::vector<uint32_t>(positions.begin() + begin,
                                                           positions.begin() + begin + take));
          bytes += take * row;
          begin += take;
        }
      }
      parts.push_back(std::move(part));
    }
    return parts;
  }

  const Options& options() const { return options_; }

  void Count(uint32_t table_id, bool pull, uint64_t bytes) {
    MutexLock lock(&traffic_mu_);
    TableTraffic& t = traffic_[table_id];
    (pull ? t.pull_bytes : t.push_bytes) += bytes;
  }
  std::map<uint32_t, TableTraffic> Traffic() const {
    MutexLock lock(&traffic_mu_);
    return traffic_;
  }

 private:
  const Options options_;
  const MapSource source_;
  std::atomic<uint64_t> generation_;
  mutable Mutex mu_;
  std::shared_ptr<const PartitionMap> map_ ABSL_GUARDED_BY(mu_);
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs_ ABSL_GUARDED_BY(mu_);
  mutable Mutex traffic_mu_;
  std::map<uint32_t, TableTraffic> traffic_ ABSL_GUARDED_BY(traffic_mu_);
};

namespace {

// A pull or a push in flight: its parts, their answers, and the retry loop.
class RpcOp final : public PsClient::Op {
 public:
  RpcOp(PsClient::Impl* impl, bool is_pull, std::vector<TableRef> tables, PullPurpose purpose,
        uint64_t clock, float lr_scale, bool to_every_server)
      : impl_(impl),
        is_pull_(is_pull),
        tables_(std::move(tables)),
        purpose_(purpose),
        clock_(clock),
        lr_scale_(lr_scale),
        to_every_server_(to_every_server),
        generation_(impl->generation()) {
    const PsClient::Options& o = impl->options();
    exit_mid_push_ = !is_pull && o.testing_exit_mid_push_clock == clock &&
                     !std::filesystem::exists(o.testing_exit_mid_push_marker);
    std::vector<std::pair<uint32_t, std::vector<uint32_t>>> all;
    for (uint32_t t = 0; t < tables_.size(); ++t) {
      std::vector<uint32_t> positions(tables_[t].n);
      for (uint32_t i = 0; i < positions.size(); ++i) positions[i] = i;
      all.emplace_back(t, std::move(positions));
    }
    Issue(all, to_every_server_);
  }

  ~RpcOp() override { WaitForCalls(); }

  absl::Status Wait() override {
    if (exit_mid_push_) ExitMidPush();
    absl::Duration backoff = absl::Milliseconds(20);
    const absl::Time started = absl::Now();
    for (int attempt = 1;; ++attempt) {
      WaitForCalls();
      std::vector<std::pair<uint32_t, std::vector<uint32_t>>> again;
      bool aborted = false;
      grpc::Status last;
      for (auto& call : calls_) {
        if (call->status.ok()) continue;
        if (!Retryable(call->status)) return FromGrpcStatus(call->status);
        aborted |= call->status.error_code() == grpc::StatusCode::ABORTED;
        last = call->status;
        for (auto& item : call->part.items) again.push_back(item);
        if (call->part.items.empty()) empty_servers_.push_back(call->part.server);
      }
      if (!decode_error_.ok()) return decode_error_;
      if (last.ok()) return absl::OkStatus();
      if (const auto& newest = impl_->options().newest_generation; newest) {
        const uint64_t g = newest();
        if (g > generation_) return StaleGenerationError("the scheduler", generation_, g);
      }
      if (attempt >= impl_->options().max_attempts &&
          absl::Now() - started >= impl_->options().retry_budget) {
        return absl::Status(FromGrpcStatus(last).code(),
                            absl::StrCat("after ", attempt, " attempts: ", last.error_message()));
      }
      // A server that stays unreachable may have been restarted elsewhere:
      // the scheduler then has a newer map. (One that answers "not yet in
      // generation" is up at the address the map has.)
      const bool unreachable = last.error_code() == grpc::StatusCode::UNAVAILABLE &&
                               !IsNotYetInGeneration(FromGrpcStatus(last));
      if (aborted || (unreachable && attempt >= 3)) {
        const absl::Status st = impl_->Refresh(used_version_);
        if (!st.ok()) LOG(WARNING) << "refreshing the partition map: " << st;
      } else {
        // In slices: a rollback announced meanwhile ends the wait.
        const auto& newest = impl_->options().newest_generation;
        for (absl::Duration slept; slept < backoff; slept += absl::Milliseconds(50)) {
          if (newest && newest() > generation_) break;
          absl::SleepFor(std::min(absl::Milliseconds(50), backoff - slept));
        }
        backoff = std::min(backoff * 2, absl::Seconds(2));
      }
      LOG(INFO) << (is_pull_ ? "pull" : "push") << " attempt " << attempt << " failed ("
                << last.error_message() << "); retrying";
      // Empty BSP pushes that failed go again too (to the same server index).
      const bool resend_empty = !empty_servers_.empty();
      empty_servers_.clear();
      Issue(again, resend_empty && to_every_server_);
    }
  }

 private:
  struct Call {
    Part part;
    grpc::ClientContext ctx;
    PullRequest pull_req;
    PullResponse pull_resp;
    PushRequest push_req;
    PushResponse push_resp;
    grpc::Status status;
  };

  void Issue(const std::vector<std::pair<uint32_t, std::vector<uint32_t>>>& subset,
             bool to_every_server) {
    std::shared_ptr<const PartitionMap> map;
    std::vector<std::shared_ptr<ParameterServer::Stub>> stubs;
    std::vector<Part> parts = impl_->Group(tables_, subset, to_every_server, &map, &stubs);
    if (exit_mid_push_ && parts.size() > 1) {
      auto lowest = std::min_element(parts.begin(), parts.end(), [](const Part& a, const Part& b) {
        return a.server < b.server;
      });
      Part only = std::move(*lowest);
      parts.clear();
      parts.push_back(std::move(only));
    }
    stubs_ = stubs;  // Keep the stubs alive while calls run.
    used_version_ = map->version();
    calls_.clear();
    {
      MutexLock lock(&mu_);
      remaining_ = parts.size();
    }
    for (Part& part : parts) {
      auto call = std::make_unique<Call>();
      call->part = std::move(part);
      call->ctx.set_deadline(absl::ToChronoTime(absl::Now() + impl_->options().timeout));
      Call* c = call.get();
      calls_.push_back(std::move(call));
      auto* stub = stubs[c->part.server].get();
      if (is_pull_) {
        BuildPull(map->version(), c);
        stub->async()->Pull(&c->ctx, &c->pull_req, &c->pull_resp,
                            [this, c](grpc::Status s) { Done(c, std::move(s)); });
      } else {
        BuildPush(map->version(), c);
        stub->async()->Push(&c->ctx, &c->push_req, &c->push_resp,
                            [this, c](grpc::Status s) { Done(c, std::move(s)); });
      }
    }
  }

  void BuildPull(uint64_t version, Call* c) {
    PullRequest& r = c->pull_req;
    r.set_map_version(version);
    r.set_purpose(purpose_);
    r.set_encoding(ToProto(impl_->options().encoding));
    r.set_worker_rank(impl_->options().worker_rank);
    r.set_clock(clock_);
    r.set_generation(generation_);
    r.set_refuse_applied_clock(impl_->options().refuse_applied_clock && purpose_ == TRAIN);
    for (const auto& [t, positions] : c->part.items) AddPullTable(tables_[t], positions, &r);
  }

  void BuildPush(uint64_t version, Call* c) {
    PushRequest& r = c->push_req;
    r.set_map_version(version);
    r.set_encoding(ToProto(impl_->options().encoding));
    r.set_worker_rank(impl_->options().worker_rank);
    r.set_clock(clock_);
    r.set_lr_scale(lr_scale_);
    r.set_generation(generation_);
    for (const auto& [t, positions] : c->part.items) {
      AddPushTable(tables_[t], positions, impl_->options().encoding, &r);
    }
  }

  // Counts a successful part's payload bytes per table.
  void CountTraffic(const Call* c) {
    for (size_t i = 0; i < c->part.items.size(); ++i) {
      const uint32_t table_id = tables_[c->part.items[i].first].table_id;
      uint64_t bytes;
      if (is_pull_) {
        bytes = c->pull_req.tables(i).ByteSizeLong();
        if (static_cast<int>(i) < c->pull_resp.tables_size()) {
          bytes += c->pull_resp.tables(i).ByteSizeLong();
        }
      } else {
        bytes = c->push_req.tables(i).ByteSizeLong();
      }
      impl_->Count(table_id, is_pull_, bytes);
    }
  }

  void Done(Call* c, grpc::Status status) {
    if (!is_pull_ && status.error_code() == grpc::StatusCode::ALREADY_EXISTS) {
      // BSP: this server already holds this rank's push of this clock (a
      // retried push whose first answer was lost, or a restarted worker
      // redoing its step): the gradient it has is the one to apply.
      LOG(INFO) << "push: " << status.error_message() << "; keeping the first";
      status = grpc::Status::OK;
    }
    if (status.ok() && is_pull_) {
      const absl::Status st =
          ScatterPull(tables_, c->part, c->pull_resp, impl_->options().encoding);
      if (!st.ok()) status = ToGrpcStatus(st);
    }
    if (status.ok()) CountTraffic(c);
    MutexLock lock(&mu_);
    c->status = std::move(status);
    if (--remaining_ == 0) done_.SignalAll();
  }

  // Options::testing_exit_mid_push_clock.
  [[noreturn]] void ExitMidPush() {
    WaitForCalls();
    const PsClient::Options& o = impl_->options();
    std::ofstream(o.testing_exit_mid_push_marker) << clock_ << "\n";
    LOG(WARNING) << "testing: exiting after pushing clock " << clock_ << " to server "
                 << (calls_.empty() ? 0 : calls_[0]->part.server) << " only ("
                 << (calls_.empty() ? "no call" : calls_[0]->status.error_message()) << ")";
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(86);
  }

  void WaitForCalls() {
    MutexLock lock(&mu_);
    while (remaining_ > 0) done_.Wait(&mu_);
  }

  PsClient::Impl* const impl_;
  const bool is_pull_;
  const std::vector<TableRef> tables_;
  const PullPurpose purpose_;
  const uint64_t clock_;
  const float lr_scale_;
  const bool to_every_server_;
  const uint64_t generation_;  // Of every attempt of this op.
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs_;
  std::vector<std::unique_ptr<Call>> calls_;
  std::vector<uint32_t> empty_servers_;
  uint64_t used_version_ = 0;   // The map version of the calls in flight.
  bool exit_mid_push_ = false;  // Options::testing_exit_mid_push_clock.
  absl::Status decode_error_;
  Mutex mu_;
  CondVar done_;
  size_t remaining_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace

absl::StatusOr<std::unique_ptr<PsClient>> PsClient::Create(const Options& options,
                                                           const PartitionMapProto& map,
                                                           MapSource map_source) {
  auto impl = std::make_unique<Impl>(options, std::move(map_source));
  const absl::Status st = impl->SetMap(map);
  if (!st.ok()) return st;
  return std::unique_ptr<PsClient>(new PsClient(std::move(impl)));
}

PsClient::PsClient(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PsClient::~PsClient() = default;

uint64_t PsClient::map_version() const { return impl_->map_version(); }

Encoding PsClient::encoding() const { return impl_->options().encoding; }

std::map<uint32_t, TableTraffic> PsClient::Traffic() const { return impl_->Traffic(); }

void PsClient::set_generation(uint64_t generation) { impl_->set_generation(generation); }

absl::Status PsClient::UpdateMap(const PartitionMapProto& map) { return impl_->SetMap(map); }

std::unique_ptr<PsClient::Op> PsClient::PullAsync(std::vector<TablePull> tables,
                                                  PullPurpose purpose, uint64_t clock) {
  std::vector<TableRef> refs;
  for (const TablePull& t : tables) {
    refs.push_back({t.table_id, t.dim + t.state, t.keys, t.n, t.out, nullptr, false, t.state > 0});
  }
  return std::make_unique<RpcOp>(impl_.get(), true, std::move(refs), purpose, clock, 1.0f, false);
}

std::unique_ptr<PsClient::Op> PsClient::PushAsync(std::vector<TablePush> tables, uint64_t clock,
                                                  float lr_scale, bool to_every_server) {
  std::vector<TableRef> refs;
  for (const TablePush& t : tables) {
    refs.push_back({t.table_id, t.dim, t.keys, t.n, nullptr, t.grads, t.sparse, false});
  }
  return std::make_unique<RpcOp>(impl_.get(), false, std::move(refs), TRAIN, clock, lr_scale,
                                 to_every_server);
}

absl::Status PsClient::InitRows(uint32_t table_id, uint32_t dim, const uint64_t* keys, size_t n,
                                const float* values) {
  // Chunk rows go to their owners one request per key: this runs once per job.
  std::shared_ptr<const PartitionMap> map;
  std::vector<std::shared_ptr<ParameterServer::Stub>> stubs;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> all;
  for (int attempt = 0; attempt < impl_->options().max_attempts; ++attempt) {
    std::vector<TableRef> refs = {{table_id, dim, keys, n, nullptr, values, false, false}};
    std::vector<uint32_t> positions(n);
    for (uint32_t i = 0; i < n; ++i) positions[i] = i;
    std::vector<Part> parts = impl_->Group(refs, {{0, positions}}, false, &map, &stubs);
    absl::Status result = absl::OkStatus();
    for (const Part& part : parts) {
      InitRowsRequest request;
      request.set_map_version(map->version());
      request.set_table_id(table_id);
      for (uint32_t pos : part.items[0].second) {
        request.add_keys(keys[pos]);
        EncodeValues(values + size_t{pos} * dim, dim, Encoding::kFp32, request.mutable_values());
      }
      grpc::ClientContext ctx;
      ctx.set_deadline(absl::ToChronoTime(absl::Now() + impl_->options().timeout));
      InitRowsResponse response;
      const grpc::Status st = stubs[part.server]->InitRows(&ctx, request, &response);
      if (!st.ok()) result = FromGrpcStatus(st);
    }
    if (result.ok()) return result;
    if (!absl::IsAborted(result) && !absl::IsUnavailable(result)) return result;
    if (absl::IsAborted(result)) (void)impl_->Refresh(map->version());
    absl::SleepFor(absl::Milliseconds(100 << std::min(attempt, 4)));
  }
  return absl::UnavailableError("InitRows: servers unreachable");
}

}  // namespace shardps

#include "replica/replica_service.h"

#include <memory>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/grpc_status.h"
#include "common/metrics.h"

namespace shardps {
namespace replica {
namespace {

// Predict's latency (validation to answer) and lines scored.
struct PredictMetrics {
  prometheus::Histogram& seconds = metrics::GetHistogram(
      "shardps_replica_predict_seconds", "Predict calls answered: time from request to answer.",
      metrics::LatencyBuckets());
  prometheus::Counter& lines = metrics::GetCounter("shardps_replica_predict_lines_total",
                                                   "Lines scored by Predict calls answered.");
};

PredictMetrics& Pm() {
  static PredictMetrics* m = new PredictMetrics();
  return *m;
}

absl::Status Unavailable() {
  return absl::UnavailableError("replica: no version loaded yet (no complete checkpoint read)");
}

absl::Status ValidatePredict(const PredictRequest& request) {
  if (static_cast<size_t>(request.lines_size()) > kMaxPredictLines) {
    return absl::InvalidArgumentError(
        absl::StrCat(request.lines_size(), " lines; at most ", kMaxPredictLines, " per Predict"));
  }
  for (int i = 0; i < request.lines_size(); ++i) {
    if (request.lines(i).size() > kMaxLineBytes) {
      return absl::InvalidArgumentError(absl::StrCat("line ", i, ": ", request.lines(i).size(),
                                                     " bytes; at most ", kMaxLineBytes));
    }
  }
  return absl::OkStatus();
}

}  // namespace

grpc::Status ReplicaService::Predict(grpc::ServerContext*, const PredictRequest* request,
                                     PredictResponse* response) {
  const absl::Time start = absl::Now();
  if (absl::Status st = ValidatePredict(*request); !st.ok()) return ToGrpcStatus(st);
  const std::shared_ptr<ServedModel> model = replica_->Current();
  if (model == nullptr) return ToGrpcStatus(Unavailable());
  std::vector<absl::string_view> lines(request->lines().begin(), request->lines().end());
  std::vector<float> probs;
  if (absl::Status st = model->Predict(lines, &probs); !st.ok()) return ToGrpcStatus(st);
  response->set_version(model->clock());
  response->mutable_probabilities()->Assign(probs.begin(), probs.end());
  Pm().seconds.Observe(absl::ToDoubleSeconds(absl::Now() - start));
  Pm().lines.Increment(static_cast<double>(probs.size()));
  return grpc::Status::OK;
}

grpc::Status ReplicaService::Lookup(grpc::ServerContext*, const LookupRequest* request,
                                    LookupResponse* response) {
  if (static_cast<size_t>(request->keys_size()) > kMaxLookupKeys) {
    return ToGrpcStatus(absl::InvalidArgumentError(
        absl::StrCat(request->keys_size(), " keys; at most ", kMaxLookupKeys, " per Lookup")));
  }
  const std::shared_ptr<ServedModel> model = replica_->Current();
  if (model == nullptr) return ToGrpcStatus(Unavailable());
  uint32_t dim = 0;
  std::vector<bool> found;
  std::vector<float> values;
  absl::Status st = model->Lookup(request->table_id(),
                                  absl::MakeConstSpan(request->keys().data(), request->keys_size()),
                                  &dim, &found, &values);
  if (!st.ok()) return ToGrpcStatus(st);
  response->set_version(model->clock());
  response->set_dim(dim);
  response->mutable_found()->Reserve(static_cast<int>(found.size()));
  for (bool f : found) response->add_found(f);
  response->mutable_values()->Assign(values.begin(), values.end());
  return grpc::Status::OK;
}

grpc::Status ReplicaService::Status(grpc::ServerContext*, const ReplicaStatusRequest*,
                                    ReplicaStatusResponse* response) {
  const ReplicaStatus s = replica_->Status();
  response->set_version(s.version);
  response->set_loaded(s.loaded);
  response->set_generation(s.generation);
  response->set_table_hash(s.table_hash);
  response->set_rows(s.rows);
  response->set_checkpoint_dir(s.checkpoint_dir);
  response->set_versions_applied(s.versions_applied);
  response->set_last_error(s.last_error);
  response->set_rollbacks(s.rollbacks);
  response->set_newest_checkpoint(s.newest_on_disk);
  response->set_streaming(s.streaming);
  response->set_stream_error(s.stream_error);
  response->set_stream_versions(s.stream_versions);
  response->set_stream_bytes(s.stream_bytes);
  response->set_resyncs(s.resyncs);
  response->set_verified_versions(s.verified_versions);
  response->set_hash_mismatches(s.hash_mismatches);
  response->set_pushes_timed(s.pushes_timed);
  response->set_push_to_serve_p50_seconds(absl::ToDoubleSeconds(s.push_to_serve_p50));
  response->set_push_to_serve_p99_seconds(absl::ToDoubleSeconds(s.push_to_serve_p99));
  response->set_push_to_serve_max_seconds(absl::ToDoubleSeconds(s.push_to_serve_max));
  return grpc::Status::OK;
}

}  // namespace replica
}  // namespace shardps

// ReplicaService: the gRPC shell of a Replica (proto/replica.proto). Thin and
// stateless: it validates each request, takes the current version once,
// answers from it alone and stamps the answer with its version.
//
// Validation (INVALID_ARGUMENT, nothing computed): Predict with more than
// kMaxPredictLines lines, or a line longer than kMaxLineBytes or one the
// job's line parser refuses ("line <i>: <why>", i 0-based in the request);
// Lookup with more than kMaxLookupKeys keys or an unknown table id. Before
// the replica has a version, Predict and Lookup answer UNAVAILABLE.
//
// Metrics: shardps_replica_predict_seconds (histogram, answered Predict
// calls) and shardps_replica_predict_lines_total.
//
// Thread-safety: as the Replica (every handler may run concurrently).
#ifndef SHARDPS_REPLICA_REPLICA_SERVICE_H_
#define SHARDPS_REPLICA_REPLICA_SERVICE_H_

#include <cstddef>

#include "proto/replica.grpc.pb.h"
#include "replica/replica.h"

namespace shardps {
namespace replica {

inline constexpr size_t kMaxPredictLines = 4096;
inline constexpr size_t kMaxLineBytes = 65536;
inline constexpr size_t kMaxLookupKeys = 65536;

class ReplicaService final : public ::shardps::Replica::Service {
 public:
  // `replica` must outlive the service.
  explicit ReplicaService(Replica* replica) : replica_(replica) {}

  grpc::Status Predict(grpc::ServerContext* context, const PredictRequest* request,
                       PredictResponse* response) override;
  grpc::Status Lookup(grpc::ServerContext* context, const LookupRequest* request,
                      LookupResponse* response) override;
  grpc::Status Status(grpc::ServerContext* context, const ReplicaStatusRequest* request,
                      ReplicaStatusResponse* response) override;

 private:
  Replica* const replica_;
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_REPLICA_SERVICE_H_

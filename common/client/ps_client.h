// PsClient: the worker's view of the sharded parameter servers.
//
// A pull or push names, per table, *unique* keys (the caller deduplicates:
// worker/model/dedup.h) and a caller-owned buffer of keys.size() * dim floats.
// The client groups keys by server through the partition map, sends one
// request per server (split when it would exceed max_message_bytes), all in
// parallel, and scatters the answers back into the caller's buffer.
//
// Asynchronous: PullAsync/PushAsync return an Op at once; Op::Wait() blocks
// until every part is answered. The caller's key and value buffers must stay
// alive and untouched until Wait() returns.
//
// Retries, inside Wait(): UNAVAILABLE and DEADLINE_EXCEEDED parts are resent
// with backoff (at least Options::max_attempts times, and for at least
// Options::retry_budget: a server being restarted and restored must not
// fail the worker); an ABORTED part (the server does
// not own a partition at our map version) makes the client fetch a newer map
// from `map_source` and resend only that part, regrouped; so does a server
// unreachable three times in a row (restarted at another address). Other errors
// (INVALID_ARGUMENT...) are returned as they are, a refusal for a stale job
// generation (common/generation.h IsStaleGeneration) among them: the job
// rolled back and the caller must restart from the scheduler's start point.
// A push resent after UNAVAILABLE may be applied twice if only the answer was
// lost.
//
// Every pull and push carries the job generation (set_generation); a server
// not yet restored into it answers UNAVAILABLE, which is retried.
//
// Thread-safe: several ops may be in flight from several threads.
#ifndef SHARDPS_COMMON_CLIENT_PS_CLIENT_H_
#define SHARDPS_COMMON_CLIENT_PS_CLIENT_H_

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/codec.h"
#include "common/mutex.h"
#include "common/partition.h"
#include "proto/ps.pb.h"
#include "proto/scheduler.pb.h"

namespace shardps {

// One table's part of a pull: `out` receives n * dim floats.
struct TablePull {
  uint32_t table_id = 0;
  uint32_t dim = 0;
  const uint64_t* keys = nullptr;
  size_t n = 0;
  float* out = nullptr;
  // Floats of optimizer state to pull after each row's weights (the table's
  // optimizer's StateSize(), server/optimizer.h); then `out` holds
  // n * (dim + state) floats. 0: weights only. A TRAIN pull of a client
  // with FP32 encoding, of a table without admission; the server refuses
  // any other (INVALID_ARGUMENT), and a state size other than its own
  // (DATA_LOSS).
  uint32_t state = 0;
};

// One table's part of a push: `grads` holds n * dim floats.
struct TablePush {
  uint32_t table_id = 0;
  uint32_t dim = 0;
  const uint64_t* keys = nullptr;
  size_t n = 0;
  const float* grads = nullptr;
  // Send only the non-zero gradients with their indices (ps.proto
  // SparseGradients) wherever that is smaller than the full rows: for a
  // mostly-zero gradient, such as a compressed dense gradient. The servers
  // apply exactly what a full push would.
  bool sparse = false;
};

// Payload bytes a client has exchanged for one table: keys and values of
// the requests and of the answers (protobuf sizes, without gRPC's framing),
// counted once per successful part.
struct TableTraffic {
  uint64_t pull_bytes = 0;
  uint64_t push_bytes = 0;
};

class PsClient {
 public:
  // Returns a map with version >= min_version (e.g. from the scheduler).
  using MapSource = std::function<absl::StatusOr<PartitionMapProto>(uint64_t min_version)>;

  struct Options {
    uint32_t worker_rank = 0;
    Encoding encoding = Encoding::kFp32;         // Values on the wire.
    absl::Duration timeout = absl::Seconds(60);  // Per RPC.
    int max_attempts = 8;
    absl::Duration retry_budget = absl::Seconds(60);
    uint64_t max_message_bytes = 64ull << 20;
    uint64_t generation = 0;  // The job generation requests carry at first.
    // The newest job generation known (e.g. from the scheduler's heartbeat
    // answers); may be null. An op whose parts keep failing gives up at
    // once, as stale, when it is newer than the op's generation: the job
    // rolled back and its retries are moot.
    std::function<uint64_t()> newest_generation;
    // BSP: training pulls carry PullRequest.refuse_applied_clock, and fail
    // with ALREADY_EXISTS where a server has applied their clock already.
    bool refuse_applied_clock = false;
    // Testing (ps_worker --testing_exit_mid_push): the push of this clock
    // goes to the lowest-indexed server of its parts only, and once that
    // server has answered the process exits with code 86, as one killed
    // between its pushes. Only while `testing_exit_mid_push_marker` does not
    // exist; it is created first (the restarted process goes on).
    std::optional<uint64_t> testing_exit_mid_push_clock;
    std::string testing_exit_mid_push_marker;
  };

  class Op {
   public:
    virtual ~Op() = default;
    // Blocks until done; OK or the first non-retryable error.
    virtual absl::Status Wait() = 0;
  };

  // `map` is the current partition map; `map_source` refreshes it.
  static absl::StatusOr<std::unique_ptr<PsClient>> Create(const Options& options,
                                                          const PartitionMapProto& map,
                                                          MapSource map_source);
  ~PsClient();
  PsClient(const PsClient&) = delete;
  PsClient& operator=(const PsClient&) = delete;

  // Pull for step `clock` (BSP servers hold it until clock-1 is applied).
  std::unique_ptr<Op> PullAsync(std::vector<TablePull> tables, PullPurpose purpose, uint64_t clock);
  // Push of step `clock`. `to_every_server`: also send empty pushes to
  // servers with no keys (BSP servers close a clock on every worker's push).
  std::unique_ptr<Op> PushAsync(std::vector<TablePush> tables, uint64_t clock, float lr_scale,
                                bool to_every_server);
  // Writes rows that do not exist yet (fp32), e.g. the model's initial dense
  // weights. Blocking.
  absl::Status InitRows(uint32_t table_id, uint32_t dim, const uint64_t* keys, size_t n,
                        const float* values);

  // Bytes exchanged so far, by table id.
  std::map<uint32_t, TableTraffic> Traffic() const;

  uint64_t map_version() const;
  // Values on the wire (Options::encoding).
  Encoding encoding() const;
  // The job generation of the pulls and pushes issued from now on.
  void set_generation(uint64_t generation);
  // Adopts `map` unless the client holds a newer one.
  absl::Status UpdateMap(const PartitionMapProto& map);

  class Impl;  // Internal (ps_client.cc).

 private:
  explicit PsClient(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardps

#endif  // SHARDPS_COMMON_CLIENT_PS_CLIENT_H_

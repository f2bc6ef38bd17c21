// ParamStore: where the trainer's parameters live, behind one interface.
//
//  - RemoteParamStore: the sharded parameter servers, through PsClient.
//  - LocalParamStore: in-process tables (server/table_store.h), the same
//    optimizer code the servers run: the single-machine baseline. A local
//    pull/push completes before the call returns.
//
// Both take unique keys per table and caller-owned buffers that must live
// until the returned Op's Wait() returns (PsClient's contract).
//
// Thread-safety: as PsClient / TableStore (safe for concurrent ops).
#ifndef SHARDPS_WORKER_PARAM_STORE_H_
#define SHARDPS_WORKER_PARAM_STORE_H_

#include <memory>
#include <vector>

#include "absl/status/statusor.h"
#include "common/client/ps_client.h"
#include "proto/config.pb.h"

namespace shardps {

class TableStore;

class ParamStore {
 public:
  virtual ~ParamStore() = default;
  virtual std::unique_ptr<PsClient::Op> Pull(std::vector<TablePull> tables, PullPurpose purpose,
                                             uint64_t clock) = 0;
  virtual std::unique_ptr<PsClient::Op> Push(std::vector<TablePush> tables, uint64_t clock,
                                             float lr_scale) = 0;
  virtual absl::Status InitRows(uint32_t table_id, uint32_t dim, const uint64_t* keys, size_t n,
                                const float* values) = 0;
  // Whether Pull serves TablePull::state (rows with their optimizer state):
  // remote stores with fp32 on the wire. Local ops complete at once, so
  // nothing is gained by them there.
  virtual bool PullsWithState() const { return false; }
  // The tables, when they are in this process (local mode); else nullptr.
  virtual TableStore* local_tables() { return nullptr; }
};

// `client` is owned. `bsp`: pushes go to every server (BSP closes clocks).
std::unique_ptr<ParamStore> MakeRemoteParamStore(std::unique_ptr<PsClient> client, bool bsp);

// In-process tables of `config`.
absl::StatusOr<std::unique_ptr<ParamStore>> MakeLocalParamStore(const JobConfig& config);

}  // namespace shardps

#endif  // SHARDPS_WORKER_PARAM_STORE_H_

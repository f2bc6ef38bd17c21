// The requests and answers of PsClient's calls (internal to
// common/client/ps_client): which rows of the caller's buffers go into a
// request to one server, and how an answer's rows come back.
//
// Thread-safety: pure functions over caller-owned data.
#ifndef SHARDPS_COMMON_CLIENT_PS_CLIENT_WIRE_H_
#define SHARDPS_COMMON_CLIENT_PS_CLIENT_WIRE_H_

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "common/codec.h"
#include "proto/ps.pb.h"

namespace shardps {
namespace ps_client_internal {

// A table's keys and values as an op sees them (pull or push).
struct TableRef {
  uint32_t table_id;
  uint32_t dim;  // Values a row: with_state, the weights' and the state's.
  const uint64_t* keys;
  size_t n;
  float* out;          // Pull.
  const float* grads;  // Push.
  bool sparse;         // Push: non-zeros only, where smaller.
  bool with_state;     // Pull: rows with their optimizer state.
};

// One request to one server: for each table (index into the op's tables),
// the positions of its keys that this server owns.
struct Part {
  uint32_t server = 0;
  std::vector<std::pair<uint32_t, std::vector<uint32_t>>> items;
};

// Appends a table of the keys at `positions` of `ref` to a pull request.
void AddPullTable(const TableRef& ref, const std::vector<uint32_t>& positions,
                  PullRequest* request);

// Appends a table of the keys at `positions` of `ref` and their gradients
// in `encoding` to a push request: the full rows, or, when ref.sparse and it
// is smaller, only the non-zero elements (SparseGradients).
void AddPushTable(const TableRef& ref, const std::vector<uint32_t>& positions, Encoding encoding,
                  PushRequest* request);

// Copies the rows of a pull answer to `part` into the tables' buffers.
// DATA_LOSS if the answer does not hold the rows asked for.
absl::Status ScatterPull(const std::vector<TableRef>& tables, const Part& part,
                         const PullResponse& answer, Encoding encoding);

}  // namespace ps_client_internal
}  // namespace shardps

#endif  // SHARDPS_COMMON_CLIENT_PS_CLIENT_WIRE_H_

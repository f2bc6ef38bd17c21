// What one request of a job member may cost a parameter server
// (docs/security.md, "What a member may cost"): bounds resolved once from the
// job config, when the TableStore is built, and written into the table's
// config, so that a check is one comparison on the request path.
//
//  - Keys per request (TableConfig.max_keys_per_request). A push, a training
//    pull (it creates rows) and an InitRows of a SPARSE table carry at most
//    this many keys to one server. 0 in the config = derived: training.
//    batch_size x the fields that feed the table (no `fields`: the 26
//    Criteo columns feed the first SPARSE table; a table no field feeds
//    counts as one field), x kMultiHotKeysPerField for TSV_MULTIHOT data
//    (a bag has no length limit of its own there: set the field to allow
//    longer bags). A worker pushes and pulls each unique key of its batch
//    once, so an honest request never exceeds it.
//  - Dense chunks (TableConfig.dense_size). A DENSE table with dense_size 0
//    gets the size of the model (model.dense_table of a DLRM: the worker's
//    flat buffer, worker/model/dlrm.cc); a dense table the config does not
//    size otherwise (a TORCHSCRIPT model's: servers do not load the module,
//    and its worker refuses a module larger than this) gets as many chunks
//    as one max_message_bytes message of fp32 values holds
//    (UnsizedDenseTableSize, common/config.h). Chunk indexes at or past it
//    are refused (pull, push, InitRows).
//  - Gradient magnitude (TableConfig.max_gradient_abs, 0 = 1e6). A gradient
//    element whose magnitude exceeds it is treated as a non-finite one: the
//    table's non_finite policy refuses the push (REJECT) or skips and counts
//    the row (SKIP_AND_COUNT). Squares of bounded gradients stay ~1e12, so
//    no optimizer state (Adagrad's sum, Adam's second moment, FTRL's n)
//    overflows to Inf for any number of pushes.
//
// Thread-safety: pure functions.
#ifndef SHARDPS_SERVER_REQUEST_LIMITS_H_
#define SHARDPS_SERVER_REQUEST_LIMITS_H_

#include <cstddef>
#include <cstdint>

#include "absl/status/statusor.h"
#include "common/codec.h"
#include "proto/config.pb.h"

namespace shardps {

inline constexpr float kDefaultMaxGradientAbs = 1e6f;
inline constexpr uint64_t kMultiHotKeysPerField = 64;

// The number of fp32 dense parameters of the job's model as the worker sizes
// it (DLRM: bottom MLP from data.num_dense, top MLP from the bottom's width
// plus the pairwise dots of 1 + #fields vectors, one final unit), or 0 if
// the config does not determine it (no bottom_mlp, no sparse table, another
// model kind: a TORCHSCRIPT module's size is in its file).
uint64_t ModelDenseParams(const JobConfig& config);

// `table` (of finalized `config`) with dense_size (DENSE), max_keys_per_request
// (SPARSE) and max_gradient_abs filled in as above. INVALID_ARGUMENT naming
// the table if max_gradient_abs is negative or not finite.
absl::StatusOr<TableConfig> ResolveLimits(const JobConfig& config, const TableConfig& table);

// FloatBits(bound) for a positive finite bound: |x| > bound exactly when
// (FloatBits(x) & 0x7fffffff) > the result, and NaN and Inf are above every
// finite bound, so one integer compare per element checks both.
inline uint32_t MagnitudeBits(float bound) { return FloatBits(bound); }

// The index of the first v[i] that is NaN, infinite or of magnitude above the
// bound given as MagnitudeBits(bound), or n if none. One pass, no branches
// per element.
size_t FirstBeyond(const float* v, size_t n, uint32_t bound_bits);
inline bool AllWithin(const float* v, size_t n, uint32_t bound_bits) {
  return FirstBeyond(v, n, bound_bits) == n;
}

}  // namespace shardps

#endif  // SHARDPS_SERVER_REQUEST_LIMITS_H_

// The checkpoint ps_score and ps_export load by default: the best one, when
// the job kept one.
//
// A job with periodic evaluation (training.eval_every_steps) writes
// <checkpoint.dir>/BEST, one line with the clock of its best evaluated
// checkpoint, which its garbage collection never removes
// (scheduler/eval_book.h). BestCheckpointClock reads it.
//
// Thread-compatible (reads files only).
#ifndef SHARDPS_WORKER_EXPORT_BEST_CHECKPOINT_H_
#define SHARDPS_WORKER_EXPORT_BEST_CHECKPOINT_H_

#include <cstdint>
#include <optional>
#include <string>

namespace shardps {
namespace exporter {

// The clock in <root>/BEST if that file exists, parses and names a
// checkpoint directory with a MANIFEST; nullopt otherwise (a BEST that is
// malformed or names a missing checkpoint is logged as a warning): then the
// latest complete checkpoint is the default.
std::optional<uint64_t> BestCheckpointClock(const std::string& root);

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_BEST_CHECKPOINT_H_

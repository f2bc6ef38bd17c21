// Evaluation cadence in epochs (training.eval_every_epochs) turned into the
// clocks the scheduler cuts checkpoints at (training.eval_every_steps).
//
// The scheduler needs the cadence in clocks and knows no data; the workers
// know their shards but not each other's. So the scheduler, once at start,
// counts the job's training lines itself: the lines of data.train_files
// (plain or gzip; it must be able to read them), or, for generated data,
// train_lines of data.synthetic_dir/best.txt when the scheduler sees it
// (the launcher generates the data set first; it may differ from the
// config's size), else data.synthetic_train_lines, the size the workers
// will generate (a Kubernetes scheduler does not mount the data). An epoch
// is then
//   clocks_per_epoch = ceil(lines / (num_workers x batch_size))
// clocks (every worker reads about lines / num_workers lines an epoch, one
// batch per clock), and
//   eval_every_steps = max(1, round(eval_every_epochs x clocks_per_epoch)).
// Workers only need to know that evaluation is periodic
// (PeriodicEvaluation in common/config.h), not its cadence.
//
// Thread-safety: pure functions (they read files).
#ifndef SHARDPS_COMMON_EVAL_CADENCE_H_
#define SHARDPS_COMMON_EVAL_CADENCE_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "proto/config.pb.h"

namespace shardps {

// Lines in `files` (a last line without '\n' counts; gzip read through).
// FAILED_PRECONDITION naming a file that cannot be read.
absl::StatusOr<uint64_t> CountLines(const std::vector<std::string>& files);

// worker/data/synthetic.h's default synthetic_train_lines.
inline constexpr uint64_t kDefaultSyntheticTrainLines = 400000;

// The training lines of `data`: counted in train_files, or train_lines of
// synthetic_dir/best.txt, or synthetic_train_lines (0: the default) when
// there is no best.txt. FAILED_PRECONDITION naming a train file that cannot
// be read, or a best.txt without train_lines.
absl::StatusOr<uint64_t> TrainingLines(const DataConfig& data);

// ceil(lines / (num_workers x batch_size)) for the config's (finalized)
// cluster and training; at least 1.
uint64_t ClocksPerEpoch(const JobConfig& config, uint64_t lines);

// With training.eval_every_epochs > 0: sets eval_every_steps from it (see
// above) and clears eval_every_epochs; *clocks_per_epoch (if not null)
// gets the epoch's clocks. Otherwise leaves the config as it is. Errors as
// TrainingLines.
absl::Status ResolveEvalEveryEpochs(JobConfig* config, uint64_t* clocks_per_epoch = nullptr);

}  // namespace shardps

#endif  // SHARDPS_COMMON_EVAL_CADENCE_H_

#include "common/eval_cadence.h"

#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace shardps {

absl::StatusOr<uint64_t> CountLines(const std::vector<std::string>& files) {
  uint64_t lines = 0;
  std::vector<char> buf(1 << 20);
  for (const std::string& path : files) {
    gzFile gz = gzopen(path.c_str(), "rb");  // Reads plain files as they are.
    if (gz == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(path, ": cannot open to count its lines: ", std::strerror(errno)));
    }
    char last = '\n';
    int n;
    while ((n = gzread(gz, buf.data(), static_cast<unsigned>(buf.size()))) > 0) {
      lines += std::count(buf.data(), buf.data() + n, '\n');
      last = buf[n - 1];
    }
    gzclose(gz);
    if (n < 0) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": read error counting its lines"));
    }
    if (last != '\n') ++lines;
  }
  return lines;
}

absl::StatusOr<uint64_t> TrainingLines(const DataConfig& data) {
  if (data.train_files_size() > 0) {
    return CountLines({data.train_files().begin(), data.train_files().end()});
  }
  const std::string path = data.synthetic_dir() + "/best.txt";
  if (std::ifstream in(path); in) {
    for (std::string key, value; in >> key >> value;) {
      uint64_t lines;
      if (key == "train_lines" && absl::SimpleAtoi(value, &lines)) return lines;
    }
    return absl::FailedPreconditionError(absl::StrCat(path, ": no train_lines"));
  }
  // Not generated yet (or not visible here): what the workers will generate.
  return data.synthetic_train_lines() > 0 ? data.synthetic_train_lines()
                                          : kDefaultSyntheticTrainLines;
}

uint64_t ClocksPerEpoch(const JobConfig& config, uint64_t lines) {
  const uint64_t per_clock = uint64_t{std::max(1u, config.cluster().num_workers())} *
                             std::max(1u, config.training().batch_size());
  return std::max<uint64_t>(1, (lines + per_clock - 1) / per_clock);
}

absl::Status ResolveEvalEveryEpochs(JobConfig* config, uint64_t* clocks_per_epoch) {
  const double epochs = config->training().eval_every_epochs();
  if (!(epochs > 0)) return absl::OkStatus();
  absl::StatusOr<uint64_t> lines = TrainingLines(config->data());
  if (!lines.ok()) return lines.status();
  const uint64_t clocks = ClocksPerEpoch(*config, *lines);
  const double every = std::max(1.0, std::round(epochs * static_cast<double>(clocks)));
  auto* training = config->mutable_training();
  training->set_eval_every_steps(static_cast<uint32_t>(std::min(every, 4294967295.0)));
  training->clear_eval_every_epochs();
  if (clocks_per_epoch != nullptr) *clocks_per_epoch = clocks;
  return absl::OkStatus();
}

}  // namespace shardps

#include "worker/export/best_checkpoint.h"

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "glog/logging.h"

namespace shardps {
namespace exporter {

std::optional<uint64_t> BestCheckpointClock(const std::string& root) {
  const std::string path = checkpoint::JoinPath(root, "BEST");
  auto text = checkpoint::ReadFileToString(path);
  if (!text.ok()) {
    if (!absl::IsNotFound(text.status())) LOG(WARNING) << path << ": " << text.status();
    return std::nullopt;
  }
  uint64_t clock = 0;
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(*text), &clock)) {
    LOG(WARNING) << path << " does not hold a clock; using the latest complete checkpoint";
    return std::nullopt;
  }
  const std::string manifest =
      checkpoint::JoinPath(checkpoint::CheckpointPath(root, clock), checkpoint::kManifestFileName);
  if (!checkpoint::FileSize(manifest).ok()) {
    LOG(WARNING) << path << " names the checkpoint at clock " << clock << ", but " << manifest
                 << " is missing; using the latest complete checkpoint";
    return std::nullopt;
  }
  LOG(INFO) << "loading the job's best checkpoint (clock " << clock << ", " << path << ")";
  return clock;
}

}  // namespace exporter
}  // namespace shardps

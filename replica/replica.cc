#include "replica/replica.h"

#include <filesystem>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "glog/logging.h"

namespace shardps {
namespace replica {

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(ReplicaOptions options) {
  if (options.checkpoint_dir.empty()) options.checkpoint_dir = options.config.checkpoint().dir();
  if (options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "replica: no checkpoint directory (give --checkpoint_dir or checkpoint.dir in the config)");
  }
  if (options.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("replica: poll interval must be > 0");
  }
  return std::unique_ptr<Replica>(new Replica(std::move(options)));
}

Replica::Replica(ReplicaOptions options)
    : options_(std::move(options)), root_(options_.checkpoint_dir) {}

Replica::~Replica() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.SignalAll();
  if (follower_.joinable()) follower_.join();
}

void Replica::Start() {
  PollOnce();
  follower_ = std::thread([this] { Follow(); });
}

void Replica::Follow() {
  while (true) {
    {
      MutexLock lock(&mu_);
      const absl::Time next = absl::Now() + options_.poll_interval;
      while (!stop_ && absl::Now() < next) changed_.WaitUntil(&mu_, next);
      if (stop_) return;
    }
    PollOnce();
  }
}

bool Replica::PollOnce() {
  MutexLock poll(&poll_mu_);
  absl::StatusOr<std::vector<checkpoint::CheckpointEntry>> entries =
      checkpoint::ListCheckpoints(root_);
  if (!entries.ok()) return false;  // NOT_FOUND: the job has not written one yet.
  uint64_t served = 0;
  if (std::shared_ptr<exporter::ServedModel> current = Current()) served = current->clock();
  // Newest first: the first one that loads becomes the version.
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    if (it->clock <= served) break;
    if (refused_.contains(it->clock)) continue;
    std::error_code ec;
    if (!std::filesystem::exists(absl::StrCat(it->dir, "/", checkpoint::kManifestFileName), ec)) {
      continue;  // Being written.
    }
    const absl::Time start = absl::Now();
    absl::StatusOr<std::unique_ptr<exporter::ServedModel>> model =
        exporter::ServedModel::Load(options_.config, root_, it->clock);
    if (!model.ok()) {
      LOG(WARNING) << "replica: skipping " << it->dir << ": " << model.status();
      refused_.insert(it->clock);
      MutexLock lock(&mu_);
      last_error_ = absl::StrCat(it->dir, ": ", model.status().ToString());
      continue;
    }
    std::shared_ptr<exporter::ServedModel> next(std::move(*model));
    LOG(INFO) << "replica: serving version " << next->clock() << " (" << next->rows()
              << " rows, table hash "
              << absl::StrCat(absl::Hex(next->table_hash(), absl::kZeroPad16)) << ") from "
              << next->dir() << ", built in " << (absl::Now() - start);
    {
      MutexLock lock(&mu_);
      current_.swap(next);
      ++versions_applied_;
    }
    changed_.SignalAll();
    // `next` (the old version) is released here, outside the lock; readers
    // still holding it keep it alive.
    return true;
  }
  return false;
}

std::shared_ptr<exporter::ServedModel> Replica::Current() const {
  MutexLock lock(&mu_);
  return current_;
}

ReplicaStatus Replica::Status() const {
  ReplicaStatus s;
  std::shared_ptr<exporter::ServedModel> current;
  {
    MutexLock lock(&mu_);
    current = current_;
    s.versions_applied = versions_applied_;
    s.last_error = last_error_;
  }
  if (current != nullptr) {
    s.loaded = true;
    s.version = current->clock();
    s.table_hash = current->table_hash();
    s.rows = current->rows();
    s.checkpoint_dir = current->dir();
  }
  return s;
}

absl::Status Replica::WaitForVersion(uint64_t version, absl::Time deadline) const {
  MutexLock lock(&mu_);
  while (current_ == nullptr || current_->clock() < version) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "replica: waited for version >= ", version, " of ", root_, "; serving ",
          current_ == nullptr ? std::string("none") : absl::StrCat(current_->clock())));
    }
    changed_.WaitUntil(&mu_, deadline);
  }
  return absl::OkStatus();
}

}  // namespace replica
}  // namespace shardps

#include "scheduler/recovery_book.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "glog/logging.h"

namespace shardps {

RecoveryBook::Pending& RecoveryBook::Pend(const std::string& cause, absl::Time failed_at,
                                          absl::Time now) {
  if (!pending_) {
    pending_ = Pending{cause, failed_at, now, {}, {}};
    LOG(WARNING) << cause << ": clocks paused; recovering";
  } else if (pending_->cause.find(cause) == std::string::npos) {
    absl::StrAppend(&pending_->cause, "; ", cause);
  }
  return *pending_;
}

std::string RecoveryBook::Waiting() const {
  if (!doing_.empty()) return absl::StrCat("the recovery: ", doing_);
  if (pending_) return absl::StrCat("a recovery to start (", pending_->cause, ")");
  return "";
}

void RecoveryBook::Record(const RecoveryReport& report) {
  reports_.push_back(report);
  LOG(INFO) << "recovery (" << report.kind() << "): " << report.cause();
}

void RecoveryBook::CompleteRewind(absl::Time now) {
  for (auto it = reports_.rbegin(); it != reports_.rend(); ++it) {
    if (it->complete()) continue;
    it->set_rewind_sec(absl::ToDoubleSeconds(now - rewind_started_));
    it->set_total_sec(it->detect_sec() + it->wait_sec() + it->restore_sec() + it->rewind_sec());
    it->set_complete(true);
    LOG(INFO) << "recovery complete: every live worker restarted at clock " << it->clock() << " in "
              << it->total_sec() << " s (detect " << it->detect_sec() << " s, wait "
              << it->wait_sec() << " s, restore " << it->restore_sec() << " s, rewind "
              << it->rewind_sec() << " s)";
    return;
  }
}

}  // namespace shardps

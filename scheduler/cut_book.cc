#include "scheduler/cut_book.h"

namespace shardps {

CutBook::CutBook(const JobConfig& config)
    : version_every_(config.checkpoint().version_every_steps()),
      every_(absl::Seconds(config.checkpoint().every_seconds())) {
  for (uint64_t k :
       {config.checkpoint().every_steps(), uint64_t{config.training().eval_every_steps()}}) {
    if (k > 0) checkpoint_multiples_.push_back(k);
  }
  multiples_ = checkpoint_multiples_;
  if (version_every_ > 0) multiples_.push_back(version_every_);
}

uint64_t CutBook::NextAfter(uint64_t clock) const {
  uint64_t next = 0;
  for (uint64_t k : multiples_) {
    const uint64_t c = (clock / k + 1) * k;
    if (next == 0 || c < next) next = c;
  }
  return next;
}

bool CutBook::TimeDue(absl::Time now) const {
  return every_ > absl::ZeroDuration() && now - last_time_ >= every_;
}

bool CutBook::VersionOnly(uint64_t clock, absl::Time now) const {
  if (version_every_ == 0 || clock % version_every_ != 0) return false;
  for (uint64_t k : checkpoint_multiples_) {
    if (clock % k == 0) return false;
  }
  return last_complete_ > 0 && last_complete_ < clock && failures_ == 0 && requested_ <= served_ &&
         !TimeDue(now);
}

void CutBook::VersionCompleted(uint64_t clock, const absl::Status& status, absl::Duration hold) {
  if (!status.ok()) return;
  ++versions_;
  last_version_ = clock;
  last_version_hold_sec_ = absl::ToDoubleSeconds(hold);
}

absl::StatusOr<uint64_t> CutBook::LastCut() const {
  if (!last_status_.ok()) return last_status_;
  return last_clock_;
}

void CutBook::Completed(uint64_t clock, const absl::Status& status, uint64_t served,
                        absl::Duration hold, absl::Duration write, absl::Time end) {
  if (status.ok()) {
    last_hold_sec_ = absl::ToDoubleSeconds(hold);
    last_write_sec_ = absl::ToDoubleSeconds(write);
    written_.push_back(clock);
    last_complete_ = clock;
    failures_ = 0;
  }
  last_status_ = status;
  last_clock_ = clock;
  last_time_ = end;
  served_ = served;
}

std::optional<absl::Duration> CutBook::CountFailure(absl::Time now) {
  ++failures_;
  if (failures_ >= kAttempts) return std::nullopt;
  const absl::Duration backoff = absl::Seconds(1 << (failures_ - 1));
  retry_at_ = now + backoff;
  return backoff;
}

void CutBook::StartFrom(uint64_t last_complete) {
  last_complete_ = last_complete;
  final_done_ = false;
}

}  // namespace shardps

// PartitionMove: requests, the move in flight, retries and figures of the
// scheduler's partition moves (partition_move.h).
#include "scheduler/partition_move.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "glog/logging.h"

namespace shardps {

PartitionMove::PartitionMove(const ClusterConfig& cluster)
    : heartbeat_(absl::Milliseconds(cluster.heartbeat_ms())),
      server_deadline_ms_(cluster.server_deadline_ms()) {}

uint64_t PartitionMove::Request(uint32_t servers) {
  target_ = servers;
  return ++requested_;
}

absl::StatusOr<PartitionMove::Answer> PartitionMove::LastAnswer() const {
  if (!error_.empty()) return absl::FailedPreconditionError(absl::StrCat("reshard: ", error_));
  return Answer{clock_, last_moved_};
}

bool PartitionMove::MayStart(absl::Time now, const std::vector<uint32_t>& missing) {
  if (!retry_until_) return true;
  if (missing.empty() && now >= retry_after_) return true;
  if (now < *retry_until_) return false;
  error_ = absl::StrCat(retry_cause_, "; servers [", absl::StrJoin(missing, ","),
                        "] were not back within cluster.server_deadline_ms (", server_deadline_ms_,
                        " ms) to try again");
  served_ = requested_;
  last_moved_ = 0;
  retry_until_.reset();
  retries_ = 0;
  LOG(ERROR) << "reshard to " << target_ << " servers: " << error_;
  return false;
}

void PartitionMove::AnswerAll(const std::string& why) {
  if (!Wanted()) return;
  error_ = why;
  served_ = requested_;
  retry_until_.reset();
}

bool PartitionMove::StepEnded(const Step& step, absl::Time now) {
  if (!step.first_done) in_flight_.reset();
  // A server of the move gone, unreachable or without its pre-copy before
  // the switch: the move is tried again once it is back.
  const bool server_trouble = step.moved == 0 && ServerUnreachable(step.status);
  bool retry = step.cut_retried;
  if (server_trouble && !retry && (!retry_until_ || now < *retry_until_)) {
    retry = true;
    retry_cause_ =
        absl::StrCat("the move at clock ", step.clock, " failed: ", step.status.message());
    if (!retry_until_) retry_until_ = now + absl::Milliseconds(server_deadline_ms_);
    retry_after_ =
        now + std::min(2 * heartbeat_ * (1 << std::min<uint32_t>(retries_, 4)), absl::Seconds(5));
    ++retries_;
  }
  if (retry || step.first_done) return retry;
  served_ = step.answers;
  retry_until_.reset();
  retries_ = 0;
  error_ = step.status.ok() || step.moved > 0 ? "" : std::string(step.status.message());
  last_moved_ = step.moved;
  if (step.moved > 0) {
    clock_ = step.clock;
    ++moves_;
    partitions_moved_ += step.moved;
    rows_moved_ += step.stats.rows;
    bytes_moved_ += step.stats.bytes;
    last_sec_ = absl::ToDoubleSeconds(now - step.start);
  }
  return retry;
}

void PartitionMove::FillStatus(JobStatusResponse* response) const {
  response->set_reshards(moves_);
  response->set_partitions_moved(partitions_moved_);
  response->set_reshard_rows_moved(rows_moved_);
  response->set_reshard_bytes_moved(bytes_moved_);
  response->set_last_reshard_sec(last_sec_);
}

}  // namespace shardps

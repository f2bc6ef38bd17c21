// Job generations: what makes a rollback safe against requests in flight.
//
// The scheduler numbers every state the job's servers and workers may share:
// the job's *generation*. It chooses a new one each time it sets the job's
// state (at the start, and at every recovery that rolls the servers back to a
// checkpoint); servers adopt it with their Restore, workers learn it from
// WaitStart, and every pull, push, checkpoint, tick, clock wait, barrier and
// metrics report carries the generation its sender is in. A receiver in
// another generation refuses the request and changes nothing:
//
//  - the request is older (its sender has not rewound yet):
//    FAILED_PRECONDITION, message starting with kStaleGenerationPrefix.
//    The sender stops what it does and asks the scheduler where to restart
//    (WaitStart). IsStaleGeneration() recognizes it on both sides of gRPC.
//  - the request is newer (a server not yet restored by the recovery that
//    made it): UNAVAILABLE; the sender retries.
//
// Generations are chosen as max(previous + 1, Unix time in milliseconds), so a
// scheduler restarted without any memory of the old one still picks a
// generation newer than every process of the old one holds (ordinary clock
// skew is far smaller than a restart takes). 0 is the generation of a server
// that no scheduler has set up yet (standalone servers in tests and benches
// stay at 0 and serve requests of generation 0).
#ifndef SHARDPS_COMMON_GENERATION_H_
#define SHARDPS_COMMON_GENERATION_H_

#include <algorithm>
#include <cstdint>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"

namespace shardps {

inline constexpr absl::string_view kStaleGenerationPrefix = "stale generation: ";
inline constexpr absl::string_view kNotYetInGenerationPrefix = "not yet in generation: ";

// The refusal of a request from generation `request` by a receiver (named by
// `who`, e.g. "server 1") in the newer generation `current`.
inline absl::Status StaleGenerationError(absl::string_view who, uint64_t request,
                                         uint64_t current) {
  return absl::FailedPreconditionError(absl::StrCat(
      kStaleGenerationPrefix, "the request is of job generation ", request, ", ", who,
      " is in generation ", current,
      " (the job rolled back: the sender must restart from the scheduler's start point)"));
}

// Whether `status` is (or wraps, e.g. "after N attempts: ...") a refusal
// made by StaleGenerationError.
inline bool IsStaleGeneration(const absl::Status& status) {
  return status.code() == absl::StatusCode::kFailedPrecondition &&
         absl::StrContains(status.message(), kStaleGenerationPrefix);
}

// A request from a generation the receiver has not reached yet.
inline absl::Status NotYetInGenerationError(absl::string_view who, uint64_t request,
                                            uint64_t current) {
  return absl::UnavailableError(absl::StrCat(
      kNotYetInGenerationPrefix, who, " is in job generation ", current,
      ", the request is of generation ", request, " (a recovery is restoring it; retry)"));
}

// Whether `status` is (or wraps) a refusal made by NotYetInGenerationError:
// the receiver is up and will serve the request once restored.
inline bool IsNotYetInGeneration(const absl::Status& status) {
  return status.code() == absl::StatusCode::kUnavailable &&
         absl::StrContains(status.message(), kNotYetInGenerationPrefix);
}

// Checks a request's generation against the receiver's: OK if equal.
inline absl::Status CheckGeneration(absl::string_view who, uint64_t request, uint64_t current) {
  if (request == current) return absl::OkStatus();
  if (request < current) return StaleGenerationError(who, request, current);
  return NotYetInGenerationError(who, request, current);
}

// The generation after `previous` (see the top).
inline uint64_t NextGeneration(uint64_t previous) {
  const int64_t now_ms = absl::ToUnixMillis(absl::Now());
  return std::max<uint64_t>(previous + 1, now_ms > 0 ? static_cast<uint64_t>(now_ms) : 0);
}

}  // namespace shardps

#endif  // SHARDPS_COMMON_GENERATION_H_

// Testing hooks for fault tests (ps_server and ps_scheduler
// --testing_stall_at): a process stalls once at a named point of its work,
// so that a test can SIGKILL it exactly there, with no timing involved.
//
// A stall names a point and a marker file. The first time the process
// reaches the point while the marker does not exist, it writes the marker,
// logs, and blocks the calling thread; if nobody has killed the
// process after 5 minutes it exits with status 87. A marker that exists
// (the stall happened, e.g. in the incarnation the test killed) disarms it,
// so a restarted process with the same flags runs on.
#ifndef SHARDPS_COMMON_TESTING_STALL_H_
#define SHARDPS_COMMON_TESTING_STALL_H_

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

namespace shardps {

struct TestingStall {
  std::string point;
  std::string marker;
};

// Parses `value` (POINT:MARKER[,POINT:MARKER...], each POINT one of
// `points`; "" is none); INVALID_ARGUMENT naming `flag` and the bad entry.
absl::StatusOr<std::vector<TestingStall>> ParseTestingStalls(absl::string_view flag,
                                                             absl::string_view value,
                                                             absl::Span<const char* const> points);

// Stalls at `point` if one of `stalls` names it and its marker does not
// exist (see above): `who` (e.g. "server 2") names the process in the log,
// `marker_text` is what the marker holds (one line). Returns at once
// otherwise.
void MaybeStallAt(const std::vector<TestingStall>& stalls, absl::string_view point,
                  absl::string_view who, absl::string_view marker_text);

// The process's own stalls (its --testing_stall_at), for code that no
// options reach (the scheduler's control thread): set once in main before
// any thread that may reach a point starts; none until then.
void SetProcessTestingStalls(std::vector<TestingStall> stalls);
const std::vector<TestingStall>& ProcessTestingStalls();

}  // namespace shardps

#endif  // SHARDPS_COMMON_TESTING_STALL_H_

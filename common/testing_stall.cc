#include "common/testing_stall.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "glog/logging.h"

namespace shardps {

absl::StatusOr<std::vector<TestingStall>> ParseTestingStalls(absl::string_view flag,
                                                             absl::string_view value,
                                                             absl::Span<const char* const> points) {
  std::vector<TestingStall> stalls;
  if (value.empty()) return stalls;
  for (absl::string_view entry : absl::StrSplit(value, ',')) {
    const std::vector<std::string> f = absl::StrSplit(entry, absl::MaxSplits(':', 1));
    bool known = false;
    for (const char* p : points) known = known || (f.size() == 2 && f[0] == p);
    if (!known || f[1].empty()) {
      return absl::InvalidArgumentError(absl::StrCat(flag, ": \"", entry,
                                                     "\": expected POINT:MARKER, POINT one of ",
                                                     absl::StrJoin(points, ", ")));
    }
    stalls.push_back({f[0], f[1]});
  }
  return stalls;
}

void MaybeStallAt(const std::vector<TestingStall>& stalls, absl::string_view point,
                  absl::string_view who, absl::string_view marker_text) {
  for (const TestingStall& stall : stalls) {
    if (stall.point != point || std::filesystem::exists(stall.marker)) continue;
    std::ofstream(stall.marker) << marker_text << "\n";
    LOG(WARNING) << "testing: " << who << " stalls at " << point << " (marker " << stall.marker
                 << ") until it is killed";
    google::FlushLogFiles(google::GLOG_INFO);
    absl::SleepFor(absl::Minutes(5));
    LOG(ERROR) << "testing: nobody killed " << who << " stalled at " << point
               << " within 5 minutes; exiting";
    google::FlushLogFiles(google::GLOG_INFO);
    std::_Exit(87);
  }
}

namespace {
std::vector<TestingStall>& ProcessStalls() {
  static auto* stalls = new std::vector<TestingStall>();
  return *stalls;
}
}  // namespace

void SetProcessTestingStalls(std::vector<TestingStall> stalls) {
  ProcessStalls() = std::move(stalls);
}

const std::vector<TestingStall>& ProcessTestingStalls() { return ProcessStalls(); }

}  // namespace shardps

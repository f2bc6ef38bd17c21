#include "common/testing_stall.h"

#include <filesystem>
#include <fstream>
#include <string>

#include "gtest/gtest.h"

namespace shardps {
namespace {

constexpr const char* kPoints[] = {"a_point", "b_point"};

TEST(TestingStallTest, ParsesPointsAndMarkers) {
  auto stalls = ParseTestingStalls("--flag", "a_point:/tmp/x,b_point:/tmp/y:z", kPoints);
  ASSERT_TRUE(stalls.ok()) << stalls.status();
  ASSERT_EQ(stalls->size(), 2u);
  EXPECT_EQ((*stalls)[0].point, "a_point");
  EXPECT_EQ((*stalls)[0].marker, "/tmp/x");
  EXPECT_EQ((*stalls)[1].point, "b_point");
  EXPECT_EQ((*stalls)[1].marker, "/tmp/y:z");  // Only the first ':' splits.
  auto none = ParseTestingStalls("--flag", "", kPoints);
  ASSERT_TRUE(none.ok());
  EXPECT_TRUE(none->empty());
}

TEST(TestingStallTest, RefusesUnknownPointsAndMissingMarkers) {
  for (const char* bad : {"c_point:/tmp/x", "a_point", "a_point:", "a_point:/tmp/x,,", ":/tmp/x"}) {
    auto stalls = ParseTestingStalls("--flag", bad, kPoints);
    ASSERT_FALSE(stalls.ok()) << bad;
    EXPECT_TRUE(absl::IsInvalidArgument(stalls.status()));
    EXPECT_NE(stalls.status().message().find("--flag"), std::string::npos);
    EXPECT_NE(stalls.status().message().find("a_point, b_point"), std::string::npos);
  }
}

TEST(TestingStallTest, AnExistingMarkerOrAnotherPointDoesNotStall) {
  const std::string marker = ::testing::TempDir() + "/stall_marker";
  std::ofstream(marker) << "7\n";
  const std::vector<TestingStall> stalls = {{"a_point", marker}};
  MaybeStallAt(stalls, "a_point", "test", "1");  // Disarmed: returns at once.
  MaybeStallAt(stalls, "b_point", "test", "1");  // Not named.
  std::ifstream in(marker);
  int text = 0;
  in >> text;
  EXPECT_EQ(text, 7) << "a disarmed stall must not rewrite its marker";
  std::filesystem::remove(marker);
}

TEST(TestingStallTest, ProcessStallsAreWhatWasSet) {
  EXPECT_TRUE(ProcessTestingStalls().empty());
  SetProcessTestingStalls({{"a_point", "/tmp/m"}});
  ASSERT_EQ(ProcessTestingStalls().size(), 1u);
  EXPECT_EQ(ProcessTestingStalls()[0].marker, "/tmp/m");
}

}  // namespace
}  // namespace shardps

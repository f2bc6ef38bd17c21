// The supervisor's own restarts and a test's: a process down for good is
// started again by Restart (with its argv or another), its output and log
// carried on; Restart refuses a process that still runs, and after StopAll.
#include "tests/testing/supervisor.h"

#include <signal.h>

#include <string>

#include "absl/strings/match.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"

namespace shardps::testing {
namespace {

Supervisor::Spec Shell(const std::string& script) {
  Supervisor::Spec spec;
  spec.name = "sh";
  spec.argv = {"/bin/sh", "-c", script};
  spec.log_path = ::testing::TempDir() + "/supervisor_test.log";
  return spec;
}

TEST(SupervisorTest, RestartStartsAFinishedProcessAgainWithItsOwnOrOtherArgv) {
  Supervisor sup({/*max_restarts=*/0, absl::Milliseconds(10)});
  auto id = sup.Add(Shell("echo one"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_EQ(sup.WaitFinal(*id, absl::Seconds(30)).value_or(-1), 0);

  ASSERT_TRUE(sup.Restart(*id).ok());
  EXPECT_EQ(sup.WaitFinal(*id, absl::Seconds(30)).value_or(-1), 0);
  EXPECT_EQ(sup.Output(*id), "one\none\n");

  // Another argv; exit 3 is not final, but no restart is left: down for good.
  ASSERT_TRUE(sup.Restart(*id, {"/bin/sh", "-c", "echo two; exit 3"}).ok());
  EXPECT_EQ(sup.WaitFinal(*id, absl::Seconds(30)).value_or(-1), 3);
  EXPECT_EQ(sup.Output(*id), "one\none\ntwo\n");
  EXPECT_EQ(sup.Restarts(*id), 0) << "a test's restart is not one of the supervisor's";
}

TEST(SupervisorTest, RestartRefusesARunningProcessAndAStoppedSupervisor) {
  Supervisor sup({/*max_restarts=*/0, absl::Milliseconds(10)});
  auto id = sup.Add(Shell("echo up; exec sleep 60"));
  ASSERT_TRUE(id.ok()) << id.status();
  EXPECT_TRUE(absl::IsFailedPrecondition(sup.Restart(*id)));
  sup.Signal(*id, SIGKILL);
  EXPECT_EQ(sup.WaitFinal(*id, absl::Seconds(30)).value_or(-1), 128 + SIGKILL);
  ASSERT_TRUE(sup.Restart(*id).ok());
  sup.StopAll();
  EXPECT_TRUE(absl::IsFailedPrecondition(sup.Restart(*id)));
}

}  // namespace
}  // namespace shardps::testing

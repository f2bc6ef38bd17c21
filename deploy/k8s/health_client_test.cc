// CheckHealth and ps_health against the real ps_scheduler on 127.0.0.1.
#include "deploy/k8s/health_client.h"

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <string>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;

// A port nothing listens on: bound (so no one else takes it) but not listening.
class DeadPort {
 public:
  DeadPort() {
    fd_ = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(addr);
    bind(fd_, reinterpret_cast<sockaddr*>(&addr), len);
    getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len);
    port_ = ntohs(addr.sin_port);
  }
  ~DeadPort() { close(fd_); }
  int port() const { return port_; }

 private:
  int fd_ = -1;
  int port_ = 0;
};

class HealthClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    ASSERT_TRUE(
        scheduler_
            .Start({RunfilePath("scheduler/ps_scheduler"),
                    "--config=" + RunfilePath("configs/default.pbtxt"), "--listen=127.0.0.1:0"})
            .ok());
    auto line = scheduler_.WaitForLine("PS_SCHEDULER_LISTENING ", absl::Seconds(60));
    ASSERT_TRUE(line.ok()) << line.status();
    address_ = *line;
  }

  // Runs ps_health with `args`; returns its exit code.
  int RunPsHealth(const std::vector<std::string>& args, std::string* out) {
    std::vector<std::string> argv = {RunfilePath("deploy/k8s/ps_health")};
    argv.insert(argv.end(), args.begin(), args.end());
    Subprocess child;
    EXPECT_TRUE(child.Start(argv).ok());
    auto code = child.Wait(absl::Seconds(30));
    EXPECT_TRUE(code.ok()) << code.status();
    *out = child.output();
    return code.ok() ? *code : -1;
  }

  Subprocess scheduler_;
  std::string address_;
};

TEST_F(HealthClientTest, WholeServerServes) {
  auto status = CheckHealth(address_, "", absl::Seconds(10));
  ASSERT_TRUE(status.ok()) << status.status();
  EXPECT_EQ(*status, ServingStatus::kServing);
}

TEST_F(HealthClientTest, UnknownServiceIsNotFound) {
  auto status = CheckHealth(address_, "no.such.Service", absl::Seconds(10));
  EXPECT_TRUE(absl::IsNotFound(status.status())) << status.status();
}

TEST_F(HealthClientTest, NothingListeningFailsWithinTimeout) {
  DeadPort dead;
  const absl::Time start = absl::Now();
  auto status = CheckHealth(absl::StrCat("127.0.0.1:", dead.port()), "", absl::Milliseconds(500));
  EXPECT_FALSE(status.ok());
  EXPECT_TRUE(absl::IsDeadlineExceeded(status.status()) || absl::IsUnavailable(status.status()))
      << status.status();
  EXPECT_LT(absl::Now() - start, absl::Seconds(20));
}

TEST_F(HealthClientTest, BadAddressIsInvalidArgument) {
  EXPECT_TRUE(absl::IsInvalidArgument(CheckHealth("", "", absl::Seconds(1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckHealth("localhost", "", absl::Seconds(1)).status()));
  EXPECT_TRUE(absl::IsInvalidArgument(CheckHealth("localhost:", "", absl::Seconds(1)).status()));
}

TEST_F(HealthClientTest, BinaryExitCodes) {
  std::string out;
  EXPECT_EQ(RunPsHealth({"--addr=" + address_}, &out), 0);
  EXPECT_EQ(out, "SERVING\n");
  EXPECT_EQ(RunPsHealth({"--addr=" + address_, "--service=no.such.Service"}, &out), 1);
  EXPECT_EQ(out, "SERVICE_UNKNOWN\n");
  DeadPort dead;
  EXPECT_EQ(RunPsHealth({absl::StrCat("--addr=127.0.0.1:", dead.port()), "--timeout_ms=300"}, &out),
            2);
  EXPECT_EQ(RunPsHealth({"--addr=nonsense"}, &out), 2);
}

}  // namespace
}  // namespace shardps

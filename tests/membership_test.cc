// Membership by the job secret (common/job_secret.h), on the real binaries:
// a caller without the secret, or with another, is refused every scheduler
// and server call with UNAUTHENTICATED and learns nothing of the job (issue
// 33's attack: register as a server, take the control token, command the
// others); members with the secret train the job to its end; a secret file
// others may read, or a short one, is a startup error.
#include <sys/stat.h>

#include <cstdio>
#include <fstream>
#include <memory>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "common/job_secret.h"
#include "grpcpp/create_channel.h"
#include "grpcpp/security/credentials.h"
#include "gtest/gtest.h"
#include "proto/ps.grpc.pb.h"
#include "proto/scheduler.grpc.pb.h"
#include "tests/testing/job_util.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::RunfilePath;
using testing::Subprocess;
using testing::SupervisedJob;
using testing::TestDir;

constexpr char kCluster[] = R"pb(
name: "membership"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 1 shuffle_seed: 7 intra_op_threads: 1 }
cluster { num_servers: 1 num_workers: 2 num_partitions: 16 mode: BSP }
)pb";

// Where a refusal must say nothing but the refusal.
void ExpectRefusedBlind(const grpc::Status& st, const std::string& rpc) {
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAUTHENTICATED)
      << rpc << ": " << st.error_message();
  EXPECT_EQ(st.error_message(),
            absl::StrCat(rpc, " refused: the call does not carry this job's secret"));
}

// A context without the secret (`secret` empty) or with `secret`.
std::unique_ptr<grpc::ClientContext> Ctx(const std::string& secret) {
  auto ctx = std::make_unique<grpc::ClientContext>();
  ctx->set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  if (!secret.empty()) ctx->AddMetadata(kJobSecretMetadata, secret);
  return ctx;
}

class MembershipTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = TestDir("membership");
    ASSERT_TRUE(testing::MakeSyntheticData(dir_ + "/data", 6000, 1000, 2).ok());
    config_ = dir_ + "/job.pbtxt";
    config_text_ =
        testing::kSmallDlrmTables + absl::StrReplaceAll(kCluster, {{"@DATA@", dir_ + "/data"}});
    std::ofstream(config_) << config_text_;
    secret_file_ = dir_ + "/job.secret";
    ASSERT_TRUE(WriteJobSecretFile(secret_file_).ok());
    auto secret = ReadJobSecretFile(secret_file_);
    ASSERT_TRUE(secret.ok()) << secret.status();
    secret_ = *secret;
  }

  std::string dir_, config_, config_text_, secret_file_, secret_;
};

TEST_F(MembershipTest, NonMembersAreRefusedAndLearnNothingMembersTrain) {
  // The job waits for its workers (none yet): a state that lasts.
  SupervisedJob::Options o = testing::ManualJob("membership", config_text_, 1, 0);
  o.scheduler_flags = o.server_flags = {"--job_secret_file=" + secret_file_};
  SupervisedJob job(std::move(o));
  ASSERT_TRUE(job.Start().ok());
  // This process is a member too (an operator with the file).
  absl::SetFlag(&FLAGS_job_secret_file, secret_file_);
  ASSERT_TRUE(InitJobSecretFromFlags().ok());
  auto registered = testing::WaitForJob(
      job.address(), "server 0 registered",
      [](const JobStatusResponse& s) {
        for (const MemberStatus& m : s.members()) {
          if (m.role() == SERVER && m.state() == ALIVE && !m.address().empty()) return true;
        }
        return false;
      },
      absl::Minutes(2));
  ASSERT_TRUE(registered.ok()) << registered.status() << "\n" << job.Logs();
  std::string server_address;
  for (const MemberStatus& m : registered->members()) {
    if (m.role() == SERVER) server_address = m.address();
  }

  // Plain channels: no interceptor adds the secret.
  auto scheduler =
      Scheduler::NewStub(grpc::CreateChannel(job.address(), grpc::InsecureChannelCredentials()));
  auto server = ParameterServer::NewStub(
      grpc::CreateChannel(server_address, grpc::InsecureChannelCredentials()));
  for (const std::string& presented : {std::string(), std::string("not-this-jobs-secret-0123")}) {
    SCOPED_TRACE(presented.empty() ? "no secret" : "another secret");
    {
      // Issue 33: register as server 0, get the control token.
      RegisterRequest r;
      r.set_role(SERVER);
      r.set_requested_index(0);
      r.set_address("127.0.0.1:1");
      RegisterResponse resp;
      ExpectRefusedBlind(scheduler->Register(Ctx(presented).get(), r, &resp), "Register");
      EXPECT_EQ(resp.control_token(), 0u);
      EXPECT_EQ(resp.job_id(), 0u);
    }
    {
      HeartbeatRequest r;  // Job id 0: today's answer would name the job.
      r.set_role(WORKER);
      HeartbeatResponse resp;
      ExpectRefusedBlind(scheduler->Heartbeat(Ctx(presented).get(), r, &resp), "Heartbeat");
    }
    {
      JobStatusResponse resp;
      ExpectRefusedBlind(scheduler->JobStatus(Ctx(presented).get(), JobStatusRequest(), &resp),
                         "JobStatus");
      EXPECT_EQ(resp.members_size(), 0);
    }
    {
      TickRequest r;
      r.set_clock(1);
      TickResponse resp;
      ExpectRefusedBlind(scheduler->Tick(Ctx(presented).get(), r, &resp), "Tick");
    }
    {
      WaitStartRequest r;
      r.set_timeout_ms(100);
      WaitStartResponse resp;
      ExpectRefusedBlind(scheduler->WaitStart(Ctx(presented).get(), r, &resp), "WaitStart");
    }
    {
      PullRequest r;
      r.set_map_version(1);
      r.add_tables()->set_table_id(1);
      PullResponse resp;
      ExpectRefusedBlind(server->Pull(Ctx(presented).get(), r, &resp), "Pull");
    }
    {
      PushRequest r;
      r.set_map_version(1);
      PushResponse resp;
      ExpectRefusedBlind(server->Push(Ctx(presented).get(), r, &resp), "Push");
    }
    {
      ControlRequest r;
      r.set_control_token(1);
      ControlResponse resp;
      ExpectRefusedBlind(server->Control(Ctx(presented).get(), r, &resp), "Control");
    }
    {
      TableInfoRequest r;
      TableInfoResponse resp;
      ExpectRefusedBlind(server->TableInfo(Ctx(presented).get(), r, &resp), "TableInfo");
    }
  }
  {
    // A request body larger than anything the scheduler takes (4 MiB) is
    // refused from its length, before it is buffered or its secret checked.
    RegisterRequest r;
    r.set_role(WORKER);
    r.set_address(std::string(5 << 20, 'a'));
    RegisterResponse resp;
    const grpc::Status big = scheduler->Register(Ctx(secret_).get(), r, &resp);
    EXPECT_EQ(big.error_code(), grpc::StatusCode::RESOURCE_EXHAUSTED) << big.error_message();
  }
  // The same stub with the secret is answered.
  JobStatusResponse status;
  const grpc::Status member = scheduler->JobStatus(Ctx(secret_).get(), JobStatusRequest(), &status);
  EXPECT_TRUE(member.ok()) << member.error_message();
  EXPECT_EQ(status.state(), "waiting");

  // Members train the job to its end.
  std::vector<std::unique_ptr<Subprocess>> workers;
  for (int rank = 0; rank < 2; ++rank) {
    workers.push_back(std::make_unique<Subprocess>());
    ASSERT_TRUE(workers.back()
                    ->Start({RunfilePath("worker/ps_worker"), "--config=" + config_,
                             "--scheduler=" + job.address(), absl::StrCat("--rank=", rank),
                             "--job_secret_file=" + secret_file_},
                            absl::StrCat(dir_, "/worker-", rank, ".log"))
                    .ok());
  }
  auto code = job.WaitScheduler(absl::Minutes(5));
  ASSERT_TRUE(code.ok()) << code.status() << "\n" << job.Logs();
  EXPECT_EQ(*code, 0) << job.Logs();
  EXPECT_TRUE(absl::StrContains(job.SchedulerResult(), "state=done")) << job.SchedulerResult();
  for (auto& w : workers) {
    auto exited = w->Wait(absl::Minutes(1));
    ASSERT_TRUE(exited.ok()) << exited.status();
    EXPECT_EQ(*exited, 0);
  }
}

// A secret file others may read, or one too short to be a
// secret, stops the binary at start with a message naming the file.
TEST_F(MembershipTest, BadSecretFilesAreAStartupError) {
  const std::string shared = dir_ + "/shared.secret";
  std::ofstream(shared) << secret_ << "\n";
  ASSERT_EQ(chmod(shared.c_str(), 0644), 0);
  const std::string short_file = dir_ + "/short.secret";
  std::ofstream(short_file) << "0123456789\n";
  ASSERT_EQ(chmod(short_file.c_str(), 0600), 0);
  struct Case {
    std::string file, says;
  };
  for (const Case& c : {Case{shared, "open to others"}, Case{short_file, "at least 16"},
                        Case{dir_ + "/missing.secret", "cannot read"}}) {
    for (const char* binary : {"scheduler/ps_scheduler", "server/ps_server", "worker/ps_worker"}) {
      SCOPED_TRACE(absl::StrCat(binary, " ", c.file));
      const bool scheduler = absl::StrContains(binary, "scheduler");
      Subprocess p;
      const std::string log =
          absl::StrCat(dir_, "/bad-", absl::StrReplaceAll(binary, {{"/", "-"}}), ".log");
      std::remove(log.c_str());
      ASSERT_TRUE(p.Start({RunfilePath(binary), "--config=" + config_,
                           scheduler ? "--listen=127.0.0.1:0" : "--scheduler=127.0.0.1:1",
                           "--job_secret_file=" + c.file},
                          log)
                      .ok());
      auto code = p.Wait(absl::Minutes(1));
      ASSERT_TRUE(code.ok()) << code.status();
      EXPECT_EQ(*code, 2);
      const std::string text = testing::ReadFile(log);
      EXPECT_TRUE(absl::StrContains(text, c.file)) << text;
      EXPECT_TRUE(absl::StrContains(text, c.says)) << text;
    }
  }
}

}  // namespace
}  // namespace shardps

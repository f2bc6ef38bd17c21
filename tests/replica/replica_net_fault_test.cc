// A serving replica on a cluster in a box (tests/testing/netbox.h): ps_scheduler
// on host 0, one ps_server on host 1, one ps_worker on host 2 and ps_replica
// on host 3, each bare binary under a supervisor, as a cluster runs them. The
// replica follows the servers' delta stream (--scheduler). A 1-server,
// 1-worker BSP job checkpoints every 10 clocks (deltas, eviction on).
//
// AReplicaCutOffFollowsTheStreamAgain: once the replica serves versions from
// the stream and the worker has passed kFaultClock, the replica's host is
// cut off (silently: packets vanish) for kCut. Nothing tells the replica
// that its streams are dead; it must notice the silence itself (a server
// sends a message at least every 2 s; 15 s without one is a lost stream),
// keep serving, and follow the stream again once the link is back. Training
// does not wait for it: the job ends `done`. The replica then serves
// versions from the stream cut after the fault, and ends on the job's last
// checkpoint with the table hash ps_table_hash gives for it.
//
// The test reads the replica's log (its lines name each version served and
// its table hash): the test process has no route into the box.
//
// No verdict depends on the machine's speed: the cut starts by the job's
// progress (the worker's clock), and each step takes at least kStepDelayMs,
// so the steps left after the fault take longer than the cut and the
// replica's return (41 s against 20 s).
//
// Needs root and iproute2; without them the test fails saying so.
#include <csignal>
#include <cstdio>
#include <functional>
#include <map>
#include <memory>
#include <regex>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_replace.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/job_util.h"
#include "tests/testing/netbox.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervised_job.h"

namespace shardps {
namespace {

using testing::NetBox;
using testing::RunfilePath;
using testing::SupervisedJob;

constexpr int kStepDelayMs = 150;
constexpr uint64_t kSteps = 314;  // Two epochs of 20000 lines, 128 a batch.
constexpr uint64_t kFaultClock = 40;
constexpr absl::Duration kCut = absl::Seconds(20);  // Longer than the 15 s of silence.
static_assert((kSteps - kFaultClock) * kStepDelayMs >= 40000,
              "the steps after the fault must outlast the cut and the replica's return");

constexpr char kConfig[] = R"pb(
name: "replica-net"
data { format: CRITEO synthetic_dir: "@DATA@" }
training { batch_size: 128 epochs: 2 shuffle_seed: 7 intra_op_threads: 1 }
cluster {
  num_servers: 1 num_workers: 1 num_partitions: 64 mode: BSP
  heartbeat_ms: 200 dead_after_ms: 2000 server_deadline_ms: 60000 worker_deadline_ms: 60000
}
checkpoint { dir: "@CKPT@" every_steps: 10 keep: 100 delta: true }
)pb";

std::string DataDir() { return ::testing::TempDir() + "/replica_net_data"; }

// A version the replica's log says it served.
struct Served {
  uint64_t version = 0;
  uint64_t hash = 0;
  bool stream = false;
  size_t at = 0;  // Offset of its line in the log.
};

std::vector<Served> ServedVersions(const std::string& log) {
  static const std::regex kLine(
      R"(replica: serving version (\d+) \(\d+ rows, table hash ([0-9a-f]+)\) from (\S+))");
  std::vector<Served> out;
  for (auto it = std::sregex_iterator(log.begin(), log.end(), kLine); it != std::sregex_iterator();
       ++it) {
    Served s;
    EXPECT_TRUE(absl::SimpleAtoi((*it)[1].str(), &s.version));
    EXPECT_TRUE(absl::SimpleHexAtoi((*it)[2].str(), &s.hash));
    s.stream = (*it)[3].str() == "the";  // "from the stream".
    s.at = static_cast<size_t>(it->position());
    out.push_back(s);
  }
  return out;
}

TEST(ReplicaNetFaultTest, AReplicaCutOffFollowsTheStreamAgain) {
  ASSERT_TRUE(testing::NetBoxAvailable().ok()) << testing::NetBoxAvailable();
  auto box = NetBox::Create({/*hosts=*/4});
  ASSERT_TRUE(box.ok()) << box.status();
  ASSERT_TRUE(testing::MakeSyntheticData(DataDir(), 20000, 2000).ok());
  testing::SmallDlrm tables;
  tables.sparse_extra = "eviction { ttl_clocks: 20 }";
  SupervisedJob::Options o;
  o.name = "replica_net_fault";
  o.config =
      testing::SmallDlrmTables(tables) + absl::StrReplaceAll(kConfig, {{"@DATA@", DataDir()}});
  o.servers = 1;
  o.workers = 1;
  o.box = box->get();
  o.worker_flags = {absl::StrCat("--step_delay_ms=", kStepDelayMs)};
  SupervisedJob job(o);
  ASSERT_TRUE(job.Start().ok()) << job.Logs();
  constexpr int kReplicaHost = 3;
  const std::string log_path = job.dir() + "/replica.log";
  auto replica = job.sup().Add(
      {"replica",
       {RunfilePath("replica/ps_replica"), "--config=" + job.config_path(),
        "--checkpoint_dir=" + job.ckpt(), "--poll_ms=50", "--scheduler=" + job.address(),
        "--job_secret_file=" + job.dir() + "/job.secret",
        "--listen=" + (*box)->Ip(kReplicaHost) + ":7100"},
       log_path,
       {0},
       (*box)->Namespace(kReplicaHost)});
  ASSERT_TRUE(replica.ok()) << replica.status();

  // Waits until `done` holds for the versions in the replica's log; fails
  // naming `what` after `timeout`.
  const auto await = [&](const std::string& what,
                         const std::function<bool(const std::vector<Served>&)>& done,
                         absl::Duration timeout) {
    const absl::Time deadline = absl::Now() + timeout;
    while (absl::Now() < deadline) {
      if (done(ServedVersions(testing::ReadFile(log_path)))) return true;
      absl::SleepFor(absl::Milliseconds(200));
    }
    ADD_FAILURE() << "waited " << timeout << " for " << what << "\n"
                  << testing::ReadFile(log_path).substr(0, 20000) << job.Logs();
    return false;
  };
  const auto streamed = [](const std::vector<Served>& v) {
    for (const Served& s : v) {
      if (s.stream) return true;
    }
    return false;
  };
  ASSERT_TRUE(await("a version from the stream", streamed, absl::Minutes(3)));
  ASSERT_TRUE(job.ExpectClock(kFaultClock));

  // The plan needs the cut early enough that the steps left outlast it and
  // the replica's return: 30 s of steps at least (the static_assert above
  // plans 40 s from kFaultClock).
  auto at_cut = job.JobStatus();
  ASSERT_TRUE(at_cut.ok()) << at_cut.status();
  ASSERT_LE(at_cut->max_clock(), kSteps - 30000 / kStepDelayMs)
      << "the replica served its first stream version only at clock " << at_cut->max_clock()
      << ": too late to cut it off with " << kCut << " of training left after\n"
      << testing::ReadFile(log_path).substr(0, 20000);
  const size_t before_cut = testing::ReadFile(log_path).size();
  ASSERT_TRUE((*box)->CutOff(kReplicaHost).ok());
  absl::SleepFor(kCut);
  ASSERT_TRUE((*box)->Heal().ok());
  auto cut_clock = job.JobStatus();
  ASSERT_TRUE(cut_clock.ok()) << cut_clock.status();
  const uint64_t healed_at = cut_clock->max_clock();
  const std::string during = testing::ReadFile(log_path).substr(before_cut);
  EXPECT_NE(during.find("sent nothing for 15s"), std::string::npos)
      << "the replica did not notice its silent streams during the cut:\n"
      << during;

  // Back on the stream: a version cut after the link came back, from the
  // stream.
  EXPECT_TRUE(await(
      absl::StrCat("a version after clock ", healed_at, " from the stream"),
      [&](const std::vector<Served>& v) {
        for (const Served& s : v) {
          if (s.at >= before_cut && s.stream && s.version > healed_at) return true;
        }
        return false;
      },
      absl::Minutes(3)));

  auto code = job.WaitScheduler(absl::Minutes(5));
  ASSERT_TRUE(code.ok() && *code == 0) << job.Logs();
  EXPECT_EQ(testing::ParseResult(job.SchedulerResult())["state"], "done") << job.SchedulerResult();
  const uint64_t last = testing::Checkpoints(job.ckpt()).complete;
  ASSERT_TRUE(await(
      absl::StrCat("the replica to serve the job's last checkpoint ", last),
      [&](const std::vector<Served>& v) { return !v.empty() && v.back().version == last; },
      absl::Minutes(2)));
  const Served end = ServedVersions(testing::ReadFile(log_path)).back();

  testing::Subprocess hash;
  ASSERT_TRUE(hash.Start({RunfilePath("replica/ps_table_hash"), "--checkpoint_dir=" + job.ckpt(),
                          absl::StrCat("--clock=", last)},
                         job.dir() + "/table_hash.log")
                  .ok());
  auto line = hash.WaitForLine("PS_TABLE_HASH ", absl::Minutes(2));
  ASSERT_TRUE(line.ok()) << line.status() << testing::ReadFile(job.dir() + "/table_hash.log");
  std::map<std::string, std::string> fields = testing::ParseResult(*line);
  uint64_t from_files = 0;
  ASSERT_TRUE(absl::SimpleHexAtoi(fields["hash"], &from_files)) << *line;
  EXPECT_EQ(end.hash, from_files) << "version " << last;

  job.sup().Signal(*replica, SIGTERM);
  auto replica_code = job.sup().WaitFinal(*replica, absl::Seconds(30));
  EXPECT_TRUE(replica_code.ok() && *replica_code == 0)
      << (replica_code.ok() ? absl::StrCat("exit ", *replica_code)
                            : replica_code.status().ToString());
  std::printf(
      "cut off for %s at clock >= %llu; back on the stream after clock %llu; "
      "served %llu at the end, hash-equal to its files\n",
      absl::FormatDuration(kCut).c_str(), static_cast<unsigned long long>(kFaultClock),
      static_cast<unsigned long long>(healed_at), static_cast<unsigned long long>(last));
  job.KillAll();
}

}  // namespace
}  // namespace shardps

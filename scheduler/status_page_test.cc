#include "scheduler/status_page.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <cmath>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "scheduler/status_metrics.h"

namespace shardps {
namespace {

using ::testing::HasSubstr;
using ::testing::Not;

std::string HttpGet(const std::string& address, const std::string& path,
                    const std::string& method = "GET") {
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(address.rfind(':') + 1), &port)) return "";
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = method + " " + path + " HTTP/1.0\r\nHost: x\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

JobStatusResponse TwoByTwo(uint64_t clock0, uint64_t clock1) {
  JobStatusResponse s;
  s.set_job_name("demo \"job\"\n");
  s.set_state("running");
  s.set_elapsed_sec(12.5);
  s.set_min_clock(std::min(clock0, clock1));
  s.set_max_clock(std::max(clock0, clock1));
  s.set_max_spread(3);
  s.set_samples_per_sec(1500);
  s.set_total_samples(64000);
  s.set_train_loss(0.5);
  for (uint32_t i = 0; i < 2; ++i) {
    MemberStatus* m = s.add_members();
    m->set_role(SERVER);
    m->set_index(i);
    m->set_address("127.0.0.1:700" + std::to_string(i));
    m->set_state(ALIVE);
    m->set_last_heartbeat_age_sec(0.1);
  }
  for (uint32_t i = 0; i < 2; ++i) {
    MemberStatus* m = s.add_members();
    m->set_role(WORKER);
    m->set_index(i);
    m->set_state(i == 0 ? ALIVE : DEAD);
    m->set_clock(i == 0 ? clock0 : clock1);
    m->set_last_heartbeat_age_sec(2);
  }
  return s;
}

TEST(StatusHistoryTest, KeepsTheLastPoints) {
  StatusHistory h(3);
  for (int i = 0; i < 5; ++i) {
    StatusPoint p;
    p.t = i;
    h.Add(p);
  }
  const std::vector<StatusPoint> points = h.Points();
  ASSERT_EQ(points.size(), 3u);
  EXPECT_EQ(points[0].t, 2);
  EXPECT_EQ(points[2].t, 4);
}

TEST(StatusPointTest, MissingValuesAreNaN) {
  JobStatusResponse empty;
  const StatusPoint p = PointOf(empty);
  EXPECT_TRUE(std::isnan(p.train_loss));  // No samples yet.
  EXPECT_TRUE(std::isnan(p.eval_auc));    // No evaluation yet.
  JobStatusResponse s = TwoByTwo(5, 7);
  s.set_eval_auc(0.75);
  EXPECT_EQ(PointOf(s).train_loss, 0.5);
  EXPECT_EQ(PointOf(s).eval_auc, 0.75);
  EXPECT_EQ(PointOf(s).max_clock, 7u);
}

TEST(StatusJsonTest, HoldsMembersClocksHistoryAndCheckpoints) {
  StatusPoint a, b;
  a.t = 1;
  a.samples_per_sec = 100;
  a.train_loss = std::nan("");
  a.eval_auc = std::nan("");
  b.t = 2;
  b.samples_per_sec = 200;
  b.train_loss = 0.25;
  b.eval_auc = std::nan("");
  b.max_clock = 4;
  const std::string json = StatusJson(TwoByTwo(5, 7), {a, b}, {"ckpt-10", "ckpt-20"});
  EXPECT_THAT(json, HasSubstr(R"("job":"demo \"job\"\n")"));
  EXPECT_THAT(json, HasSubstr(R"("state":"running")"));
  EXPECT_THAT(json, HasSubstr(R"("min_clock":5,"max_clock":7,"spread":2,"max_spread":3)"));
  EXPECT_THAT(json, HasSubstr(R"("samples_per_sec":1500)"));
  EXPECT_THAT(json, HasSubstr(R"("eval_auc":null)"));
  EXPECT_THAT(
      json, HasSubstr(R"({"role":"server","index":1,"address":"127.0.0.1:7001","state":"alive",)"));
  EXPECT_THAT(
      json,
      HasSubstr(R"({"role":"worker","index":0,"address":"","state":"alive","clock":5,"lag":2,)"));
  EXPECT_THAT(json, HasSubstr(R"("state":"dead","clock":7,"lag":0,)"));
  EXPECT_THAT(json, HasSubstr(R"("t":[1,2],"samples_per_sec":[100,200],)"
                              R"("train_loss":[null,0.25],"eval_auc":[null,null],)"
                              R"("min_clock":[0,0],"max_clock":[0,4]})"));
  EXPECT_THAT(json, HasSubstr(R"("checkpoints":["ckpt-10","ckpt-20"],)"));
  EXPECT_THAT(json, HasSubstr(R"("recoveries":[]})"));
  EXPECT_THAT(json, Not(HasSubstr("nan")));
}

// One recovery: the page lists it with its phases.
JobStatusResponse WithRecovery() {
  JobStatusResponse s = TwoByTwo(40, 41);
  s.set_generation(1795614881682);
  s.set_last_checkpoint_hold_sec(0.25);
  s.set_last_checkpoint_write_sec(1.5);
  s.set_versions(7);
  s.set_last_version(35);
  s.set_last_version_hold_sec(0.125);
  RecoveryReport* r = s.add_recoveries();
  r->set_kind("rollback");
  r->set_cause("server 1 restarted");
  r->set_clock(40);
  r->set_detect_sec(1.25);
  r->set_wait_sec(0.5);
  r->set_restore_sec(2);
  r->set_rewind_sec(0.75);
  r->set_total_sec(4.5);
  r->set_complete(true);
  return s;
}

TEST(StatusJsonTest, ListsRecoveriesWithTheirPhases) {
  const std::string json = StatusJson(WithRecovery(), {}, {});
  EXPECT_THAT(json, HasSubstr(R"("generation":1795614881682,)"));
  EXPECT_THAT(json, HasSubstr(R"("checkpoint_hold_sec":0.25,"checkpoint_write_sec":1.5,)"
                              R"("versions":7,"last_version":35,"version_hold_sec":0.125,)"));
  EXPECT_THAT(json, HasSubstr(R"({"kind":"rollback","cause":"server 1 restarted","clock":40,)"
                              R"("initial":false,"complete":true,"rows":0,)"));
  EXPECT_THAT(json, HasSubstr(R"("detect_sec":1.25,"wait_sec":0.5,"restore_sec":2,)"
                              R"("rewind_sec":0.75,"total_sec":4.5})"));
}

TEST(StatusJsonTest, EscapesControlCharacters) {
  JobStatusResponse s;
  s.set_state(
      std::string("failed: a\x01"
                  "b\\c"));
  EXPECT_THAT(StatusJson(s, {}, {}), HasSubstr(R"("state":"failed: a\u0001b\\c")"));
}

TEST(StatusJsonTest, ListsPeriodicEvaluationsByClockAndTheBest) {
  JobStatusResponse s = TwoByTwo(300, 301);
  EXPECT_THAT(StatusJson(s, {}, {}),
              HasSubstr(R"("evaluations":{"clock":[],"auc":[],"logloss":[]},"best_clock":0,)"
                        R"("best_auc":null,"early_stopped_at":0,)"));
  for (const auto& [clock, auc] : {std::pair<uint64_t, double>{100, 0.75}, {200, 0.5}}) {
    CheckpointEval* e = s.add_evaluations();
    e->set_clock(clock);
    e->set_auc(auc);
    e->set_logloss(0.25);
  }
  s.set_best_eval_clock(100);
  s.set_best_eval_auc(0.75);
  s.set_early_stopped_at(201);
  s.set_eval_auc(0.5);
  EXPECT_THAT(StatusJson(s, {}, {}),
              HasSubstr(R"("evaluations":{"clock":[100,200],"auc":[0.75,0.5],)"
                        R"("logloss":[0.25,0.25]},"best_clock":100,"best_auc":0.75,)"
                        R"("early_stopped_at":201,)"));
  ExportJobMetrics(s);
  const std::string text = metrics::Scrape();
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_best_eval_clock 100"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_best_eval_auc 0.75"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_eval_auc 0.5"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_evaluations 2"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_early_stopped_at 201"));
}

TEST(ExportJobMetricsTest, SetsClockStateAndJobSeries) {
  ExportJobMetrics(TwoByTwo(5, 9));
  const std::string text = metrics::Scrape();
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_worker_clock{rank=\"1\"} 9"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_min_clock 5"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_clock_spread 4"));
  EXPECT_THAT(
      text,
      HasSubstr("shardps_scheduler_member_state{index=\"1\",role=\"worker\",state=\"dead\"} 1"));
  EXPECT_THAT(
      text,
      HasSubstr("shardps_scheduler_member_state{index=\"1\",role=\"worker\",state=\"alive\"} 0"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_job_state{state=\"running\"} 1"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_job_state{state=\"done\"} 0"));
  ExportJobMetrics(WithRecovery());
  const std::string after = metrics::Scrape();
  EXPECT_THAT(after, HasSubstr("shardps_scheduler_recoveries{kind=\"rollback\"} 1"));
  EXPECT_THAT(after, HasSubstr("shardps_scheduler_last_recovery_seconds{phase=\"restore\"} 2"));
  EXPECT_THAT(after, HasSubstr("shardps_scheduler_last_recovery_seconds{phase=\"total\"} 4.5"));
  EXPECT_THAT(after, HasSubstr("shardps_scheduler_checkpoint_hold_seconds 0.25"));
  EXPECT_THAT(after, HasSubstr("shardps_scheduler_versions 7"));
  EXPECT_THAT(after, HasSubstr("shardps_scheduler_version_hold_seconds 0.125"));
}

// After two moves of partitions: the map and the moves, in the JSON and
// the metrics.
TEST(StatusJsonTest, ShowsTheMapAndTheMoves) {
  JobStatusResponse s = TwoByTwo(40, 41);
  s.set_map_version(3);
  s.set_map_servers(2);
  s.set_reshards(2);
  s.set_partitions_moved(168);
  s.set_reshard_rows_moved(80000);
  s.set_reshard_bytes_moved(9000000);
  s.set_last_reshard_sec(0.5);
  EXPECT_THAT(StatusJson(s, {}, {}),
              HasSubstr(R"("map_version":3,"map_servers":2,"reshards":2,"partitions_moved":168,)"
                        R"("reshard_rows_moved":80000,"reshard_bytes_moved":9000000,)"
                        R"("last_reshard_sec":0.5,)"));
  ExportJobMetrics(s);
  const std::string text = metrics::Scrape();
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_map_version 3"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_map_servers 2"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_reshards 2"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_reshard_partitions_moved 168"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_reshard_rows_moved 80000"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_reshard_bytes_moved 9000000"));
  EXPECT_THAT(text, HasSubstr("shardps_scheduler_last_reshard_seconds 0.5"));
}

TEST(StatusPageTest, RefusesBadOptions) {
  StatusPage::Options o;
  EXPECT_TRUE(absl::IsInvalidArgument(StatusPage::Start(o).status()));
  o.status = [] { return JobStatusResponse(); };
  o.listen = "nowhere";
  EXPECT_TRUE(absl::IsInvalidArgument(StatusPage::Start(o).status()));
}

TEST(StatusPageTest, ServesPageAndJsonAndSamplesPeriodically) {
  std::atomic<uint64_t> clock{1};
  StatusPage::Options o;
  o.listen = "127.0.0.1:0";
  o.status = [&clock] { return TwoByTwo(clock, clock + 1); };
  o.checkpoints = [] { return std::vector<std::string>{"ckpt-1"}; };
  o.sample_every = absl::Milliseconds(20);
  o.max_points = 5;
  auto page = StatusPage::Start(o);
  ASSERT_TRUE(page.ok()) << page.status();
  const std::string address = (*page)->address();
  ASSERT_THAT(address, HasSubstr("127.0.0.1:"));

  const std::string html = HttpGet(address, "/");
  EXPECT_THAT(html, HasSubstr("200 OK"));
  EXPECT_THAT(html, HasSubstr("text/html"));
  EXPECT_THAT(html, HasSubstr("<table id=\"members\">"));

  clock = 40;
  absl::SleepFor(absl::Milliseconds(200));  // Several samples, history full.
  const std::string json = HttpGet(address, "/status.json");
  EXPECT_THAT(json, HasSubstr("application/json"));
  EXPECT_THAT(json, HasSubstr(R"("min_clock":40,"max_clock":41)"));
  EXPECT_THAT(json, HasSubstr(R"("checkpoints":["ckpt-1"])"));
  EXPECT_THAT(json, HasSubstr(R"("max_clock":[41,41,41,41,41]})"));  // Bounded to 5.

  EXPECT_THAT(HttpGet(address, "/nope"), HasSubstr("404"));
  EXPECT_THAT(HttpGet(address, "/", "POST"), HasSubstr("405"));
  page->reset();
  EXPECT_EQ(HttpGet(address, "/"), "");  // Stopped.
}

}  // namespace
}  // namespace shardps

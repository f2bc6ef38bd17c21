#include "common/metrics.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <atomic>
#include <string>

#include "absl/strings/numbers.h"
#include "absl/time/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace shardps::metrics {
namespace {

using ::testing::HasSubstr;

// GET http://127.0.0.1:port/path with a plain socket; the whole response.
std::string HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(port);
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return "";
  }
  const std::string req = "GET " + path + " HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
  (void)!write(fd, req.data(), req.size());
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(fd, buf, sizeof(buf))) > 0;) out.append(buf, n);
  close(fd);
  return out;
}

TEST(MetricsTest, SameNameAndLabelsGiveTheSameSeries) {
  prometheus::Counter& a = GetCounter("test_same_total", "help", {{"t", "1"}});
  prometheus::Counter& b = GetCounter("test_same_total", "help", {{"t", "1"}});
  prometheus::Counter& c = GetCounter("test_same_total", "help", {{"t", "2"}});
  EXPECT_EQ(&a, &b);
  EXPECT_NE(&a, &c);
  a.Increment(3);
  b.Increment();
  EXPECT_EQ(a.Value(), 4);
  EXPECT_EQ(c.Value(), 0);
}

TEST(MetricsTest, ScrapeShowsEveryTypeWithLabels) {
  GetCounter("test_requests_total", "Requests.", {{"rpc", "pull"}}).Increment(7);
  GetGauge("test_rows", "Rows.", {{"table", "emb"}}).Set(42);
  prometheus::Histogram& h = GetHistogram("test_latency_seconds", "Latency.", LatencyBuckets());
  h.Observe(0.001);
  h.Observe(0.5);
  const std::string text = Scrape();
  EXPECT_THAT(text, HasSubstr("# TYPE test_requests_total counter"));
  EXPECT_THAT(text, HasSubstr("test_requests_total{rpc=\"pull\"} 7"));
  EXPECT_THAT(text, HasSubstr("test_rows{table=\"emb\"} 42"));
  EXPECT_THAT(text, HasSubstr("test_latency_seconds_count 2"));
  EXPECT_THAT(text, HasSubstr("test_latency_seconds_bucket{le=\"+Inf\"} 2"));
}

TEST(MetricsTest, BucketsAscend) {
  for (const auto* b : {&LatencyBuckets(), &ByteBuckets()}) {
    ASSERT_GT(b->size(), 5u);
    for (size_t i = 1; i < b->size(); ++i) EXPECT_LT((*b)[i - 1], (*b)[i]);
  }
  EXPECT_DOUBLE_EQ(LatencyBuckets().front(), 50e-6);
  EXPECT_GT(LatencyBuckets().back(), 10.0);
}

TEST(MetricsTest, ExposerServesMetricsOnAFreePort) {
  EXPECT_TRUE(absl::IsInvalidArgument(StartExposer("no-port").status()));
  EXPECT_TRUE(absl::IsInvalidArgument(StartExposer("127.0.0.1:99999").status()));
  GetGauge("test_exposed", "Exposed.").Set(5);
  absl::StatusOr<std::string> address = StartExposer("127.0.0.1:0");
  ASSERT_TRUE(address.ok()) << address.status();
  int port = 0;
  ASSERT_TRUE(absl::SimpleAtoi(address->substr(address->rfind(':') + 1), &port));
  EXPECT_GT(port, 0);
  const std::string response = HttpGet(port, "/metrics");
  EXPECT_THAT(response, HasSubstr("200 OK"));
  EXPECT_THAT(response, HasSubstr("test_exposed 5"));
  EXPECT_TRUE(absl::IsFailedPrecondition(StartExposer("127.0.0.1:0").status()));
}

TEST(MetricsTest, PollerCallsPeriodicallyAndStopsPromptly) {
  std::atomic<int> calls{0};
  const absl::Time start = absl::Now();
  {
    Poller poller(absl::Milliseconds(10), [&calls] { ++calls; });
    while (calls < 3) absl::SleepFor(absl::Milliseconds(1));
  }
  const int after = calls;
  EXPECT_GE(after, 3);
  absl::SleepFor(absl::Milliseconds(30));
  EXPECT_EQ(calls, after);  // Joined: no call after the destructor.
  {
    Poller slow(absl::Hours(1), [] {});
  }
  EXPECT_LT(absl::Now() - start, absl::Minutes(1));  // Destructor did not wait an hour.
}

}  // namespace
}  // namespace shardps::metrics

#include "common/metrics.h"

#include <cstdio>
#include <cstdlib>
#include <exception>

#include "absl/flags/flag.h"
#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/init.h"
#include "glog/logging.h"
#include "prometheus/exposer.h"
#include "prometheus/text_serializer.h"

ABSL_FLAG(std::string, metrics_listen, shardps::EnvOr("SHARDPS_METRICS_LISTEN", ""),
          "Serve Prometheus metrics on http://host:port/metrics (port 0 picks a "
          "free port and prints PS_METRICS_LISTENING host:port); empty = off. "
          "Env: SHARDPS_METRICS_LISTEN.");

namespace shardps::metrics {
namespace {

Mutex g_exposer_mu;
prometheus::Exposer* g_exposer ABSL_GUARDED_BY(g_exposer_mu) = nullptr;

std::shared_ptr<prometheus::Registry>& SharedRegistry() {
  // Leaked on purpose: metrics are recorded until the last thread exits.
  static auto* registry =
      new std::shared_ptr<prometheus::Registry>(std::make_shared<prometheus::Registry>());
  return *registry;
}

// Registering a family can throw (a name reused with another type, an
// invalid name or label): those are bugs in our code.
template <typename Fn>
auto Checked(const std::string& name, Fn fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const std::exception& e) {
    LOG(FATAL) << "metric " << name << ": " << e.what();
  }
  std::abort();  // Not reached.
}

std::vector<double> Geometric(double first, double factor, int n) {
  std::vector<double> out;
  for (double v = first; static_cast<int>(out.size()) < n; v *= factor) out.push_back(v);
  return out;
}

}  // namespace

prometheus::Registry& Registry() { return *SharedRegistry(); }

absl::StatusOr<std::string> StartExposer(const std::string& listen) {
  const size_t colon = listen.rfind(':');
  int port = -1;
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), &port) ||
      port < 0 || port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("metrics listen address \"", listen, "\": want host:port"));
  }
  std::string host = listen.substr(0, colon);
  if (host.empty()) host = "0.0.0.0";
  MutexLock lock(&g_exposer_mu);
  if (g_exposer != nullptr) {
    return absl::FailedPreconditionError("metrics exposer already running");
  }
  try {
    // Leaked on purpose: it serves until the process exits.
    auto* exposer = new prometheus::Exposer(absl::StrCat(host, ":", port), 2);
    exposer->RegisterCollectable(SharedRegistry());
    const std::vector<int> ports = exposer->GetListeningPorts();
    if (ports.empty() || ports[0] <= 0) {
      delete exposer;
      return absl::UnavailableError(absl::StrCat("metrics: no port bound for ", listen));
    }
    g_exposer = exposer;
    const std::string address = absl::StrCat(host, ":", ports[0]);
    std::printf("PS_METRICS_LISTENING %s\n", address.c_str());
    std::fflush(stdout);
    return address;
  } catch (const std::exception& e) {
    return absl::UnavailableError(
        absl::StrCat("metrics: cannot listen on ", listen, ": ", e.what()));
  }
}

absl::Status StartExposerFromFlags() {
  const std::string listen = absl::GetFlag(FLAGS_metrics_listen);
  if (listen.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> address = StartExposer(listen);
  if (!address.ok()) return address.status();
  LOG(INFO) << "Prometheus metrics on http://" << *address << "/metrics";
  return absl::OkStatus();
}

prometheus::Counter& GetCounter(const std::string& name, const std::string& help,
                                const Labels& labels) {
  return Checked(name, [&]() -> prometheus::Counter& {
    return prometheus::BuildCounter().Name(name).Help(help).Register(Registry()).Add(labels);
  });
}

prometheus::Gauge& GetGauge(const std::string& name, const std::string& help,
                            const Labels& labels) {
  return Checked(name, [&]() -> prometheus::Gauge& {
    return prometheus::BuildGauge().Name(name).Help(help).Register(Registry()).Add(labels);
  });
}

prometheus::Histogram& GetHistogram(const std::string& name, const std::string& help,
                                    const std::vector<double>& buckets, const Labels& labels) {
  return Checked(name, [&]() -> prometheus::Histogram& {
    return prometheus::BuildHistogram()
        .Name(name)
        .Help(help)
        .Register(Registry())
        .Add(labels, prometheus::Histogram::BucketBoundaries(buckets));
  });
}

const std::vector<double>& LatencyBuckets() {
  static const auto* buckets = new std::vector<double>(Geometric(50e-6, 2, 19));
  return *buckets;
}

const std::vector<double>& ByteBuckets() {
  static const auto* buckets = new std::vector<double>(Geometric(256, 4, 11));
  return *buckets;
}

std::string Scrape() { return prometheus::TextSerializer().Serialize(Registry().Collect()); }

Poller::Poller(absl::Duration period, std::function<void()> fn) {
  thread_ = std::thread([this, period, fn = std::move(fn)] {
    while (true) {
      fn();
      MutexLock lock(&mu_);
      const absl::Time until = absl::Now() + period;
      while (!stop_ && absl::Now() < until) wake_.WaitUntil(&mu_, until);
      if (stop_) return;
    }
  });
}

Poller::~Poller() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    wake_.SignalAll();
  }
  thread_.join();
}

}  // namespace shardps::metrics

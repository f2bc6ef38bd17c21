#include "scheduler/status_page.h"

#include <civetweb.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "scheduler/status_metrics.h"
#include "scheduler/status_page_html.h"

namespace shardps {
namespace {

constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

void AppendString(std::string* out, const std::string& s) {
  out->push_back('"');
  for (unsigned char c : s) {
    switch (c) {
      case '"':
        *out += "\\\"";
        break;
      case '\\':
        *out += "\\\\";
        break;
      case '\n':
        *out += "\\n";
        break;
      case '\r':
        *out += "\\r";
        break;
      case '\t':
        *out += "\\t";
        break;
      default:
        if (c < 0x20) {
          absl::StrAppendFormat(out, "\\u%04x", c);
        } else {
          out->push_back(static_cast<char>(c));
        }
    }
  }
  out->push_back('"');
}

void AppendNumber(std::string* out, double v) {
  if (!std::isfinite(v)) {
    *out += "null";
  } else {
    absl::StrAppendFormat(out, "%.6g", v);
  }
}

// `"key":` then the value.
void Key(std::string* out, const char* key) { absl::StrAppend(out, "\"", key, "\":"); }

void AppendMembers(std::string* out, const JobStatusResponse& status) {
  *out += "[";
  bool first = true;
  for (const MemberStatus& m : status.members()) {
    if (!first) *out += ",";
    first = false;
    *out += "{";
    Key(out, "role");
    AppendString(out, MemberRoleLabel(m.role()));
    absl::StrAppend(out, ",\"index\":", m.index(), ",");
    Key(out, "address");
    AppendString(out, m.address());
    *out += ",";
    Key(out, "state");
    AppendString(out, MemberStateLabel(m.state()));
    if (m.role() == WORKER) {
      // How far this worker is behind the fastest one.
      absl::StrAppend(out, ",\"clock\":", m.clock(), ",\"lag\":",
                      status.max_clock() >= m.clock() ? status.max_clock() - m.clock() : 0);
    }
    *out += ",";
    Key(out, "heartbeat_age_sec");
    AppendNumber(out, m.state() == STATE_UNSPECIFIED ? kNaN : m.last_heartbeat_age_sec());
    *out += "}";
  }
  *out += "]";
}

template <typename Fn>
void AppendColumn(std::string* out, const char* key, const std::vector<StatusPoint>& points,
                  Fn value) {
  Key(out, key);
  *out += "[";
  for (size_t i = 0; i < points.size(); ++i) {
    if (i > 0) *out += ",";
    AppendNumber(out, value(points[i]));
  }
  *out += "]";
}

void AppendHistory(std::string* out, const std::vector<StatusPoint>& h) {
  // Columns, not objects: a full hour is 3600 points per curve.
  *out += "{";
  AppendColumn(out, "t", h, [](const StatusPoint& p) { return p.t; });
  *out += ",";
  AppendColumn(out, "samples_per_sec", h, [](const StatusPoint& p) { return p.samples_per_sec; });
  *out += ",";
  AppendColumn(out, "train_loss", h, [](const StatusPoint& p) { return p.train_loss; });
  *out += ",";
  AppendColumn(out, "eval_auc", h, [](const StatusPoint& p) { return p.eval_auc; });
  *out += ",";
  AppendColumn(out, "min_clock", h,
               [](const StatusPoint& p) { return static_cast<double>(p.min_clock); });
  *out += ",";
  AppendColumn(out, "max_clock", h,
               [](const StatusPoint& p) { return static_cast<double>(p.max_clock); });
  *out += "}";
}

// "evaluations":{"clock":[..],"auc":[..],"logloss":[..]},"best_clock":C,
// "best_auc":A,"early_stopped_at":S, (periodic evaluation; empty columns
// without).
void AppendEvaluations(std::string* out, const JobStatusResponse& status) {
  Key(out, "evaluations");
  *out += "{\"clock\":[";
  for (int i = 0; i < status.evaluations_size(); ++i) {
    absl::StrAppend(out, i > 0 ? "," : "", status.evaluations(i).clock());
  }
  *out += "],\"auc\":[";
  for (int i = 0; i < status.evaluations_size(); ++i) {
    if (i > 0) *out += ",";
    AppendNumber(out, status.evaluations(i).auc());
  }
  *out += "],\"logloss\":[";
  for (int i = 0; i < status.evaluations_size(); ++i) {
    if (i > 0) *out += ",";
    AppendNumber(out, status.evaluations(i).logloss());
  }
  absl::StrAppend(out, "]},\"best_clock\":", status.best_eval_clock(), ",");
  Key(out, "best_auc");
  AppendNumber(out, status.evaluations_size() > 0 ? status.best_eval_auc() : kNaN);
  absl::StrAppend(out, ",\"early_stopped_at\":", status.early_stopped_at(), ",");
}

// ["a","b",...]
void AppendStrings(std::string* out, const std::vector<std::string>& strings) {
  *out += "[";
  for (size_t i = 0; i < strings.size(); ++i) {
    if (i > 0) *out += ",";
    AppendString(out, strings[i]);
  }
  *out += "]";
}

// Each recovery with its phases.
void AppendRecoveries(std::string* out, const JobStatusResponse& status) {
  *out += "[";
  for (int i = 0; i < status.recoveries_size(); ++i) {
    const RecoveryReport& r = status.recoveries(i);
    if (i > 0) *out += ",";
    *out += "{";
    Key(out, "kind");
    AppendString(out, r.kind());
    *out += ",";
    Key(out, "cause");
    AppendString(out, r.cause());
    absl::StrAppend(out, ",\"clock\":", r.clock(), ",\"initial\":", r.initial() ? "true" : "false",
                    ",\"complete\":", r.complete() ? "true" : "false", ",\"rows\":", r.rows(), ",");
    const std::pair<const char*, double> phases[] = {{"started_unix_sec", r.started_unix_sec()},
                                                     {"detect_sec", r.detect_sec()},
                                                     {"wait_sec", r.wait_sec()},
                                                     {"restore_sec", r.restore_sec()},
                                                     {"rewind_sec", r.rewind_sec()},
                                                     {"total_sec", r.total_sec()}};
    for (size_t k = 0; k < std::size(phases); ++k) {
      if (k > 0) *out += ",";
      Key(out, phases[k].first);
      AppendNumber(out, phases[k].second);
    }
    *out += "}";
  }
  *out += "]";
}

// Splits "host:port"; false if malformed.
bool SplitAddress(const std::string& listen, std::string* host, int* port) {
  const size_t colon = listen.rfind(':');
  if (colon == std::string::npos || !absl::SimpleAtoi(listen.substr(colon + 1), port) ||
      *port < 0 || *port > 65535) {
    return false;
  }
  *host = listen.substr(0, colon);
  if (host->empty()) *host = "0.0.0.0";
  return true;
}

void Reply(mg_connection* conn, int code, const char* reason, const char* type,
           const std::string& body) {
  mg_printf(conn,
            "HTTP/1.1 %d %s\r\nContent-Type: %s\r\nContent-Length: %zu\r\n"
            "Cache-Control: no-store\r\nConnection: close\r\n\r\n",
            code, reason, type, body.size());
  mg_write(conn, body.data(), body.size());
}

}  // namespace

StatusPoint PointOf(const JobStatusResponse& status) {
  StatusPoint p;
  p.t = status.elapsed_sec();
  p.samples_per_sec = status.samples_per_sec();
  p.train_loss = status.total_samples() > 0 ? status.train_loss() : kNaN;
  p.eval_auc = status.eval_auc() > 0 ? status.eval_auc() : kNaN;
  p.min_clock = status.min_clock();
  p.max_clock = status.max_clock();
  return p;
}

void StatusHistory::Add(const StatusPoint& point) {
  MutexLock lock(&mu_);
  points_.push_back(point);
  while (points_.size() > capacity_) points_.pop_front();
}

std::vector<StatusPoint> StatusHistory::Points() const {
  MutexLock lock(&mu_);
  return std::vector<StatusPoint>(points_.begin(), points_.end());
}

std::string StatusJson(const JobStatusResponse& status, const std::vector<StatusPoint>& history,
                       const std::vector<std::string>& checkpoints) {
  const StatusPoint now = PointOf(status);
  std::string out = "{";
  Key(&out, "job");
  AppendString(&out, status.job_name());
  out += ",";
  Key(&out, "state");
  AppendString(&out, status.state());
  out += ",";
  Key(&out, "elapsed_sec");
  AppendNumber(&out, status.elapsed_sec());
  absl::StrAppend(
      &out, ",\"min_clock\":", status.min_clock(), ",\"max_clock\":", status.max_clock(),
      ",\"spread\":", status.max_clock() - std::min(status.min_clock(), status.max_clock()),
      ",\"max_spread\":", status.max_spread(), ",\"total_samples\":", status.total_samples(), ",");
  Key(&out, "samples_per_sec");
  AppendNumber(&out, status.samples_per_sec());
  out += ",";
  Key(&out, "train_loss");
  AppendNumber(&out, now.train_loss);
  out += ",";
  Key(&out, "eval_auc");
  AppendNumber(&out, now.eval_auc);
  out += ",";
  Key(&out, "eval_loss");
  AppendNumber(&out, status.eval_auc() > 0 ? status.eval_loss() : kNaN);
  out += ",";
  Key(&out, "members");
  AppendMembers(&out, status);
  out += ",";
  Key(&out, "history");
  AppendHistory(&out, history);
  out += ",";
  Key(&out, "checkpoints");
  AppendStrings(&out, checkpoints);
  out += ",";
  AppendEvaluations(&out, status);
  absl::StrAppend(&out, "\"generation\":", status.generation(), ",");
  absl::StrAppend(&out, "\"map_version\":", status.map_version(),
                  ",\"map_servers\":", status.map_servers(), ",\"reshards\":", status.reshards(),
                  ",\"partitions_moved\":", status.partitions_moved(),
                  ",\"reshard_rows_moved\":", status.reshard_rows_moved(),
                  ",\"reshard_bytes_moved\":", status.reshard_bytes_moved(), ",");
  Key(&out, "last_reshard_sec");
  AppendNumber(&out, status.last_reshard_sec());
  out += ",";
  Key(&out, "checkpoint_hold_sec");
  AppendNumber(&out, status.last_checkpoint_hold_sec());
  out += ",";
  Key(&out, "checkpoint_write_sec");
  AppendNumber(&out, status.last_checkpoint_write_sec());
  absl::StrAppend(&out, ",\"versions\":", status.versions(),
                  ",\"last_version\":", status.last_version(), ",");
  Key(&out, "version_hold_sec");
  AppendNumber(&out, status.last_version_hold_sec());
  out += ",";
  Key(&out, "recoveries");
  AppendRecoveries(&out, status);
  out += "}";
  return out;
}

const std::string& StatusHtml() {
  static const auto* html = new std::string(kStatusHtml);
  return *html;
}

StatusPage::StatusPage(Options options)
    : options_(std::move(options)), history_(options_.max_points) {}

absl::StatusOr<std::unique_ptr<StatusPage>> StatusPage::Start(Options options) {
  if (!options.status) return absl::InvalidArgumentError("status page: no status callback");
  if (options.max_points == 0) options.max_points = 1;
  std::string host;
  int port = 0;
  if (!options.listen.empty() && !SplitAddress(options.listen, &host, &port)) {
    return absl::InvalidArgumentError(
        absl::StrCat("status listen address \"", options.listen, "\": want host:port"));
  }
  std::unique_ptr<StatusPage> page(new StatusPage(std::move(options)));
  page->Sample();
  if (!page->options_.listen.empty()) {
    const std::string ports = absl::StrCat(host, ":", port);
    const char* civet_options[] = {"listening_ports", ports.c_str(), "num_threads", "2", nullptr};
    mg_callbacks callbacks{};
    callbacks.log_message = [](const mg_connection*, const char* message) {
      LOG(WARNING) << "status page: " << message;
      return 1;
    };
    page->server_ = mg_start(&callbacks, nullptr, civet_options);
    if (page->server_ == nullptr) {
      return absl::UnavailableError(absl::StrCat("status page: cannot listen on ", ports));
    }
    mg_set_request_handler(page->server_, "/", &StatusPage::HandleRequest, page.get());
    mg_server_port bound[4];
    const int n = mg_get_server_ports(page->server_, 4, bound);
    if (n < 1 || bound[0].port <= 0) {
      return absl::UnavailableError(absl::StrCat("status page: no port bound for ", ports));
    }
    page->address_ = absl::StrCat(host, ":", bound[0].port);
    std::printf("PS_STATUS_LISTENING %s\n", page->address_.c_str());
    std::fflush(stdout);
  }
  StatusPage* raw = page.get();
  page->sampler_ =
      std::make_unique<metrics::Poller>(page->options_.sample_every, [raw] { raw->Sample(); });
  return page;
}

StatusPage::~StatusPage() {
  if (server_ != nullptr) mg_stop(server_);
  sampler_.reset();
}

void StatusPage::Sample() {
  JobStatusResponse status = options_.status();
  std::vector<std::string> checkpoints;
  if (options_.checkpoints) checkpoints = options_.checkpoints();
  history_.Add(PointOf(status));
  ExportJobMetrics(status);
  MutexLock lock(&mu_);
  last_ = std::move(status);
  checkpoints_ = std::move(checkpoints);
}

std::string StatusPage::Json() const {
  std::vector<StatusPoint> history = history_.Points();
  MutexLock lock(&mu_);
  return StatusJson(last_, history, checkpoints_);
}

int StatusPage::HandleRequest(mg_connection* conn, void* self) {
  const mg_request_info* request = mg_get_request_info(conn);
  const std::string method = request->request_method ? request->request_method : "";
  const std::string uri = request->local_uri ? request->local_uri : "";
  if (method != "GET" && method != "HEAD") {
    Reply(conn, 405, "Method Not Allowed", "text/plain", "GET only\n");
    return 405;
  }
  if (uri == "/" || uri == "/index.html") {
    Reply(conn, 200, "OK", "text/html; charset=utf-8", StatusHtml());
    return 200;
  }
  if (uri == "/status.json") {
    Reply(conn, 200, "OK", "application/json", static_cast<const StatusPage*>(self)->Json());
    return 200;
  }
  Reply(conn, 404, "Not Found", "text/plain", "not found: try / or /status.json\n");
  return 404;
}

}  // namespace shardps

#include "tests/testing/netbox.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <map>
#include <set>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"

namespace shardps::testing {
namespace {

constexpr char kNetnsDir[] = "/run/netns";
constexpr char kPrefix[] = "sps-";

// The first of `candidates` that is an executable file, or "".
std::string FindTool(std::initializer_list<const char*> candidates) {
  for (const char* c : candidates) {
    if (access(c, X_OK) == 0) return c;
  }
  return "";
}
const std::string& IpPath() {
  static const std::string p = FindTool({"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"});
  return p;
}
const std::string& BridgePath() {
  static const std::string p =
      FindTool({"/usr/sbin/bridge", "/sbin/bridge", "/usr/bin/bridge", "/bin/bridge"});
  return p;
}
const std::string& TcPath() {
  static const std::string p = FindTool({"/usr/sbin/tc", "/sbin/tc", "/usr/bin/tc", "/bin/tc"});
  return p;
}

// Runs argv (argv[0] a path) to completion; its stdout and stderr together,
// or INTERNAL naming the command and quoting that output. No shell.
absl::StatusOr<std::string> Run(const std::vector<std::string>& argv) {
  // Built before fork: the child of a threaded process only execs.
  std::vector<char*> args;
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  // Close-on-exec: a process another thread forks meanwhile (a supervised
  // restart) must not hold the write end, or the read below waits for it.
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return absl::InternalError("pipe failed");
  const pid_t pid = fork();
  if (pid < 0) {
    close(fds[0]);
    close(fds[1]);
    return absl::InternalError("fork failed");
  }
  if (pid == 0) {
    dup2(fds[1], 1);
    dup2(fds[1], 2);
    close(fds[0]);
    close(fds[1]);
    execv(args[0], args.data());
    _exit(127);
  }
  close(fds[1]);
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0 || (n < 0 && errno == EINTR)) {
    if (n > 0) out.append(buf, n);
  }
  close(fds[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    return absl::InternalError(
        absl::StrCat("`", absl::StrJoin(argv, " "), "` failed (status ", status, "): ", out));
  }
  return out;
}

absl::Status RunIp(const std::vector<std::string>& args) {
  std::vector<std::string> argv = {IpPath()};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv).status();
}

// A bridge port's state: 0 disabled (forwards nothing), 3 forwarding. (`ip
// link set ... type bridge_slave state` is accepted and ignored here.)
absl::Status SetPortState(const std::string& ns, const std::string& port, int state) {
  return Run({BridgePath(), "-n", ns, "link", "set", "dev", port, "state", absl::StrCat(state)})
      .status();
}

absl::Status Tc(const std::string& ns, const std::vector<std::string>& args) {
  std::vector<std::string> argv = {TcPath(), "-n", ns};
  argv.insert(argv.end(), args.begin(), args.end());
  return Run(argv).status();
}

// "sps-<pid>-<n>-<rest>" -> pid, n, rest.
bool ParseName(const std::string& name, pid_t* pid, int* n, std::string* rest) {
  if (name.rfind(kPrefix, 0) != 0) return false;
  std::vector<std::string> parts = absl::StrSplit(name.substr(4), absl::MaxSplits('-', 2));
  int p = 0;
  if (parts.size() < 2 || !absl::SimpleAtoi(parts[0], &p) || !absl::SimpleAtoi(parts[1], n)) {
    return false;
  }
  *pid = p;
  *rest = parts.size() == 3 ? parts[2] : "";
  return true;
}

std::vector<std::string> ListNamespaces() {
  std::vector<std::string> out;
  DIR* d = opendir(kNetnsDir);
  if (d == nullptr) return out;
  while (dirent* e = readdir(d)) {
    const std::string name = e->d_name;
    if (name.rfind(kPrefix, 0) == 0) out.push_back(name);
  }
  closedir(d);
  std::sort(out.begin(), out.end());
  return out;
}

std::vector<pid_t> NamespacePids(const std::string& ns) {
  std::vector<pid_t> pids;
  auto out = Run({IpPath(), "netns", "pids", ns});
  if (!out.ok()) return pids;
  for (absl::string_view line : absl::StrSplit(*out, '\n', absl::SkipEmpty())) {
    int pid = 0;
    if (absl::SimpleAtoi(line, &pid) && pid > 0) pids.push_back(pid);
  }
  return pids;
}

// Kills every process in `ns` and deletes it.
absl::Status DeleteNamespace(const std::string& ns) {
  for (pid_t pid : NamespacePids(ns)) kill(pid, SIGKILL);
  return RunIp({"netns", "del", ns});
}

std::string Mac(int host) {
  return absl::StrFormat("02:73:70:00:%02x:%02x", host >> 8, host & 255);
}

}  // namespace

absl::Status NetBoxAvailable() {
  std::vector<std::string> missing;
  if (geteuid() != 0) missing.push_back("root (network namespaces need it; run as root)");
  if (IpPath().empty()) missing.push_back("`ip` (apt-get install iproute2)");
  if (TcPath().empty()) missing.push_back("`tc` (apt-get install iproute2)");
  if (BridgePath().empty()) missing.push_back("`bridge` (apt-get install iproute2)");
  if (missing.empty()) return absl::OkStatus();
  return absl::FailedPreconditionError(
      absl::StrCat("the network harness cannot run here: it needs ", absl::StrJoin(missing, ", ")));
}

std::vector<std::string> InNetns(const std::string& ns, const std::vector<std::string>& argv) {
  std::vector<std::string> out = {IpPath().empty() ? "/usr/sbin/ip" : IpPath(), "netns", "exec",
                                  ns};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

int NetBox::Sweep() {
  std::set<std::string> removed;
  for (const std::string& ns : ListNamespaces()) {
    pid_t pid;
    int n;
    std::string rest;
    if (!ParseName(ns, &pid, &n, &rest)) continue;
    if (kill(pid, 0) == 0 || errno != ESRCH) continue;  // The owner runs.
    if (DeleteNamespace(ns).ok()) removed.insert(absl::StrCat(kPrefix, pid, "-", n));
  }
  return static_cast<int>(removed.size());
}

absl::StatusOr<std::unique_ptr<NetBox>> NetBox::Create(const Options& options, pid_t owner) {
  if (absl::Status st = NetBoxAvailable(); !st.ok()) return st;
  if (options.hosts < 1 || options.hosts > 200) {
    return absl::InvalidArgumentError(absl::StrCat("hosts must be 1..200, not ", options.hosts));
  }
  Sweep();
  static std::atomic<int> counter{0};
  const pid_t pid = owner > 0 ? owner : getpid();
  // Another process of the same owner (the CLI) may hold a number: take the
  // next free one. `ip netns add` fails if the name exists.
  for (int attempt = 0; attempt < 1000; ++attempt) {
    const int n = counter++;
    const std::string id = absl::StrCat(kPrefix, pid, "-", n);
    absl::Status st = RunIp({"netns", "add", id + "-sw"});
    if (!st.ok()) {
      if (access(absl::StrCat(kNetnsDir, "/", id, "-sw").c_str(), F_OK) == 0) continue;
      return st;
    }
    std::unique_ptr<NetBox> box(new NetBox(id, options.hosts, 100 + n % 100, pid % 256, true));
    st = box->Build();
    if (!st.ok()) return st;  // The destructor deletes what was made.
    return box;
  }
  return absl::ResourceExhaustedError("no free box id for this process");
}

absl::StatusOr<std::unique_ptr<NetBox>> NetBox::Attach(const std::string& id) {
  pid_t pid;
  int n;
  std::string rest;
  if (!ParseName(id + "-x", &pid, &n, &rest) || rest != "x") {
    return absl::InvalidArgumentError(absl::StrCat("not a box id: ", id));
  }
  int hosts = 0;
  bool has_switch = false;
  for (const std::string& ns : ListNamespaces()) {
    if (ns == id + "-sw") has_switch = true;
    if (ns.rfind(id + "-h", 0) == 0) ++hosts;
  }
  if (!has_switch || hosts == 0) return absl::NotFoundError(absl::StrCat("no box ", id));
  return std::unique_ptr<NetBox>(new NetBox(id, hosts, 100 + n % 100, pid % 256, false));
}

absl::Status NetBox::Build() {
  const std::string sw = SwitchNamespace();
  for (const auto& args :
       std::vector<std::vector<std::string>>{{"-n", sw, "link", "set", "lo", "up"},
                                             {"-n", sw, "link", "add", "br0", "type", "bridge"},
                                             {"-n", sw, "link", "set", "br0", "up"}}) {
    if (absl::Status st = RunIp(args); !st.ok()) return st;
  }
  for (int h = 0; h < hosts_; ++h) {
    const std::string ns = Namespace(h);
    if (absl::Status st = RunIp({"netns", "add", ns}); !st.ok()) return st;
    for (const auto& args : std::vector<std::vector<std::string>>{
             {"-n", ns, "link", "set", "lo", "up"},
             {"-n", ns, "link", "add", "eth0", "address", Mac(h), "type", "veth", "peer", "name",
              Port(h), "netns", sw},
             {"-n", sw, "link", "set", Port(h), "master", "br0"},
             {"-n", sw, "link", "set", Port(h), "up"},
             {"-n", ns, "addr", "add", Ip(h) + "/24", "dev", "eth0"},
             {"-n", ns, "link", "set", "eth0", "up"}}) {
      if (absl::Status st = RunIp(args); !st.ok()) return st;
    }
  }
  for (int h = 0; h < hosts_; ++h) {
    if (absl::Status st = AddNeighbours(h); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status NetBox::AddNeighbours(int host) const {
  const std::string ns = Namespace(host);
  for (int peer = 0; peer < hosts_; ++peer) {
    if (peer == host) continue;
    absl::Status st = RunIp({"-n", ns, "neigh", "replace", Ip(peer), "lladdr", Mac(peer), "dev",
                             "eth0", "nud", "permanent"});
    if (!st.ok()) return st;
  }
  // The dead gateway: a MAC no port has, so the bridge floods its frames and
  // every host drops them.
  return RunIp({"-n", ns, "neigh", "replace", DeadGateway(), "lladdr", "02:73:70:ff:ff:fe", "dev",
                "eth0", "nud", "permanent"});
}

NetBox::~NetBox() {
  if (owned_) {
    (void)Destroy();
  } else {
    StopFlaps();
  }
}

void NetBox::Release() { owned_ = false; }

absl::Status NetBox::Destroy() {
  StopFlaps();
  owned_ = false;
  absl::Status result;
  for (const std::string& ns : ListNamespaces()) {
    if (ns.rfind(id_ + "-", 0) != 0) continue;
    absl::Status st = DeleteNamespace(ns);
    if (!st.ok() && result.ok()) result = st;
  }
  return result;
}

std::string NetBox::Namespace(int host) const { return absl::StrCat(id_, "-h", host); }
std::string NetBox::SwitchNamespace() const { return id_ + "-sw"; }
std::string NetBox::Port(int host) const { return absl::StrCat("p", host); }
std::string NetBox::Ip(int host) const {
  return absl::StrCat("10.", net_a_, ".", net_b_, ".", host + 1);
}
std::string NetBox::DeadGateway() const { return absl::StrCat("10.", net_a_, ".", net_b_, ".254"); }

absl::Status NetBox::CheckHost(int host) const {
  if (host >= 0 && host < hosts_) return absl::OkStatus();
  return absl::InvalidArgumentError(
      absl::StrCat("host ", host, " out of range (box ", id_, " has ", hosts_, ")"));
}

absl::Status NetBox::CutOff(int host, CutKind kind) {
  if (absl::Status st = CheckHost(host); !st.ok()) return st;
  if (kind == CutKind::kFailFast)
    return RunIp({"-n", Namespace(host), "link", "set", "eth0", "down"});
  // Disabled: the bridge neither forwards to the port nor from it.
  return SetPortState(SwitchNamespace(), Port(host), 0);
}

absl::Status NetBox::Cut(int a, int b, CutKind kind) {
  if (absl::Status st = CheckHost(a); !st.ok()) return st;
  if (absl::Status st = CheckHost(b); !st.ok()) return st;
  if (a == b) return absl::InvalidArgumentError("a host cannot be cut from itself");
  for (auto [from, to] : {std::pair{a, b}, std::pair{b, a}}) {
    std::vector<std::string> args = {"-n", Namespace(from), "route", "replace"};
    if (kind == CutKind::kFailFast) {
      args.insert(args.end(), {"blackhole", Ip(to) + "/32"});
    } else {
      args.insert(args.end(), {Ip(to) + "/32", "via", DeadGateway(), "dev", "eth0"});
    }
    if (absl::Status st = RunIp(args); !st.ok()) return st;
  }
  return absl::OkStatus();
}

absl::Status NetBox::SetLink(int host, bool up) const {
  return RunIp({"-n", SwitchNamespace(), "link", "set", Port(host), up ? "up" : "down"});
}

absl::Status NetBox::Heal() {
  StopFlaps();
  absl::Status result;
  auto keep = [&result](absl::Status st) {
    if (!st.ok() && result.ok()) result = st;
  };
  const std::string prefix = absl::StrCat("10.", net_a_, ".", net_b_, ".");
  for (int h = 0; h < hosts_; ++h) {
    const std::string ns = Namespace(h);
    // Both ends up before the port's state: a port without carrier refuses it.
    keep(RunIp({"-n", ns, "link", "set", "eth0", "up"}));
    keep(SetLink(h, true));
    keep(SetPortState(SwitchNamespace(), Port(h), 3));
    keep(AddNeighbours(h));  // eth0 down flushed them.
    auto routes = Run({IpPath(), "-n", ns, "route", "show"});
    if (!routes.ok()) {
      keep(routes.status());
      continue;
    }
    for (absl::string_view line : absl::StrSplit(*routes, '\n', absl::SkipEmpty())) {
      std::vector<std::string> words = absl::StrSplit(line, ' ', absl::SkipEmpty());
      if (words.size() >= 2 && words[0] == "blackhole") {
        keep(RunIp({"-n", ns, "route", "del", "blackhole", words[1]}));
      } else if (words.size() >= 3 && words[0].rfind(prefix, 0) == 0 && words[1] == "via") {
        keep(RunIp({"-n", ns, "route", "del", words[0]}));
      }
    }
  }
  return result;
}

void NetBox::StartFlap(int host, absl::Duration down, absl::Duration up, int count) {
  MutexLock lock(&mu_);
  ++flaps_running_;
  // The epoch is read now, so a Heal() right after this call stops the flap.
  const uint64_t epoch = flap_epoch_;
  flaps_.emplace_back([this, host, down, up, count, epoch] {
    (void)FlapUntilHealed(host, down, up, count, epoch);
    MutexLock l(&mu_);
    --flaps_running_;
  });
}

bool NetBox::Flapping() const {
  MutexLock lock(&mu_);
  return flaps_running_ > 0;
}

absl::Status NetBox::Flap(int host, absl::Duration down, absl::Duration up, int count) {
  return FlapUntilHealed(host, down, up, count, flap_epoch_);
}

absl::Status NetBox::FlapUntilHealed(int host, absl::Duration down, absl::Duration up, int count,
                                     uint64_t epoch) {
  if (absl::Status st = CheckHost(host); !st.ok()) return st;
  // Sleeps `d`; false if Heal() or the destructor stopped the flap.
  auto sleep = [&](absl::Duration d) {
    const absl::Time until = absl::Now() + d;
    MutexLock lock(&mu_);
    while (flap_epoch_ == epoch && absl::Now() < until) flap_cv_.WaitUntil(&mu_, until);
    return flap_epoch_ == epoch;
  };
  absl::Status result;
  for (int i = 0; i < count && result.ok(); ++i) {
    result = SetLink(host, false);
    const bool go_on = sleep(down);
    absl::Status st = SetLink(host, true);
    if (result.ok()) result = st;
    if (!go_on || !sleep(up)) break;
  }
  return result;
}

void NetBox::StopFlaps() {
  std::vector<std::thread> threads;
  {
    MutexLock lock(&mu_);
    ++flap_epoch_;
    flap_cv_.SignalAll();
    threads.swap(flaps_);
  }
  for (std::thread& t : threads) t.join();
}

std::vector<pid_t> NetBox::Pids(int host) const {
  if (!CheckHost(host).ok()) return {};
  return NamespacePids(Namespace(host));
}

absl::StatusOr<int> NetBox::KillHost(int host) {
  if (absl::Status st = CheckHost(host); !st.ok()) return st;
  const std::vector<pid_t> pids = Pids(host);
  for (pid_t pid : pids) kill(pid, SIGKILL);
  return static_cast<int>(pids.size());
}

absl::Status NetBox::SetRate(int host, const Rate& rate) {
  if (absl::Status st = CheckHost(host); !st.ok()) return st;
  if (rate.bits_per_sec < 8000) return absl::InvalidArgumentError("rate below 8 kbit/s");
  const uint64_t bytes_per_sec = rate.bits_per_sec / 8;
  const uint64_t burst =
      rate.burst_bytes ? rate.burst_bytes : std::max<uint64_t>(68 << 10, bytes_per_sec / 250);
  const uint64_t limit =
      rate.queue_bytes ? rate.queue_bytes : std::max<uint64_t>(2 * burst, bytes_per_sec / 20);
  const std::vector<std::string> tbf = {"qdisc", "replace",
                                        "dev",   "",
                                        "root",  "tbf",
                                        "rate",  absl::StrCat(rate.bits_per_sec, "bit"),
                                        "burst", absl::StrCat(burst),
                                        "limit", absl::StrCat(limit)};
  std::vector<std::string> host_side = tbf, switch_side = tbf;
  host_side[3] = "eth0";
  switch_side[3] = Port(host);
  if (absl::Status st = Tc(Namespace(host), host_side); !st.ok()) return st;
  return Tc(SwitchNamespace(), switch_side);
}

absl::Status NetBox::ClearRate(int host) {
  if (absl::Status st = CheckHost(host); !st.ok()) return st;
  // Deleting the root qdisc of a device that has none fails: ignore that.
  (void)Tc(Namespace(host), {"qdisc", "del", "dev", "eth0", "root"});
  (void)Tc(SwitchNamespace(), {"qdisc", "del", "dev", Port(host), "root"});
  return absl::OkStatus();
}

absl::StatusOr<std::string> NetBox::Qdiscs(int host) const {
  if (absl::Status st = CheckHost(host); !st.ok()) return st;
  auto h = Run({TcPath(), "-n", Namespace(host), "qdisc", "show", "dev", "eth0"});
  if (!h.ok()) return h.status();
  auto s = Run({TcPath(), "-n", SwitchNamespace(), "qdisc", "show", "dev", Port(host)});
  if (!s.ok()) return s.status();
  return absl::StrCat("host eth0: ", *h, "switch ", Port(host), ": ", *s);
}

}  // namespace shardps::testing

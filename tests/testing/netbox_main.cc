// netbox_cli: the NetBox harness (tests/testing/netbox.h) from the command
// line, for Python tests and bench/ scripts (tests/testing/netbox.py wraps
// it). A box outlives the `up` that made it; its namespaces carry the owner
// pid given with --owner (default: the caller's parent), so a crashed owner's
// box is swept by the next box made on the machine.
//
//   netbox_cli available                    exit 0, or 1 and the reason
//   netbox_cli up HOSTS [--owner PID]       makes a box; prints its layout (show)
//   netbox_cli show ID                      "box ID" then "host I NAMESPACE IP" lines
//   netbox_cli down ID                      kills its processes, deletes it
//   netbox_cli sweep                        deletes boxes of dead owners
//   netbox_cli exec ID HOST -- ARGV...      execs ARGV inside HOST (same pid)
//   netbox_cli cutoff ID HOST [--fail_fast]
//   netbox_cli cut ID A B [--fail_fast]
//   netbox_cli heal ID
//   netbox_cli flap ID HOST DOWN_MS UP_MS COUNT   blocks until done
//   netbox_cli kill ID HOST                 SIGKILLs every process of HOST
//   netbox_cli pids ID HOST
//   netbox_cli rate ID HOST BITS_PER_SEC [BURST_BYTES [QUEUE_BYTES]]
//   netbox_cli unrate ID HOST
//   netbox_cli qdisc ID HOST                tc qdisc show of both ends
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "tests/testing/netbox.h"

namespace shardps::testing {
namespace {

int Fail(const absl::Status& st) {
  std::fprintf(stderr, "netbox: %s\n", std::string(st.message()).c_str());
  return 1;
}

int Usage() {
  std::fprintf(stderr,
               "usage: netbox available | up HOSTS [--owner PID] | show ID | down ID | sweep |\n"
               "  exec ID HOST -- ARGV... | cutoff ID HOST [--fail_fast] |\n"
               "  cut ID A B [--fail_fast] | heal ID | flap ID HOST DOWN_MS UP_MS COUNT |\n"
               "  kill ID HOST | pids ID HOST | rate ID HOST BPS [BURST [QUEUE]] |\n"
               "  unrate ID HOST | qdisc ID HOST\n");
  return 2;
}

void Show(const NetBox& box) {
  std::printf("box %s\n", box.id().c_str());
  for (int h = 0; h < box.hosts(); ++h) {
    std::printf("host %d %s %s\n", h, box.Namespace(h).c_str(), box.Ip(h).c_str());
  }
}

int Main(std::vector<std::string> args) {
  if (args.empty()) return Usage();
  const std::string cmd = args[0];
  if (cmd == "available") {
    absl::Status st = NetBoxAvailable();
    if (!st.ok()) return Fail(st);
    std::printf("ok\n");
    return 0;
  }
  if (cmd == "sweep") {
    std::printf("removed %d\n", NetBox::Sweep());
    return 0;
  }
  if (cmd == "up") {
    int hosts = 0;
    pid_t owner = getppid();
    if (args.size() < 2 || !absl::SimpleAtoi(args[1], &hosts)) return Usage();
    if (args.size() == 4 && args[2] == "--owner") {
      if (!absl::SimpleAtoi(args[3], &owner)) return Usage();
    } else if (args.size() != 2) {
      return Usage();
    }
    auto box = NetBox::Create({hosts}, owner);
    if (!box.ok()) return Fail(box.status());
    (*box)->Release();
    Show(**box);
    return 0;
  }
  if (args.size() < 2) return Usage();
  auto attached = NetBox::Attach(args[1]);
  if (!attached.ok()) return Fail(attached.status());
  NetBox& box = **attached;
  std::vector<int64_t> n;  // Numeric arguments after the id.
  bool fail_fast = false;
  size_t i = 2;
  for (; i < args.size() && args[i] != "--"; ++i) {
    int64_t v = 0;
    if (args[i] == "--fail_fast") {
      fail_fast = true;
    } else if (absl::SimpleAtoi(args[i], &v)) {
      n.push_back(v);
    } else {
      return Usage();
    }
  }
  const NetBox::CutKind kind = fail_fast ? NetBox::CutKind::kFailFast : NetBox::CutKind::kSilent;
  absl::Status st;
  if (cmd == "show") {
    Show(box);
  } else if (cmd == "down") {
    st = box.Destroy();
  } else if (cmd == "exec" && n.size() == 1 && i + 1 < args.size()) {
    std::vector<std::string> argv = box.Wrap(n[0], {args.begin() + i + 1, args.end()});
    std::vector<char*> c;
    for (std::string& a : argv) c.push_back(a.data());
    c.push_back(nullptr);
    std::fflush(nullptr);
    execv(c[0], c.data());
    st = absl::InternalError(absl::StrCat("exec ", argv[0], " failed"));
  } else if (cmd == "cutoff" && n.size() == 1) {
    st = box.CutOff(n[0], kind);
  } else if (cmd == "cut" && n.size() == 2) {
    st = box.Cut(n[0], n[1], kind);
  } else if (cmd == "heal" && n.empty()) {
    st = box.Heal();
  } else if (cmd == "flap" && n.size() == 4) {
    st = box.Flap(n[0], absl::Milliseconds(n[1]), absl::Milliseconds(n[2]), n[3]);
  } else if (cmd == "kill" && n.size() == 1) {
    auto killed = box.KillHost(n[0]);
    st = killed.status();
    if (killed.ok()) std::printf("killed %d\n", *killed);
  } else if (cmd == "pids" && n.size() == 1) {
    for (pid_t pid : box.Pids(n[0])) std::printf("%d\n", pid);
  } else if (cmd == "rate" && n.size() >= 2 && n.size() <= 4) {
    NetBox::Rate rate;
    rate.bits_per_sec = static_cast<uint64_t>(n[1]);
    if (n.size() > 2) rate.burst_bytes = n[2];
    if (n.size() > 3) rate.queue_bytes = n[3];
    st = box.SetRate(n[0], rate);
  } else if (cmd == "unrate" && n.size() == 1) {
    st = box.ClearRate(n[0]);
  } else if (cmd == "qdisc" && n.size() == 1) {
    auto q = box.Qdiscs(n[0]);
    st = q.status();
    if (q.ok()) std::printf("%s", q->c_str());
  } else {
    return Usage();
  }
  if (!st.ok()) return Fail(st);
  return 0;
}

}  // namespace
}  // namespace shardps::testing

int main(int argc, char** argv) {
  return shardps::testing::Main(std::vector<std::string>(argv + 1, argv + argc));
}

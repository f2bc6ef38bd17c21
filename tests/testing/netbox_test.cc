// NetBox: hosts reach each other over the bridge, each cut blocks what it
// should (silently, or failing fast when asked), Heal restores, a flap comes
// and goes, a node's processes die together, tbf shapes, the supervisor runs
// a process inside a host, and nothing is left behind. Needs root and
// iproute2: without them every test fails with the reason.
#include "tests/testing/netbox.h"

#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "gtest/gtest.h"
#include "tests/testing/subprocess.h"
#include "tests/testing/supervisor.h"

namespace shardps::testing {
namespace {

constexpr int kPort = 7400;

// A TCP echo server on every address of its host: prints "PID <pid>", then
// "LISTENING" once it accepts.
constexpr char kEchoServer[] = R"py(
import os, socket, threading
print("PID", os.getpid(), flush=True)
s = socket.socket()
s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
s.bind(("0.0.0.0", 7400))
s.listen(16)
print("LISTENING", flush=True)
def serve(c):
    with c:
        while True:
            d = c.recv(65536)
            if not d:
                return
            c.sendall(d)
while True:
    c, _ = s.accept()
    threading.Thread(target=serve, args=(c,), daemon=True).start()
)py";

// argv[1] ip, argv[2] bytes, argv[3] timeout in s: connects, sends the
// bytes, reads them back; prints "ok <seconds>", "timeout" or "error <errno>".
constexpr char kEchoClient[] = R"py(
import socket, sys, threading, time
ip, n, timeout = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
start = time.time()
try:
    c = socket.create_connection((ip, 7400), timeout=timeout)
    c.settimeout(max(timeout, 60.0))
    data = b"x" * n
    sender = threading.Thread(target=c.sendall, args=(data,))
    sender.start()
    got = 0
    while got < n:
        d = c.recv(65536)
        if not d:
            raise ConnectionError("closed early")
        got += len(d)
    sender.join()
    print("ok %.4f" % (time.time() - start))
except socket.timeout:
    print("timeout")
except OSError as e:
    print("error", e.errno)
)py";

class NetBoxTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const absl::Status st = NetBoxAvailable();
    ASSERT_TRUE(st.ok()) << st.message();
  }

  std::unique_ptr<NetBox> MakeBox(int hosts) {
    auto box = NetBox::Create({hosts});
    EXPECT_TRUE(box.ok()) << box.status();
    return box.ok() ? std::move(*box) : nullptr;
  }

  // Starts the echo server on `host`; returns it once it listens.
  std::unique_ptr<Subprocess> StartEcho(NetBox& box, int host) {
    auto server = std::make_unique<Subprocess>();
    EXPECT_TRUE(server->Start(box.Wrap(host, {"/usr/bin/python3", "-c", kEchoServer})).ok());
    auto listening = server->WaitForLine("LISTENING", absl::Seconds(30));
    EXPECT_TRUE(listening.ok()) << listening.status();
    return server;
  }

  // From `from`, an echo of `bytes` through `to`'s server: "ok <s>",
  // "timeout" or "error <errno>".
  std::string Echo(NetBox& box, int from, int to, int bytes = 1, double timeout_s = 1.5) {
    Subprocess client;
    EXPECT_TRUE(client
                    .Start(box.Wrap(from, {"/usr/bin/python3", "-c", kEchoClient, box.Ip(to),
                                           absl::StrCat(bytes), absl::StrCat(timeout_s)}))
                    .ok());
    auto code = client.Wait(absl::Seconds(120));
    EXPECT_TRUE(code.ok()) << "the echo client never ended: " << code.status();
    if (!code.ok()) return "hung";
    std::string out = client.output();
    while (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  static double Seconds(const std::string& ok_line) {
    double s = -1;
    std::vector<std::string> w = absl::StrSplit(ok_line, ' ');
    if (w.size() == 2 && w[0] == "ok") (void)absl::SimpleAtod(w[1], &s);
    return s;
  }
};

// The inode of a network namespace: of a process, or of a named one.
ino_t NetnsInode(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 ? st.st_ino : 0;
}

bool NamespaceExists(const std::string& name) {
  return access(("/run/netns/" + name).c_str(), F_OK) == 0;
}

TEST_F(NetBoxTest, HostsReachEachOtherAndTheChildIsTheProgram) {
  auto box = MakeBox(2);
  ASSERT_NE(box, nullptr);
  EXPECT_NE(box->Ip(0), box->Ip(1));
  auto server = StartEcho(*box, 1);
  // `ip netns exec` execs: the child we started is the Python process, and
  // it lives in host 1's namespace, not the test's.
  EXPECT_NE(server->output().find(absl::StrCat("PID ", server->pid(), "\n")), std::string::npos)
      << server->output();
  const ino_t ns = NetnsInode(absl::StrCat("/proc/", server->pid(), "/ns/net"));
  EXPECT_EQ(ns, NetnsInode("/run/netns/" + box->Namespace(1)));
  EXPECT_NE(ns, NetnsInode("/proc/self/ns/net"));
  EXPECT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u);
  EXPECT_EQ(box->Pids(1).size(), 1u);
}

TEST_F(NetBoxTest, CutOffDropsSilentlyAndHealRestores) {
  auto box = MakeBox(3);
  ASSERT_NE(box, nullptr);
  auto server = StartEcho(*box, 1);
  ASSERT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u);
  ASSERT_TRUE(box->CutOff(1).ok());
  // A partition: the connect gets no answer at all, no error.
  EXPECT_EQ(Echo(*box, 0, 1), "timeout");
  EXPECT_EQ(Echo(*box, 2, 1), "timeout");
  ASSERT_TRUE(box->Heal().ok());
  EXPECT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u);
  EXPECT_EQ(Echo(*box, 2, 1).rfind("ok ", 0), 0u);
}

TEST_F(NetBoxTest, CutSeparatesOnePairOnlyAndHealRestores) {
  auto box = MakeBox(3);
  ASSERT_NE(box, nullptr);
  auto server1 = StartEcho(*box, 1);
  auto server2 = StartEcho(*box, 2);
  ASSERT_TRUE(box->Cut(0, 1).ok());
  EXPECT_EQ(Echo(*box, 0, 1), "timeout");
  EXPECT_EQ(Echo(*box, 0, 2).rfind("ok ", 0), 0u);
  EXPECT_EQ(Echo(*box, 2, 1).rfind("ok ", 0), 0u);
  auto server0 = StartEcho(*box, 0);
  EXPECT_EQ(Echo(*box, 1, 0), "timeout") << "the cut is not both ways";
  ASSERT_TRUE(box->Heal().ok());
  EXPECT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u);
  EXPECT_EQ(Echo(*box, 1, 0).rfind("ok ", 0), 0u);
}

TEST_F(NetBoxTest, FailFastCutsGiveLocalErrors) {
  auto box = MakeBox(3);
  ASSERT_NE(box, nullptr);
  auto server = StartEcho(*box, 1);
  ASSERT_TRUE(box->CutOff(0, NetBox::CutKind::kFailFast).ok());
  EXPECT_EQ(Echo(*box, 0, 1), "error 101");  // ENETUNREACH: eth0 is down.
  ASSERT_TRUE(box->Heal().ok());
  ASSERT_TRUE(box->Cut(2, 1, NetBox::CutKind::kFailFast).ok());
  EXPECT_EQ(Echo(*box, 2, 1), "error 22");  // EINVAL: a blackhole route.
  EXPECT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u) << "heal after eth0 down";
  ASSERT_TRUE(box->Heal().ok());
  EXPECT_EQ(Echo(*box, 2, 1).rfind("ok ", 0), 0u);
}

TEST_F(NetBoxTest, FlapComesAndGoes) {
  auto box = MakeBox(2);
  ASSERT_NE(box, nullptr);
  auto server = StartEcho(*box, 1);
  box->StartFlap(1, absl::Milliseconds(700), absl::Milliseconds(300), 4);
  // Some connect meets the link down...
  bool cut_seen = false;
  const absl::Time deadline = absl::Now() + absl::Seconds(30);
  while (!cut_seen && box->Flapping() && absl::Now() < deadline) {
    cut_seen = Echo(*box, 0, 1, 1, 0.3) == "timeout";
  }
  EXPECT_TRUE(cut_seen) << "no connect failed while the link flapped";
  // ...and after the last flap the link is up for good.
  while (box->Flapping() && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(50));
  EXPECT_FALSE(box->Flapping()) << "the flap did not end";
  EXPECT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u);
}

TEST_F(NetBoxTest, HealStopsAFlap) {
  auto box = MakeBox(2);
  ASSERT_NE(box, nullptr);
  auto server = StartEcho(*box, 1);
  box->StartFlap(1, absl::Seconds(1), absl::Seconds(1), 1000);
  ASSERT_TRUE(box->Heal().ok());
  EXPECT_FALSE(box->Flapping());
  EXPECT_EQ(Echo(*box, 0, 1).rfind("ok ", 0), 0u);
}

TEST_F(NetBoxTest, KillHostKillsEveryProcessOfTheHost) {
  auto box = MakeBox(2);
  ASSERT_NE(box, nullptr);
  Subprocess a, b, other;
  ASSERT_TRUE(a.Start(box->Wrap(1, {"/bin/sleep", "600"})).ok());
  ASSERT_TRUE(b.Start(box->Wrap(1, {"/bin/sleep", "600"})).ok());
  ASSERT_TRUE(other.Start(box->Wrap(0, {"/bin/sleep", "600"})).ok());
  // Wait until both have entered the namespace (ip has exec'd them).
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  while (box->Pids(1).size() < 2 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  auto killed = box->KillHost(1);
  ASSERT_TRUE(killed.ok()) << killed.status();
  EXPECT_EQ(*killed, 2);
  EXPECT_EQ(a.Wait(absl::Seconds(10)).value_or(-1), 128 + SIGKILL);
  EXPECT_EQ(b.Wait(absl::Seconds(10)).value_or(-1), 128 + SIGKILL);
  EXPECT_FALSE(other.Poll().has_value()) << "a process of another host died";
}

TEST_F(NetBoxTest, SupervisorRunsAndRestartsAProcessInsideAHost) {
  auto box = MakeBox(2);
  ASSERT_NE(box, nullptr);
  Supervisor sup({/*max_restarts=*/2, absl::Milliseconds(100)});
  Supervisor::Spec spec;
  spec.name = "sleeper";
  spec.argv = {"/bin/sleep", "600"};
  spec.netns = box->Namespace(1);
  auto id = sup.Add(spec);
  ASSERT_TRUE(id.ok()) << id.status();
  const pid_t first = sup.Pid(*id);
  const std::string host_ns = "/run/netns/" + box->Namespace(1);
  const absl::Time deadline = absl::Now() + absl::Seconds(20);
  auto in_host = [&](pid_t pid) {
    return pid > 0 && NetnsInode(absl::StrCat("/proc/", pid, "/ns/net")) == NetnsInode(host_ns);
  };
  while (!in_host(first) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_TRUE(in_host(first)) << "the supervised process is not in host 1";
  ASSERT_EQ(box->KillHost(1).value_or(0), 1);
  while (sup.Restarts(*id) < 1 && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  ASSERT_EQ(sup.Restarts(*id), 1) << "not restarted after the node was lost";
  const pid_t second = sup.Pid(*id);
  EXPECT_NE(second, first);
  while (!in_host(second) && absl::Now() < deadline) absl::SleepFor(absl::Milliseconds(10));
  EXPECT_TRUE(in_host(second)) << "the restarted process is not in host 1";
  sup.StopAll();
}

TEST_F(NetBoxTest, TbfShapesTheLink) {
  auto box = MakeBox(2);
  ASSERT_NE(box, nullptr);
  auto server = StartEcho(*box, 1);
  constexpr int kBytes = 1 << 20;
  const double unshaped = Seconds(Echo(*box, 0, 1, kBytes, 10));
  ASSERT_GT(unshaped, 0);
  constexpr uint64_t kRate = 8'000'000;  // 1 MB/s.
  ASSERT_TRUE(box->SetRate(1, {kRate}).ok());
  auto qdiscs = box->Qdiscs(1);
  ASSERT_TRUE(qdiscs.ok()) << qdiscs.status();
  EXPECT_TRUE(absl::StrContains(*qdiscs, "tbf")) << *qdiscs;
  EXPECT_TRUE(absl::StrContains(*qdiscs, "rate 8Mbit")) << *qdiscs;
  const double shaped = Seconds(Echo(*box, 0, 1, kBytes, 10));
  ASSERT_GT(shaped, 0);
  // 1 MiB each way through 1 MB/s links cannot take less than about 0.9 s
  // (minus one burst); a slow machine only makes it slower.
  EXPECT_GT(shaped, 3 * unshaped) << "unshaped " << unshaped << " s, shaped " << shaped << " s";
  EXPECT_GT(shaped, 0.8) << "faster than the rate";
  ASSERT_TRUE(box->ClearRate(1).ok());
  EXPECT_FALSE(absl::StrContains(box->Qdiscs(1).value_or("tbf"), "tbf"));
}

TEST_F(NetBoxTest, DestroyAndSweepLeaveNoNamespace) {
  std::string id;
  {
    auto box = MakeBox(3);
    ASSERT_NE(box, nullptr);
    id = box->id();
    ASSERT_TRUE(NamespaceExists(id + "-sw"));
    ASSERT_TRUE(NamespaceExists(id + "-h2"));
    Subprocess stray;  // Still running at destruction: killed with the box.
    ASSERT_TRUE(stray.Start(box->Wrap(2, {"/bin/sleep", "600"})).ok());
  }
  EXPECT_FALSE(NamespaceExists(id + "-sw"));
  EXPECT_FALSE(NamespaceExists(id + "-h0"));
  EXPECT_FALSE(NamespaceExists(id + "-h2"));

  // A box whose owner died without cleaning up is swept.
  const pid_t dead = fork();
  if (dead == 0) _exit(0);
  ASSERT_GT(dead, 0);
  waitpid(dead, nullptr, 0);
  auto orphan = NetBox::Create({2}, dead);
  ASSERT_TRUE(orphan.ok()) << orphan.status();
  const std::string orphan_id = (*orphan)->id();
  EXPECT_TRUE(absl::StartsWith(orphan_id, absl::StrCat("sps-", dead, "-"))) << orphan_id;
  (*orphan)->Release();
  orphan->reset();
  ASSERT_TRUE(NamespaceExists(orphan_id + "-h1"));
  EXPECT_GE(NetBox::Sweep(), 1);
  EXPECT_FALSE(NamespaceExists(orphan_id + "-sw"));
  EXPECT_FALSE(NamespaceExists(orphan_id + "-h1"));
}

}  // namespace
}  // namespace shardps::testing

// NetBox: a cluster in a box for tests and benchmarks. Hosts are Linux
// network namespaces joined by a bridge, and network faults are operations
// on them: cut a host off, cut two hosts apart, heal, flap a link, lose a
// node (every process of a host killed at once), shape a link (tc tbf).
//
// Layout of one box, all of it outside the root namespace:
//   - a "switch" namespace <id>-sw holding bridge br0;
//   - one namespace per host, <id>-h<i>, with `lo` up and eth0, one end of a
//     veth pair whose other end (p<i>) is a port of br0 in the switch;
//   - host i at 10.<a>.<b>.<i+1>/24 (Ip(i)); a, b derived from the id;
//   - every host holds permanent ARP entries for every other host and for a
//     gateway address .254 that no host owns (the "dead gateway").
// The id is "sps-<owner pid>-<n>", unique per owner process; namespaces
// named after an owner that no longer exists are deleted (and the processes
// in them killed) by Sweep(), which Create() runs first, so a crashed test
// leaks nothing past the next box made on the machine.
//
// Which cut is which, measured with TCP connect and UDP send on this kernel:
//   - eth0 down in the host: ENETUNREACH at once (a local error, not a
//     partition);
//   - the switch's port down (carrier loss): ARP entries are flushed and a
//     connect fails with EHOSTUNREACH after 3 s of ARP;
//   - `ip route add blackhole <ip>/32`: EINVAL at once on connect and send;
//   - the switch's port disabled (bridge port state 0), or a /32 route via
//     the dead gateway: packets vanish, connects time out, sends succeed,
//     as in a real partition (the permanent ARP entries keep ARP from
//     failing).
// CutOff and Cut use the silent kinds by default (CutKind::kSilent: the
// port disabled, the dead-gateway routes); CutKind::kFailFast gives eth0
// down and blackhole routes. Flap takes the switch's port down and up
// (carrier loss, as a flapping cable; silent thanks to the permanent ARP
// entries). Rates are tbf qdiscs on both ends of a host's veth, so they
// shape both directions.
//
// Needs root and iproute2 (`ip`, `tc`, `bridge`): Available() says why not. Every
// command's failure comes back as INTERNAL with the command and its output.
// Thread-safe. The destructor of an owning box stops its flaps, kills every
// process left in its namespaces and deletes them (the veth pairs and the
// bridge go with them); Release() keeps them for another process (the CLI,
// tests/testing/netbox_main.cc, which Python tests and bench/ use through
// tests/testing/netbox.py).
#ifndef SHARDPS_TESTS_TESTING_NETBOX_H_
#define SHARDPS_TESTS_TESTING_NETBOX_H_

#include <sys/types.h>

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"

namespace shardps::testing {

// OK if boxes can be made here; otherwise FAILED_PRECONDITION saying what
// is missing (not root; `ip`, `tc` or `bridge` not found: install iproute2).
absl::Status NetBoxAvailable();

// `argv` run inside network namespace `ns`: ip netns exec <ns> argv... .
// `ip netns exec` execs the program, so the child's pid is the program's.
std::vector<std::string> InNetns(const std::string& ns, const std::vector<std::string>& argv);

class NetBox {
 public:
  struct Options {
    int hosts = 2;  // 1..200.
  };
  enum class CutKind { kSilent, kFailFast };
  // A tbf on both ends of a host's link.
  struct Rate {
    uint64_t bits_per_sec = 0;
    uint64_t burst_bytes = 0;  // 0: max(64 KiB + 4 KiB, 4 ms of the rate).
    uint64_t queue_bytes = 0;  // tbf limit; 0: 50 ms of the rate, at least 2 bursts.
  };

  // Sweeps, then makes a box of `options.hosts` hosts, named after `owner`
  // (0: this process), which the returned object owns.
  static absl::StatusOr<std::unique_ptr<NetBox>> Create(const Options& options, pid_t owner = 0);
  // A box another process made (by id); not owned: nothing is deleted at
  // destruction unless Destroy() is called. NOT_FOUND if it does not exist.
  static absl::StatusOr<std::unique_ptr<NetBox>> Attach(const std::string& id);
  // Deletes the namespaces of owners that no longer run (and kills the
  // processes left in them); returns how many boxes were removed.
  static int Sweep();

  ~NetBox();
  NetBox(const NetBox&) = delete;
  NetBox& operator=(const NetBox&) = delete;

  // Stops owning the namespaces: the destructor leaves them.
  void Release();
  // Stops flaps, kills every process in the box, deletes its namespaces.
  absl::Status Destroy();

  const std::string& id() const { return id_; }
  int hosts() const { return hosts_; }
  std::string Namespace(int host) const;
  std::string SwitchNamespace() const;
  std::string Ip(int host) const;  // "10.a.b.<host+1>".
  std::vector<std::string> Wrap(int host, const std::vector<std::string>& argv) const {
    return InNetns(Namespace(host), argv);
  }

  // Cuts every link of `host` (both directions) until Heal().
  absl::Status CutOff(int host, CutKind kind = CutKind::kSilent);
  // Cuts `a` and `b` apart (both directions); each keeps its other links.
  absl::Status Cut(int a, int b, CutKind kind = CutKind::kSilent);
  // Stops every flap and undoes every cut (not the rates).
  absl::Status Heal();
  // In a background thread: `host`'s link down for `down`, up for `up`,
  // `count` times, then up for good. Heal() or the destructor stops it.
  void StartFlap(int host, absl::Duration down, absl::Duration up, int count);
  // The same in the calling thread (the CLI's flap); stops early on Heal().
  absl::Status Flap(int host, absl::Duration down, absl::Duration up, int count);
  // Whether a flap thread still runs.
  bool Flapping() const;

  // Processes in `host`'s namespace.
  std::vector<pid_t> Pids(int host) const;
  // SIGKILLs every process in `host`'s namespace at once (a node lost);
  // returns how many were killed.
  absl::StatusOr<int> KillHost(int host);

  absl::Status SetRate(int host, const Rate& rate);
  absl::Status ClearRate(int host);
  // `tc qdisc show` of the host's eth0 and of its switch port.
  absl::StatusOr<std::string> Qdiscs(int host) const;

 private:
  NetBox(std::string id, int hosts, int net_a, int net_b, bool owned)
      : id_(std::move(id)), hosts_(hosts), net_a_(net_a), net_b_(net_b), owned_(owned) {}
  absl::Status Build();
  absl::Status CheckHost(int host) const;
  std::string Port(int host) const;
  std::string DeadGateway() const;
  absl::Status AddNeighbours(int host) const;
  absl::Status SetLink(int host, bool up) const;
  void StopFlaps();
  // Flap() until flap_epoch_ leaves `epoch`.
  absl::Status FlapUntilHealed(int host, absl::Duration down, absl::Duration up, int count,
                               uint64_t epoch);

  // Constant after construction.
  const std::string id_;
  const int hosts_;
  const int net_a_, net_b_;  // 10.<a>.<b>.0/24.

  std::atomic<bool> owned_;
  std::atomic<uint64_t> flap_epoch_{0};  // Bumped by Heal() to stop flaps.
  mutable Mutex mu_;
  CondVar flap_cv_;
  std::vector<std::thread> flaps_ ABSL_GUARDED_BY(mu_);
  int flaps_running_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shardps::testing

#endif  // SHARDPS_TESTS_TESTING_NETBOX_H_

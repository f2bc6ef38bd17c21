// Membership: who is in the job, with which index, alive or not, and the
// partition map built from the servers' addresses.
//
// Servers and workers register (role, address, optional requested index,
// config fingerprint, incarnation) and get an index: server index or worker
// rank. Each process start has its own random incarnation:
//  - a registration with the incarnation of the slot's holder is that
//    process again (a retry, or a rejoin after it was declared dead): it
//    keeps the slot;
//  - another incarnation is a new process for that index (a restart: same
//    rank, same partitions). It takes the slot if the slot is free, its
//    holder was declared dead, or its holder has been silent for more than
//    two heartbeat periods (a killed process restarted at once by its
//    supervisor). A server's new address bumps the map version.
//
// Servers in the map and spare servers (resharding, docs/design.md
// "Resharding"). There are cluster.max_servers server slots; the first
// `MapServers()` (initially num_servers) are the job's servers: the map
// names their addresses and gives them every partition. A server that
// registers with an index beyond them is a spare: it owns no partitions,
// its address is not in the map, and nothing waits for it; it joins the map
// when SetOwners gives it partitions. Members(), DeadServers() and Sweep()'s
// result name the map's servers only (so a spare that dies starts no
// recovery); Spares() names the spares that registered.
// Refusals:
//   FAILED_PRECONDITION  the process loaded another job config (fingerprint)
//   ALREADY_EXISTS       the requested index is held by a live, heartbeating
//                        process of another incarnation
//   RESOURCE_EXHAUSTED   every slot of that role is taken
//   INVALID_ARGUMENT     no role, a server without address, index out of range,
//                        no incarnation (0)
//
// Thread-safe (one mutex; calls are short and never block).
#ifndef SHARDPS_SCHEDULER_MEMBERSHIP_H_
#define SHARDPS_SCHEDULER_MEMBERSHIP_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "proto/config.pb.h"
#include "proto/scheduler.pb.h"

namespace shardps {

struct Member {
  Role role = ROLE_UNSPECIFIED;
  uint32_t index = 0;
  std::string address;
  MemberState state = STATE_UNSPECIFIED;  // UNSPECIFIED = never registered.
  absl::Time last_heartbeat;
  absl::Time state_since;
  uint32_t registrations = 0;  // Processes that held the slot (> 1: restarts).
  uint64_t incarnation = 0;    // Of the holder (0: not given).
  std::string reason;          // Why it is DEAD.
};

// What a registration did to its slot.
struct Registration {
  Member member;                                   // After it.
  MemberState previous_state = STATE_UNSPECIFIED;  // Before it.
  absl::Time previous_heartbeat;                   // The previous holder's last one.
  // The holder itself again (same incarnation), not declared dead: nothing
  // changed but its heartbeat time.
  bool repeat = false;
  // A process other than the previous holder (another incarnation).
  bool new_process = false;
  // A spare server (see the top): outside the map.
  bool spare = false;
};

// A heartbeat's verdict.
enum class HeartbeatVerdict {
  kOk,
  // Unknown to this scheduler, or declared dead: register again (rejoin).
  kRejoin,
  // Another process (incarnation) holds the slot now: this one must stop.
  kReplaced,
};

class Membership {
 public:
  Membership(const JobConfig& config, uint64_t fingerprint);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Registers a process (see the top). INVALID_ARGUMENT for an address
  // longer than 300 bytes (a host:port is shorter; JobStatus shows it).
  absl::StatusOr<Registration> Register(const RegisterRequest& request, absl::Time now);

  // Records a heartbeat of `incarnation`. INVALID_ARGUMENT for a bad role or
  // index, or no incarnation (0): a heartbeat that does not name the process
  // it stands for keeps nobody alive. One of another incarnation than the
  // slot's holder is kReplaced and refreshes nothing.
  absl::StatusOr<HeartbeatVerdict> Heartbeat(Role role, uint32_t index, uint64_t incarnation,
                                             absl::Time now);
  // Declares a member dead now, with `reason` (e.g. a worker's own error).
  void MarkDead(Role role, uint32_t index, const std::string& reason, absl::Time now);

  // Makes the map's version greater than `version` (a version some process
  // got from an earlier scheduler), rebuilding it if it is complete.
  void RaiseMapVersionAbove(uint64_t version);
  // Declares every never-registered `role` slot dead; returns their indexes.
  std::vector<uint32_t> ExpireUnregistered(Role role, absl::Time now);
  // True if `index` of `role` has registered (with this scheduler).
  bool Registered(Role role, uint32_t index) const;
  // The member `index` of `role`, or nullopt if out of range.
  std::optional<Member> Get(Role role, uint32_t index) const;
  // Declares members (alive or finished) silent for longer than
  // `dead_after` dead; returns them.
  std::vector<Member> Sweep(absl::Time now, absl::Duration dead_after);

  // A worker finished its data.
  void MarkFinished(uint32_t rank, absl::Time now);
  // A finished worker trains again (the job rolled back): ALIVE.
  void Reopen(uint32_t rank, absl::Time now);

  // The partition map once every server of the map has registered; nullopt
  // before.
  std::optional<PartitionMapProto> Map() const;
  uint64_t MapVersion() const;
  // The servers of the map: [0, MapServers()).
  uint32_t MapServers() const;
  // Resharding: the map's owners become `owner` (one per partition) and its
  // servers [0, max(owner) + 1); the version grows by one. Servers beyond
  // them become spares. INVALID_ARGUMENT if `owner` has not one entry per
  // partition or names a server beyond the slots; FAILED_PRECONDITION if a
  // server it names has not registered or the map is not complete yet.
  absl::StatusOr<PartitionMapProto> SetOwners(const std::vector<uint32_t>& owner);
  // A restarted scheduler, before the job forms: a server of the earlier one
  // rejoined holding a map with owners `owner` at `version`. If `version`
  // is above every one adopted so far, the map takes those owners and its
  // servers become [0, max(owner)] (a move of the earlier scheduler holds),
  // at a version above `version`; the map is complete again once those
  // servers registered. Returns whether it adopted them. INVALID_ARGUMENT
  // (nothing changes) if `owner` has not one entry per partition or names a
  // server beyond the slots.
  absl::StatusOr<bool> AdoptOwners(uint64_t version, const std::vector<uint32_t>& owner);

  // The map's servers and every worker.
  std::vector<Member> Members() const;
  // Spare servers that registered (see the top).
  std::vector<Member> Spares() const;
  bool AllWorkersDoneOrDead() const;
  bool AnyWorkerFinished() const;
  // Servers currently DEAD, with the time they died.
  std::vector<Member> DeadServers() const;

 private:
  // What Register refuses before looking at the slots: a role that is
  // neither, no incarnation, an address too long (or none for a server), a
  // config of another job.
  absl::Status CheckRegistration(const RegisterRequest& request) const;
  std::vector<Member>* SlotsLocked(Role role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildMapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const uint64_t fingerprint_;
  const uint32_t num_partitions_;
  const absl::Duration silent_after_;  // Two heartbeat periods.

  mutable Mutex mu_;
  std::vector<Member> servers_ ABSL_GUARDED_BY(mu_);  // max_servers slots.
  uint32_t map_servers_ ABSL_GUARDED_BY(mu_);
  std::vector<uint32_t> owner_ ABSL_GUARDED_BY(mu_);  // Partition -> server.
  std::vector<Member> workers_ ABSL_GUARDED_BY(mu_);
  std::optional<PartitionMapProto> map_ ABSL_GUARDED_BY(mu_);
  uint64_t min_version_ ABSL_GUARDED_BY(mu_) = 1;      // RaiseMapVersionAbove.
  uint64_t adopted_version_ ABSL_GUARDED_BY(mu_) = 0;  // AdoptOwners.
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_MEMBERSHIP_H_

// Membership: who is in the job, with which index, alive or not, and the
// partition map built from the servers' addresses.
//
// Servers and workers register (role, address, optional requested index,
// config fingerprint) and get an index: server index or worker rank. A
// process that registers again with the index of a member already declared
// dead takes that index back (a restart: same rank, same partitions; a
// server's new address bumps the map version). Refusals:
//   FAILED_PRECONDITION  the process loaded another job config (fingerprint)
//   ALREADY_EXISTS       the requested index is held by a live member
//   RESOURCE_EXHAUSTED   every slot of that role is taken
//   INVALID_ARGUMENT     no role, a server without address, index out of range
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
  uint32_t registrations = 0;  // > 1 after restarts.
};

class Membership {
 public:
  Membership(const JobConfig& config, uint64_t fingerprint);
  Membership(const Membership&) = delete;
  Membership& operator=(const Membership&) = delete;

  // Registers a process; returns its Member record (after registration).
  absl::StatusOr<Member> Register(const RegisterRequest& request,
                                  absl::Time now);

  // Records a heartbeat. NOT_FOUND if the member never registered,
  // FAILED_PRECONDITION if it was declared dead (it must register again).
  absl::Status Heartbeat(Role role, uint32_t index, absl::Time now);

  // Declares members silent for longer than `dead_after` dead; returns them.
  // Makes the map's version greater than `version` (a version some process
  // got from an earlier scheduler), rebuilding it if it is complete.
  void RaiseMapVersionAbove(uint64_t version);
  // Declares every never-registered `role` slot dead; returns their indexes.
  std::vector<uint32_t> ExpireUnregistered(Role role, absl::Time now);
  // True if `index` of `role` has registered (with this scheduler).
  bool Registered(Role role, uint32_t index) const;
  std::vector<Member> Sweep(absl::Time now, absl::Duration dead_after);

  // A worker finished its data.
  void MarkFinished(uint32_t rank, absl::Time now);

  // The partition map once every server has registered; nullopt before.
  std::optional<PartitionMapProto> Map() const;
  uint64_t MapVersion() const;

  std::vector<Member> Members() const;
  bool AllWorkersDoneOrDead() const;
  bool AnyWorkerFinished() const;
  // Servers currently DEAD, with the time they died.
  std::vector<Member> DeadServers() const;

 private:
  std::vector<Member>* SlotsLocked(Role role) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void RebuildMapLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  // Constant after construction.
  const uint64_t fingerprint_;
  const uint32_t num_partitions_;

  mutable Mutex mu_;
  std::vector<Member> servers_ ABSL_GUARDED_BY(mu_);
  std::vector<Member> workers_ ABSL_GUARDED_BY(mu_);
  std::optional<PartitionMapProto> map_ ABSL_GUARDED_BY(mu_);
  uint64_t min_version_ ABSL_GUARDED_BY(mu_) = 1;  // RaiseMapVersionAbove.
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_MEMBERSHIP_H_

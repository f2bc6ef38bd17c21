#include "scheduler/membership.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "common/partition.h"

namespace shardps {
namespace {

const char* RoleName(Role role) { return role == SERVER ? "server" : "worker"; }

// A member's address is a host:port (a DNS name is at most 253 bytes).
constexpr size_t kMaxAddressBytes = 300;

}  // namespace

Membership::Membership(const JobConfig& config, uint64_t fingerprint)
    : fingerprint_(fingerprint),
      num_partitions_(config.cluster().num_partitions()),
      silent_after_(absl::Milliseconds(2 * std::max<uint32_t>(config.cluster().heartbeat_ms(), 1))),
      servers_(std::max(config.cluster().num_servers(), config.cluster().max_servers())),
      map_servers_(config.cluster().num_servers()),
      workers_(config.cluster().num_workers()) {
  if (num_partitions_ > 0 && map_servers_ > 0 && map_servers_ <= num_partitions_) {
    owner_ = PartitionMap::Contiguous(1, num_partitions_, map_servers_)->owners();
  }
  for (uint32_t i = 0; i < servers_.size(); ++i) {
    servers_[i].role = SERVER;
    servers_[i].index = i;
  }
  for (uint32_t i = 0; i < workers_.size(); ++i) {
    workers_[i].role = WORKER;
    workers_[i].index = i;
  }
}

std::vector<Member>* Membership::SlotsLocked(Role role) {
  return role == SERVER ? &servers_ : &workers_;
}

absl::Status Membership::CheckRegistration(const RegisterRequest& request) const {
  if (request.role() != SERVER && request.role() != WORKER) {
    return absl::InvalidArgumentError("register: role must be SERVER or WORKER");
  }
  if (request.incarnation() == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("register: the ", RoleName(request.role()),
                     " sent no incarnation (a random non-zero number per process start)"));
  }
  if (request.address().size() > kMaxAddressBytes) {
    return absl::InvalidArgumentError(absl::StrCat("register: an address of ",
                                                   request.address().size(), " bytes (at most ",
                                                   kMaxAddressBytes, ": host:port)"));
  }
  if (request.role() == SERVER && request.address().empty()) {
    return absl::InvalidArgumentError("register: a server must give its address");
  }
  if (request.config_fingerprint() != fingerprint_) {
    return absl::FailedPreconditionError(absl::StrCat(
        "register: the ", RoleName(request.role()), " loaded a different job config (fingerprint ",
        absl::Hex(request.config_fingerprint(), absl::kZeroPad16), ", the scheduler's is ",
        absl::Hex(fingerprint_, absl::kZeroPad16), "): start every process with the same config"));
  }
  return absl::OkStatus();
}

absl::StatusOr<Registration> Membership::Register(const RegisterRequest& request, absl::Time now) {
  if (absl::Status st = CheckRegistration(request); !st.ok()) return st;
  MutexLock lock(&mu_);
  std::vector<Member>& slots = *SlotsLocked(request.role());
  Member* slot = nullptr;
  if (request.has_requested_index()) {
    if (request.requested_index() >= slots.size()) {
      return absl::InvalidArgumentError(absl::StrCat("register: ", RoleName(request.role()),
                                                     " index ", request.requested_index(),
                                                     " out of range; the job has ", slots.size()));
    }
    slot = &slots[request.requested_index()];
    const bool held = slot->state == ALIVE || slot->state == FINISHED;
    const bool same = request.incarnation() == slot->incarnation;
    if (held && same) {  // The holder again: a retry.
      slot->last_heartbeat = now;
      Registration r;
      r.member = *slot;
      r.previous_state = slot->state;
      r.previous_heartbeat = now;
      r.repeat = true;
      return r;
    }
    if (held && now - slot->last_heartbeat <= silent_after_) {
      return absl::AlreadyExistsError(absl::StrCat(
          "register: ", RoleName(request.role()), " index ", slot->index,
          " is held by a live process", slot->address.empty() ? "" : " at ", slot->address,
          " (last heartbeat ", absl::FormatDuration(now - slot->last_heartbeat),
          " ago); a restarted process takes it once the old one has been silent for ",
          absl::FormatDuration(silent_after_)));
    }
  } else {
    for (Member& m : slots) {  // The map's slots first, then the spares.
      if (m.state == STATE_UNSPECIFIED) {
        slot = &m;
        break;
      }
    }
    if (slot == nullptr) {
      return absl::ResourceExhaustedError(
          absl::StrCat("register: all ", slots.size(), " ", RoleName(request.role()),
                       " slots are taken; pass the index of a dead one to replace it"));
    }
  }
  Registration r;
  r.previous_state = slot->state;
  r.previous_heartbeat = slot->last_heartbeat;
  r.new_process = request.incarnation() != slot->incarnation;
  const bool address_changed = slot->address != request.address();
  slot->address = request.address();
  slot->state = ALIVE;
  slot->last_heartbeat = now;
  slot->state_since = now;
  slot->incarnation = request.incarnation();
  slot->reason.clear();
  if (r.new_process) slot->registrations++;
  r.spare = request.role() == SERVER && slot->index >= map_servers_;
  if (request.role() == SERVER && !r.spare && (address_changed || !map_)) RebuildMapLocked();
  r.member = *slot;
  return r;
}

void Membership::MarkDead(Role role, uint32_t index, const std::string& reason, absl::Time now) {
  MutexLock lock(&mu_);
  if (role != SERVER && role != WORKER) return;
  std::vector<Member>& slots = *SlotsLocked(role);
  if (index >= slots.size()) return;
  slots[index].state = DEAD;
  slots[index].state_since = now;
  slots[index].reason = reason;
}

void Membership::Reopen(uint32_t rank, absl::Time now) {
  MutexLock lock(&mu_);
  if (rank >= workers_.size() || workers_[rank].state != FINISHED) return;
  workers_[rank].state = ALIVE;
  workers_[rank].state_since = now;
}

void Membership::RaiseMapVersionAbove(uint64_t version) {
  MutexLock lock(&mu_);
  if (version < min_version_) return;
  min_version_ = version + 1;
  if (map_ && map_->version() <= version) RebuildMapLocked();
}

std::vector<uint32_t> Membership::ExpireUnregistered(Role role, absl::Time now) {
  MutexLock lock(&mu_);
  std::vector<uint32_t> expired;
  for (Member& m : *SlotsLocked(role)) {
    if (m.state != STATE_UNSPECIFIED) continue;
    if (role == SERVER && m.index >= map_servers_) continue;  // Spares are optional.
    m.state = DEAD;
    m.state_since = now;
    m.reason = "never registered with this scheduler";
    expired.push_back(m.index);
  }
  return expired;
}

bool Membership::Registered(Role role, uint32_t index) const {
  MutexLock lock(&mu_);
  const std::vector<Member>& slots = role == SERVER ? servers_ : workers_;
  return index < slots.size() && slots[index].state != STATE_UNSPECIFIED;
}

std::optional<Member> Membership::Get(Role role, uint32_t index) const {
  MutexLock lock(&mu_);
  const std::vector<Member>& slots = role == SERVER ? servers_ : workers_;
  if (role != SERVER && role != WORKER) return std::nullopt;
  if (index >= slots.size()) return std::nullopt;
  return slots[index];
}

void Membership::RebuildMapLocked() {
  for (uint32_t i = 0; i < map_servers_; ++i) {
    if (servers_[i].state == STATE_UNSPECIFIED) return;  // Not complete yet.
  }
  const uint64_t version = std::max<uint64_t>(map_ ? map_->version() + 1 : 1, min_version_);
  PartitionMapProto map;
  map.set_version(version);
  map.set_num_partitions(num_partitions_);
  for (uint32_t owner : owner_) map.add_owner(owner);
  for (uint32_t i = 0; i < map_servers_; ++i) map.add_server_addresses(servers_[i].address);
  map_ = std::move(map);
}

uint32_t Membership::MapServers() const {
  MutexLock lock(&mu_);
  return map_servers_;
}

absl::StatusOr<PartitionMapProto> Membership::SetOwners(const std::vector<uint32_t>& owner) {
  MutexLock lock(&mu_);
  if (owner.size() != num_partitions_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "set owners: ", owner.size(), " owners, the job has ", num_partitions_, " partitions"));
  }
  const uint32_t servers = *std::max_element(owner.begin(), owner.end()) + 1;
  if (servers > servers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("set owners: server ", servers - 1,
                                                   " is beyond the job's ", servers_.size(),
                                                   " server slots (cluster.max_servers)"));
  }
  if (!map_) {
    return absl::FailedPreconditionError("set owners: the partition map is not complete yet");
  }
  for (uint32_t i = 0; i < servers; ++i) {
    if (servers_[i].state == STATE_UNSPECIFIED) {
      return absl::FailedPreconditionError(
          absl::StrCat("set owners: server ", i, " has not registered"));
    }
  }
  owner_ = owner;
  map_servers_ = servers;
  RebuildMapLocked();
  return *map_;
}

absl::StatusOr<bool> Membership::AdoptOwners(uint64_t version, const std::vector<uint32_t>& owner) {
  MutexLock lock(&mu_);
  if (owner.size() != num_partitions_) {
    return absl::InvalidArgumentError(absl::StrCat(
        "adopt owners: ", owner.size(), " owners, the job has ", num_partitions_, " partitions"));
  }
  const uint32_t servers = *std::max_element(owner.begin(), owner.end()) + 1;
  if (servers > servers_.size()) {
    return absl::InvalidArgumentError(absl::StrCat("adopt owners: server ", servers - 1,
                                                   " is beyond the job's ", servers_.size(),
                                                   " server slots (cluster.max_servers)"));
  }
  if (version <= adopted_version_) return false;
  adopted_version_ = version;
  if (owner == owner_ && servers == map_servers_) return true;
  owner_ = owner;
  map_servers_ = servers;
  // The next map is newer than both the current one and `version`.
  min_version_ = std::max({min_version_, version + 1, map_ ? map_->version() + 1 : 1});
  map_.reset();
  RebuildMapLocked();
  return true;
}

absl::StatusOr<HeartbeatVerdict> Membership::Heartbeat(Role role, uint32_t index,
                                                       uint64_t incarnation, absl::Time now) {
  MutexLock lock(&mu_);
  if (role != SERVER && role != WORKER) {
    return absl::InvalidArgumentError("heartbeat: bad role");
  }
  std::vector<Member>& slots = *SlotsLocked(role);
  if (index >= slots.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat("heartbeat: ", RoleName(role), " index ", index, " out of range"));
  }
  if (incarnation == 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "heartbeat: ", RoleName(role), " ", index,
        " sent no incarnation; refused (a heartbeat must name the process it stands for)"));
  }
  Member& m = slots[index];
  if (m.state == STATE_UNSPECIFIED) return HeartbeatVerdict::kRejoin;
  if (incarnation != m.incarnation) {
    return HeartbeatVerdict::kReplaced;
  }
  if (m.state == DEAD) return HeartbeatVerdict::kRejoin;
  m.last_heartbeat = now;
  return HeartbeatVerdict::kOk;
}

std::vector<Member> Membership::Sweep(absl::Time now, absl::Duration dead_after) {
  MutexLock lock(&mu_);
  std::vector<Member> died;
  for (std::vector<Member>* slots : {&servers_, &workers_}) {
    for (Member& m : *slots) {
      const bool spare = m.role == SERVER && m.index >= map_servers_;
      if ((m.state == ALIVE || m.state == FINISHED) && now - m.last_heartbeat > dead_after) {
        m.state = DEAD;
        m.state_since = now;
        m.reason =
            absl::StrCat("missed heartbeats for ", absl::FormatDuration(now - m.last_heartbeat),
                         " (killed, crashed or stalled)");
        if (!spare) died.push_back(m);
      }
    }
  }
  return died;
}

void Membership::MarkFinished(uint32_t rank, absl::Time now) {
  MutexLock lock(&mu_);
  if (rank >= workers_.size()) return;
  workers_[rank].state = FINISHED;
  workers_[rank].state_since = now;
}

std::optional<PartitionMapProto> Membership::Map() const {
  MutexLock lock(&mu_);
  return map_;
}

uint64_t Membership::MapVersion() const {
  MutexLock lock(&mu_);
  return map_ ? map_->version() : 0;
}

std::vector<Member> Membership::Members() const {
  MutexLock lock(&mu_);
  std::vector<Member> all(servers_.begin(), servers_.begin() + map_servers_);
  all.insert(all.end(), workers_.begin(), workers_.end());
  return all;
}

std::vector<Member> Membership::Spares() const {
  MutexLock lock(&mu_);
  std::vector<Member> spares;
  for (uint32_t i = map_servers_; i < servers_.size(); ++i) {
    if (servers_[i].state != STATE_UNSPECIFIED) spares.push_back(servers_[i]);
  }
  return spares;
}

bool Membership::AllWorkersDoneOrDead() const {
  MutexLock lock(&mu_);
  for (const Member& w : workers_) {
    if (w.state != FINISHED && w.state != DEAD) return false;
  }
  return true;
}

bool Membership::AnyWorkerFinished() const {
  MutexLock lock(&mu_);
  for (const Member& w : workers_) {
    if (w.state == FINISHED) return true;
  }
  return false;
}

std::vector<Member> Membership::DeadServers() const {
  MutexLock lock(&mu_);
  std::vector<Member> dead;
  for (uint32_t i = 0; i < map_servers_; ++i) {
    if (servers_[i].state == DEAD) dead.push_back(servers_[i]);
  }
  return dead;
}

}  // namespace shardps

// Takeover: what a starting scheduler learns, before the job forms, of the
// processes an earlier scheduler ran (job.h, "Lifecycle").
//
// Live servers and workers of an earlier scheduler rejoin it with their
// state (RegisterRequest.rejoin: job generation, clock, map version); others
// register without state (a new process). If every process came back with
// one generation, the job goes on from that state with nothing rolled back
// (a takeover); otherwise the job rolls back, in a generation above every
// one seen.
//
// Not thread-safe: JobState (job_state.h) holds it under its lock.
#ifndef SHARDPS_SCHEDULER_TAKEOVER_H_
#define SHARDPS_SCHEDULER_TAKEOVER_H_

#include <cstdint>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "proto/scheduler.pb.h"

namespace shardps {

class Takeover {
 public:
  // Process `index` of `role` rejoined with state `rejoin`.
  void Rejoined(Role role, uint32_t index, const Rejoin& rejoin);
  // Process `index` of `role` registered without state (unless it rejoined
  // since: the last registration counts).
  void Fresh(Role role, uint32_t index);

  // Some process rejoined: this scheduler takes over an earlier one's job.
  bool active() const { return !rejoins_.empty(); }
  // Why the rejoined state cannot be taken over as it is ("" if it can): a
  // process came back without state (a server of the map that did not
  // rejoin counts), the rejoined ones are in different generations (a
  // rollback was under way), the map's servers hold different maps (a move
  // was under way), or the job had not started. Only the map's servers,
  // [0, map_servers), and the workers count: spare servers hold nothing.
  std::string Problem(uint32_t map_servers = UINT32_MAX) const;
  // The generation every rejoined process is in (when Problem() is ""):
  // server 0's, which every map has.
  uint64_t generation() const;
  // The largest generation a rejoined process was in, or `current` if larger.
  uint64_t MaxGeneration(uint64_t current) const;

 private:
  using Key = std::pair<Role, uint32_t>;
  std::map<Key, Rejoin> rejoins_;
  std::set<Key> fresh_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_TAKEOVER_H_

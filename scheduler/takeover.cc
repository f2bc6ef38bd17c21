#include "scheduler/takeover.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shardps {

void Takeover::Rejoined(Role role, uint32_t index, const Rejoin& rejoin) {
  rejoins_[{role, index}] = rejoin;
  fresh_.erase({role, index});
}

void Takeover::Fresh(Role role, uint32_t index) { fresh_.insert({role, index}); }

std::string Takeover::Problem(uint32_t map_servers) const {
  const auto counts = [map_servers](const Key& key) {
    return key.first != SERVER || key.second < map_servers;
  };
  for (const Key& key : fresh_) {
    if (!counts(key)) continue;
    return absl::StrCat(key.first == SERVER ? "server " : "worker ", key.second,
                        " registered without the state it had (a new process)");
  }
  std::set<uint64_t> generations, maps;
  for (const auto& [key, r] : rejoins_) {
    if (!counts(key)) continue;
    generations.insert(r.generation());
    if (key.first == SERVER) maps.insert(r.owner_map_version());
  }
  if (map_servers != UINT32_MAX) {
    for (uint32_t i = 0; i < map_servers; ++i) {
      if (rejoins_.count({SERVER, i}) == 0) {
        return absl::StrCat("server ", i, " of the map did not rejoin with its state");
      }
    }
  }
  if (maps.size() > 1) {
    return absl::StrCat("the servers hold different partition maps (versions ",
                        absl::StrJoin(maps, ","), "): a move was under way");
  }
  if (generations.size() > 1) {
    return absl::StrCat("the processes that rejoined are in different job generations [",
                        absl::StrJoin(generations, ","), "] (a rollback was under way)");
  }
  if (generations.empty() || *generations.begin() == 0) {
    return "the job had not started when the scheduler stopped";
  }
  return "";
}

uint64_t Takeover::generation() const {
  return rejoins_.empty() ? 0 : rejoins_.begin()->second.generation();
}

uint64_t Takeover::MaxGeneration(uint64_t current) const {
  for (const auto& [key, r] : rejoins_) current = std::max(current, r.generation());
  return current;
}

}  // namespace shardps

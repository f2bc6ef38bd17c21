#include "scheduler/reshard_plan.h"

#include <algorithm>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace shardps {

namespace {

using Wide = unsigned __int128;

absl::Status Validate(const ReshardInput& input) {
  const size_t parts = input.owner.size();
  if (parts == 0) return absl::InvalidArgumentError("reshard plan: no partitions");
  if (!input.rows.empty() && input.rows.size() != parts) {
    return absl::InvalidArgumentError(absl::StrCat("reshard plan: rows of ", input.rows.size(),
                                                   " partitions, owners of ", parts));
  }
  if (!input.bytes.empty() && input.bytes.size() != parts) {
    return absl::InvalidArgumentError(absl::StrCat("reshard plan: bytes of ", input.bytes.size(),
                                                   " partitions, owners of ", parts));
  }
  if (input.target_servers == 0 || input.target_servers > parts) {
    return absl::InvalidArgumentError(absl::StrCat("reshard plan: needs 0 < servers <= ", parts,
                                                   " partitions, got ", input.target_servers,
                                                   " servers"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReshardPlan> PlanReshard(const ReshardInput& input) {
  if (absl::Status s = Validate(input); !s.ok()) return s;
  const uint32_t parts = static_cast<uint32_t>(input.owner.size());
  const uint32_t n = input.target_servers;
  const uint32_t old_servers = *std::max_element(input.owner.begin(), input.owner.end()) + 1;
  auto rows = [&](uint32_t p) -> uint64_t { return input.rows.empty() ? 0 : input.rows[p]; };
  auto bytes = [&](uint32_t p) -> uint64_t { return input.bytes.empty() ? 0 : input.bytes[p]; };
  auto weight = [&](uint32_t p) -> uint64_t { return rows(p) + 1; };

  Wide total = 0;
  uint64_t w_max = 0;
  std::vector<Wide> load(std::max(n, old_servers), 0);
  std::vector<std::vector<uint32_t>> held(std::max(n, old_servers));
  for (uint32_t p = 0; p < parts; ++p) {
    total += weight(p);
    w_max = std::max(w_max, weight(p));
    load[input.owner[p]] += weight(p);
    held[input.owner[p]].push_back(p);
  }
  // In units of 1/N: T = total, T + w_max = total + w_max * N.
  const Wide high = total + Wide{w_max} * n;

  ReshardPlan plan;
  plan.owner = input.owner;
  std::vector<uint32_t> pool;
  for (uint32_t s = 0; s < held.size(); ++s) {
    if (s >= n) {  // Drained.
      pool.insert(pool.end(), held[s].begin(), held[s].end());
      load[s] = 0;
      continue;
    }
    if (load[s] * n <= high) continue;
    // Highest index first (held[s] is in index order).
    for (auto it = held[s].rbegin(); it != held[s].rend(); ++it) {
      if (load[s] * n <= high) break;
      const uint32_t p = *it;
      // Shed p only if the server keeps at least T.
      if (Wide{weight(p)} * n > load[s] * n - total) continue;
      load[s] -= weight(p);
      pool.push_back(p);
    }
  }
  // Index order; each receiver takes a contiguous run until it reaches T.
  std::sort(pool.begin(), pool.end());
  auto least_below_t = [&]() {
    uint32_t best = n;
    for (uint32_t s = 0; s < n; ++s) {
      if (load[s] * n < total && (best == n || load[s] < load[best])) best = s;
    }
    return best;
  };
  uint32_t to = least_below_t();
  for (uint32_t p : pool) {
    // While partitions are left, the assigned loads sum below N * T, so
    // some server is below T.
    if (to == n || load[to] * n >= total) to = least_below_t();
    plan.owner[p] = to;
    load[to] += weight(p);
  }

  plan.server_rows.assign(n, 0);
  plan.server_partitions.assign(n, 0);
  for (uint32_t p = 0; p < parts; ++p) {
    plan.server_rows[plan.owner[p]] += rows(p);
    ++plan.server_partitions[plan.owner[p]];
    if (plan.owner[p] == input.owner[p]) continue;
    plan.moves.push_back({p, input.owner[p], plan.owner[p], rows(p), bytes(p)});
    plan.rows_moved += rows(p);
    plan.bytes_moved += bytes(p);
  }
  return plan;
}

}  // namespace shardps

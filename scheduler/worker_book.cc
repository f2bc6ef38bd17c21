// WorkerBook: the workers' positions, reports and barriers
// (worker_book.h).
#include "scheduler/worker_book.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"

namespace shardps {

WorkerBook::WorkerBook(uint32_t num_workers) : final_(num_workers, false) {}

void WorkerBook::RecordPosition(uint32_t rank, uint64_t clock, std::string position) {
  positions_[rank] = {clock, std::move(position)};
}

std::string WorkerBook::PositionAt(uint32_t rank, uint64_t clock) const {
  auto it = positions_.find(rank);
  if (it == positions_.end() || it->second.first != clock) return "";
  return it->second.second;
}

WorkerBook::Positions WorkerBook::LatestPositions() const {
  Positions positions;
  for (const auto& [rank, p] : positions_) positions[rank] = p.second;
  return positions;
}

void WorkerBook::RecordReport(const MetricsReport& report) {
  reports_[report.rank()] = report;
  if (report.final()) final_[report.rank()] = true;
}

uint64_t WorkerBook::LongestFinished() const {
  uint64_t longest = 0;
  for (const auto& [rank, r] : reports_) {
    if (final_[rank]) longest = std::max(longest, r.step());
  }
  return longest;
}

void WorkerBook::Rejoined(uint32_t rank, const Rejoin& rejoin) {
  positions_[rank] = {rejoin.clock(), rejoin.position()};
  if (rejoin.has_last_report()) reports_[rank] = rejoin.last_report();
  if (rejoin.finished()) final_[rank] = rejoin.has_last_report() && rejoin.last_report().final();
}

void WorkerBook::Enter(const std::string& name, uint32_t rank) {
  std::vector<bool>& entered = barriers_[name];
  entered.resize(final_.size(), false);
  entered[rank] = true;
}

bool WorkerBook::Entered(const std::string& name, uint32_t rank) const {
  auto it = barriers_.find(name);
  return it != barriers_.end() && rank < it->second.size() && it->second[rank];
}

void WorkerBook::Rewind(uint64_t clock, const Positions& positions) {
  positions_.clear();
  for (const auto& [rank, position] : positions) positions_[rank] = {clock, position};
  std::fill(final_.begin(), final_.end(), false);
  reports_.clear();
  barriers_.clear();
}

std::string WorkerBook::Summary(const std::vector<Member>& members,
                                const std::vector<uint64_t>& clocks, bool drops) const {
  std::string out;
  for (const Member& m : members) {
    if (m.role != WORKER) continue;
    // Steps acknowledged: the worker's clock (its reports may be older).
    auto it = reports_.find(m.index);
    const uint64_t step = std::max(clocks[m.index], it == reports_.end() ? 0 : it->second.step());
    const char* what = final_[m.index]                ? "finished"
                       : m.state == DEAD              ? "DEAD, data unfinished"
                       : m.state == STATE_UNSPECIFIED ? "not registered yet,"
                                                      : "training";
    absl::StrAppend(&out, "  worker ", m.index, ": ", what, " after ", step, " steps");
    if (!final_[m.index] && m.state == DEAD) {
      absl::StrAppend(&out, drops ? " (its shard from step " : " (waited for; its shard from step ",
                      step, drops ? " on was not trained)" : " on is not trained yet)");
      if (!m.reason.empty()) absl::StrAppend(&out, ": ", m.reason);
    }
    absl::StrAppend(&out, "\n");
  }
  return out;
}

void WorkerBook::FillStatus(const std::map<uint32_t, uint64_t>& tick_samples,
                            JobStatusResponse* response) const {
  double sps = 0, loss = 0, train_auc = 0;
  uint64_t samples = 0;
  // Per worker the larger of its latest report and its latest tick.
  std::map<uint32_t, uint64_t> share = tick_samples;
  for (const auto& [rank, r] : reports_) share[rank] = std::max(share[rank], r.samples());
  for (const auto& [rank, s] : share) {
    // Saturating: reports are validated, the sum must not wrap either.
    samples = s > UINT64_MAX - samples ? UINT64_MAX : samples + s;
  }
  int n = 0;
  for (const auto& [rank, r] : reports_) {
    if (!r.done()) sps += r.samples_per_sec();
    loss += r.train_loss();
    train_auc += r.train_auc();
    ++n;
    if (r.final() && r.eval_examples() > 0) {
      response->set_eval_auc(r.eval_auc());
      response->set_eval_loss(r.eval_loss());
    }
  }
  response->set_samples_per_sec(sps);
  response->set_total_samples(samples);
  if (n > 0) response->set_train_loss(loss / n);
  if (n > 0) response->set_train_auc(train_auc / n);
}

}  // namespace shardps

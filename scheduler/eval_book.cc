#include "scheduler/eval_book.h"

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <utility>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/checkpoint/file_io.h"
#include "glog/logging.h"

namespace shardps {

EvalBook::EvalBook(Options options) : o_(std::move(options)) {}

absl::Status EvalBook::Load() {
  if (o_.dir.empty()) return absl::OkStatus();
  const std::string path = checkpoint::JoinPath(o_.dir, kEvaluationsFile);
  auto text = checkpoint::ReadFileToString(path);
  if (absl::IsNotFound(text.status())) return absl::OkStatus();
  if (!text.ok()) return text.status();
  int line_no = 0;
  for (absl::string_view line : absl::StrSplit(*text, '\n', absl::SkipEmpty())) {
    ++line_no;
    if (line[0] == '#') continue;
    std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
    uint64_t clock = 0, examples = 0;
    double auc = 0, logloss = 0, seconds = 0;
    if (f.size() == 6 && f[0] == "eval" && absl::SimpleAtoi(f[1], &clock) &&
        absl::SimpleAtod(f[2], &auc) && absl::SimpleAtod(f[3], &logloss) &&
        absl::SimpleAtoi(f[4], &examples) && absl::SimpleAtod(f[5], &seconds)) {
      CheckpointEval& e = evals_[clock];
      e.set_clock(clock);
      e.set_auc(auc);
      e.set_logloss(logloss);
      e.set_examples(examples);
      e.set_seconds(seconds);
    } else if (f.size() == 2 && f[0] == "stopped_at" && absl::SimpleAtoi(f[1], &clock)) {
      stopped_at_ = clock;
    } else {
      return absl::DataLossError(
          absl::StrCat(path, ":", line_no, ": not an evaluation record: \"", line, "\""));
    }
  }
  LOG(INFO) << "periodic evaluation: " << evals_.size() << " evaluations read from " << path
            << (stopped_at_ ? absl::StrCat(", training stopped at clock ", stopped_at_) : "");
  return absl::OkStatus();
}

void EvalBook::Enqueue(uint64_t clock, bool final) {
  if (!on() || clock == 0 || evals_.count(clock) > 0) return;
  if (final || clock % o_.every_steps == 0) due_.try_emplace(clock);
}

std::optional<uint64_t> EvalBook::Take(uint32_t rank, absl::Time now) {
  for (const auto& [clock, d] : due_) {
    if (d.holder == rank) return clock;  // Asked again (its answer was lost).
  }
  for (auto& [clock, d] : due_) {
    if (!d.holder) {
      d.holder = rank;
      d.taken = now;
      return clock;
    }
  }
  return std::nullopt;
}

void EvalBook::ExpireLeases(absl::Time now) {
  std::vector<std::pair<uint32_t, uint64_t>> expired;
  for (const auto& [clock, d] : due_) {
    if (d.holder && now - d.taken > o_.lease) expired.emplace_back(*d.holder, clock);
  }
  for (const auto& [rank, clock] : expired) {
    Failed(rank, clock,
           absl::StrCat("no answer within ", absl::FormatDuration(o_.lease), " of taking it"));
  }
}

void EvalBook::Release(uint32_t rank) {
  for (auto& [clock, d] : due_) {
    if (d.holder == rank) d.holder.reset();
  }
}

absl::Status EvalBook::Record(uint32_t rank, const CheckpointEval& e) {
  if (!(e.auc() >= 0 && e.auc() <= 1) && !std::isnan(e.auc())) {
    return absl::InvalidArgumentError(absl::StrCat("evaluation: auc is ", e.auc()));
  }
  if (!(e.logloss() >= 0) || !std::isfinite(e.seconds()) || e.seconds() < 0) {
    return absl::InvalidArgumentError(absl::StrCat("evaluation: logloss ", e.logloss(),
                                                   " and seconds ", e.seconds(), " must be >= 0"));
  }
  auto it = due_.find(e.clock());
  if (it == due_.end()) return absl::OkStatus();
  if (it->second.holder && *it->second.holder != rank) {
    return absl::FailedPreconditionError(
        absl::StrCat("evaluation of the checkpoint at clock ", e.clock(), " from worker ", rank,
                     ": it is leased to worker ", *it->second.holder, "; refused"));
  }
  due_.erase(it);
  evals_[e.clock()] = e;
  LOG(INFO) << "evaluation of the checkpoint at clock " << e.clock() << " by worker " << rank
            << ": AUC " << e.auc() << ", logloss " << e.logloss() << " (" << e.examples()
            << " examples, " << e.seconds() << " s)";
  return Persist();
}

void EvalBook::Failed(uint32_t rank, uint64_t clock, const std::string& why) {
  auto it = due_.find(clock);
  if (it == due_.end() || (it->second.holder && *it->second.holder != rank)) return;
  LOG(WARNING) << "worker " << rank << " could not evaluate the checkpoint at clock " << clock
               << ": " << why;
  if (++it->second.attempts >= kMaxAttempts) {
    LOG(ERROR) << "giving up the evaluation of the checkpoint at clock " << clock << " after "
               << kMaxAttempts << " attempts";
    due_.erase(it);
    return;
  }
  it->second.holder.reset();
}

absl::Status EvalBook::DropAfter(uint64_t clock) {
  const size_t before = evals_.size();
  evals_.erase(evals_.upper_bound(clock), evals_.end());
  due_.erase(due_.upper_bound(clock), due_.end());
  const bool unstop = stopped_at_ > clock;
  if (unstop) stopped_at_ = 0;
  if (before == evals_.size() && !unstop) return absl::OkStatus();
  return Persist();
}

std::vector<uint64_t> EvalBook::DueClocks() const {
  std::vector<uint64_t> out;
  for (const auto& [clock, d] : due_) out.push_back(clock);
  return out;
}

std::vector<uint64_t> EvalBook::Pinned() const {
  std::vector<uint64_t> out = DueClocks();
  if (auto best = Best()) out.push_back(best->clock());
  return out;
}

std::optional<CheckpointEval> EvalBook::Best() const {
  std::optional<CheckpointEval> best;
  for (const auto& [clock, e] : evals_) {
    if (std::isnan(e.auc())) continue;
    if (!best || e.auc() > best->auc()) best = e;
  }
  return best;
}

std::optional<CheckpointEval> EvalBook::Latest() const {
  if (evals_.empty()) return std::nullopt;
  return evals_.rbegin()->second;
}

bool EvalBook::ShouldStop() const {
  if (o_.patience == 0) return false;
  const uint64_t first_due = due_.empty() ? UINT64_MAX : due_.begin()->first;
  std::optional<double> ref;
  uint32_t without = 0;
  for (const auto& [clock, e] : evals_) {
    if (clock >= first_due) break;
    if (!std::isnan(e.auc()) && (!ref || e.auc() > *ref + o_.min_delta)) {
      ref = e.auc();
      without = 0;
    } else {
      ++without;
    }
  }
  return without >= o_.patience;
}

absl::Status EvalBook::SetStopped(uint64_t clock) {
  stopped_at_ = clock;
  return Persist();
}

absl::Status EvalBook::Persist() const {
  if (o_.dir.empty()) return absl::OkStatus();
  std::string text = "# clock auc logloss examples seconds\n";
  char buf[160];
  for (const auto& [clock, e] : evals_) {
    std::snprintf(buf, sizeof buf, "eval %" PRIu64 " %.17g %.17g %" PRIu64 " %.3f\n", clock,
                  e.auc(), e.logloss(), static_cast<uint64_t>(e.examples()), e.seconds());
    text += buf;
  }
  if (stopped_at_ > 0) absl::StrAppend(&text, "stopped_at ", stopped_at_, "\n");
  absl::Status st =
      checkpoint::WriteFileAtomically(checkpoint::JoinPath(o_.dir, kEvaluationsFile), text);
  const std::optional<CheckpointEval> best = Best();
  const std::string best_path = checkpoint::JoinPath(o_.dir, kBestFile);
  if (st.ok() && best) {
    st = checkpoint::WriteFileAtomically(best_path, absl::StrCat(best->clock(), "\n"));
  } else if (st.ok()) {
    st = checkpoint::RemoveAll(best_path);
  }
  if (!st.ok()) {
    return absl::Status(st.code(),
                        absl::StrCat("writing the evaluations in ", o_.dir, ": ", st.message()));
  }
  return absl::OkStatus();
}

}  // namespace shardps

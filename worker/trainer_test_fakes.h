// Fakes for the trainer's tests: a JobClock and a ParamStore that record
// the trainer's calls, in order, in one EventLog.
#ifndef SHARDPS_WORKER_TRAINER_TEST_FAKES_H_
#define SHARDPS_WORKER_TRAINER_TEST_FAKES_H_

#include <atomic>
#include <memory>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "common/generation.h"
#include "worker/param_store.h"
#include "worker/trainer.h"

namespace shardps {
namespace testing {

// One call the trainer made on the clock or the parameters.
struct Event {
  enum Kind { kWait, kProbe, kTick, kPull, kPush };
  Kind kind;
  uint64_t n;            // Step (wait, probe, pull, push) or clock (tick).
  bool ok = true;        // Wait/probe: the clock allowed the step.
  std::string position;  // Tick.
};

inline std::string ToString(const Event& e) {
  static const char* const kNames[] = {"wait", "probe", "tick", "pull", "push"};
  return absl::StrCat(kNames[e.kind], " ", e.n, e.ok ? "" : " (refused)");
}

inline std::string ToString(const std::vector<Event>& events) {
  std::string out;
  for (const Event& e : events) absl::StrAppend(&out, ToString(e), "\n");
  return out;
}

// Calls on the clock and the parameters, in the order they were made.
class EventLog {
 public:
  void Add(Event e) {
    absl::MutexLock lock(&mu_);
    events_.push_back(std::move(e));
  }
  std::vector<Event> events() const {
    absl::MutexLock lock(&mu_);
    return events_;
  }

 private:
  mutable absl::Mutex mu_;
  std::vector<Event> events_;
};

// A JobClock that allows every step unless told otherwise, and records.
class FakeClock final : public JobClock {
 public:
  explicit FakeClock(EventLog* log) : log_(log) {}

  bool allow_probes = true;  // Else probes get DEADLINE_EXCEEDED.
  // MinClock() reports the last clock ticked (0 before any): the minimum
  // of a job of one worker. Else it reports nothing.
  bool report_min_clock = false;
  std::optional<uint64_t> refuse_wait_at;  // Waits and probes for steps >= this.
  std::optional<uint64_t> refuse_tick_at;  // Ticks of clocks >= this.
  absl::Status refusal = StaleGenerationError("the scheduler", 1, 2);

  absl::Status WaitClock(uint32_t rank, uint64_t step, absl::Duration timeout) override {
    NoteRank(rank);
    const bool probe = timeout == absl::ZeroDuration();
    absl::Status st;
    if (refuse_wait_at && step >= *refuse_wait_at) {
      st = refusal;
    } else if (probe && !allow_probes) {
      st = absl::DeadlineExceededError("not yet");
    }
    log_->Add({probe ? Event::kProbe : Event::kWait, step, st.ok(), ""});
    return st;
  }
  absl::Status Tick(uint32_t rank, uint64_t clock, const std::string& position) override {
    NoteRank(rank);
    if (refuse_tick_at && clock >= *refuse_tick_at) return refusal;
    log_->Add({Event::kTick, clock, true, position});
    absl::MutexLock lock(&mu_);
    last_tick_ = clock;
    return absl::OkStatus();
  }
  std::optional<uint64_t> MinClock() const override {
    if (!report_min_clock) return std::nullopt;
    absl::MutexLock lock(&mu_);
    return last_tick_;
  }
  absl::Status ReportMetrics(const MetricsReport& report) override {
    absl::MutexLock lock(&mu_);
    reports_.push_back(report);
    return absl::UnavailableError("reports are best effort");
  }

  std::vector<MetricsReport> reports() const {
    absl::MutexLock lock(&mu_);
    return reports_;
  }
  std::set<uint32_t> ranks() const {
    absl::MutexLock lock(&mu_);
    return ranks_;
  }

 private:
  void NoteRank(uint32_t rank) {
    absl::MutexLock lock(&mu_);
    ranks_.insert(rank);
  }
  EventLog* const log_;
  mutable absl::Mutex mu_;
  std::vector<MetricsReport> reports_;
  std::set<uint32_t> ranks_;
  uint64_t last_tick_ = 0;
};

// In-process tables that record the training pulls and the pushes.
class RecordingStore final : public ParamStore {
 public:
  RecordingStore(std::unique_ptr<ParamStore> store, EventLog* log)
      : store_(std::move(store)), log_(log) {}
  std::unique_ptr<PsClient::Op> Pull(std::vector<TablePull> tables, PullPurpose purpose,
                                     uint64_t clock) override {
    if (purpose == TRAIN) {
      log_->Add({Event::kPull, clock, true, ""});
      for (const TablePull& t : tables) train_rows_pulled += t.n;
    }
    return store_->Pull(std::move(tables), purpose, clock);
  }
  std::unique_ptr<PsClient::Op> Push(std::vector<TablePush> tables, uint64_t clock,
                                     float lr_scale) override {
    log_->Add({Event::kPush, clock, true, ""});
    return store_->Push(std::move(tables), clock, lr_scale);
  }
  absl::Status InitRows(uint32_t table_id, uint32_t dim, const uint64_t* keys, size_t n,
                        const float* values) override {
    return store_->InitRows(table_id, dim, keys, n, values);
  }
  // Local tables serve state pulls; saying so makes the trainer replay its
  // own pending step on them (worker/trainer_split_pull.h).
  bool PullsWithState() const override { return pulls_with_state; }
  bool pulls_with_state = false;
  std::atomic<uint64_t> train_rows_pulled{0};  // Rows of TRAIN pulls, every table.

 private:
  const std::unique_ptr<ParamStore> store_;
  EventLog* const log_;
};

}  // namespace testing
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_TEST_FAKES_H_

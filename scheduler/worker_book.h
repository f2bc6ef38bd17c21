// WorkerBook: the scheduler's book of what each worker told it while it
// trains (job.h has the workers' requests), kept apart from the job's other
// state:
//
//   - each worker's latest data position and the clock it belongs to: its
//     ticks', or a restore point's after a rollback (WaitStart hands it
//     back, a cut records it in its MANIFEST);
//   - each worker's latest metrics report, and whether it sent its final
//     one (the job is not done before every worker is over);
//   - the barriers: per name, which ranks entered it.
//
// A rollback rewinds the book to the restore point: positions of the point,
// no reports, no barriers. A worker that rejoins a restarted scheduler
// brings its position, last report and whether it finished.
//
// The book decides nothing about processes: the scheduler (job_state.h)
// feeds it what the workers send and asks it what they said.
//
// Not thread-safe: JobState (job_state.h) holds it under its lock.
#ifndef SHARDPS_SCHEDULER_WORKER_BOOK_H_
#define SHARDPS_SCHEDULER_WORKER_BOOK_H_

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "proto/scheduler.pb.h"
#include "scheduler/membership.h"

namespace shardps {

class WorkerBook {
 public:
  // Worker rank -> data position.
  using Positions = std::map<uint32_t, std::string>;

  // For ranks [0, num_workers).
  explicit WorkerBook(uint32_t num_workers);

  uint32_t num_workers() const { return static_cast<uint32_t>(final_.size()); }

  // ---- Data positions ----
  // `rank` ticked `clock` at `position`.
  void RecordPosition(uint32_t rank, uint64_t clock, std::string position);
  // Where `rank` resumes at `clock`: its position there, "" if it recorded
  // none at that clock.
  std::string PositionAt(uint32_t rank, uint64_t clock) const;
  // Each worker's latest position (a cut with every worker held at its
  // clock records these).
  Positions LatestPositions() const;

  // ---- Reports ----
  // `report` of report.rank(), its last; final() marks the worker's last.
  void RecordReport(const MetricsReport& report);
  bool reported_final(uint32_t rank) const { return final_[rank]; }
  const std::map<uint32_t, MetricsReport>& reports() const { return reports_; }
  // The most steps a worker that sent its final report trained.
  uint64_t LongestFinished() const;

  // Worker `rank` rejoined a restarted scheduler with `rejoin`: its clock's
  // position, its last report, and (if it finished) whether that was final.
  void Rejoined(uint32_t rank, const Rejoin& rejoin);

  // ---- Barriers ----
  // `rank` entered barrier `name`.
  void Enter(const std::string& name, uint32_t rank);
  bool Entered(const std::string& name, uint32_t rank) const;

  // ---- Rollbacks ----
  // The job rolled back to `clock`, where the workers resume from
  // `positions`: reports, final flags and barriers are forgotten.
  void Rewind(uint64_t clock, const Positions& positions);

  // ---- The job's status ----
  // One line per worker of `members` (finished, training, dead with data
  // unfinished): its steps are the larger of its clock (`clocks`) and its
  // latest report's; `drops` (on_worker_loss DROP) says a dead worker's
  // shard is not trained.
  std::string Summary(const std::vector<Member>& members, const std::vector<uint64_t>& clocks,
                      bool drops) const;
  // JobStatusResponse's training figures: samples/s (of the workers still
  // training), mean train loss and AUC, the final reports' eval AUC and
  // loss, and total samples (per worker the larger of its latest report and
  // its latest tick's `tick_samples`, saturating).
  void FillStatus(const std::map<uint32_t, uint64_t>& tick_samples,
                  JobStatusResponse* response) const;

 private:
  std::map<uint32_t, std::pair<uint64_t, std::string>> positions_;  // Rank -> (clock, position).
  std::map<uint32_t, MetricsReport> reports_;
  std::vector<bool> final_;
  std::map<std::string, std::vector<bool>> barriers_;
};

}  // namespace shardps

#endif  // SHARDPS_SCHEDULER_WORKER_BOOK_H_

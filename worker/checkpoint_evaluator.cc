#include "worker/checkpoint_evaluator.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/export/restored_job.h"

namespace shardps {
namespace {

// How long one request waits for a checkpoint (the destructor may wait as
// long for the thread).
constexpr absl::Duration kPoll = absl::Seconds(2);

}  // namespace

CheckpointEvaluator::CheckpointEvaluator(Options options)
    : o_(std::move(options)), thread_([this] { Loop(); }) {}

CheckpointEvaluator::~CheckpointEvaluator() {
  stop_ = true;
  thread_.join();
}

void CheckpointEvaluator::Loop() {
  EvaluationRequest request;
  request.set_rank(o_.rank);
  while (!stop_) {
    auto answer = o_.scheduler->Evaluation(request, kPoll);
    if (!answer.ok()) {
      // The result (if any) is sent again with the next request, unless the
      // scheduler refused it (impossible, or a checkpoint no longer ours).
      LOG_EVERY_N(WARNING, 10) << "periodic evaluation: " << answer.status();
      if (absl::IsInvalidArgument(answer.status()) || absl::IsFailedPrecondition(answer.status())) {
        request.clear_done();
        request.clear_error();
      }
      for (int i = 0; i < 10 && !stop_; ++i) absl::SleepFor(absl::Milliseconds(100));
      continue;
    }
    request.clear_done();
    request.clear_error();
    if (answer->job_ended()) return;
    if (answer->clock() == 0) continue;
    const uint64_t clock = answer->clock();
    absl::Status st = EvaluateCheckpoint(clock, request.mutable_done());
    request.mutable_done()->set_clock(clock);
    if (!st.ok()) {
      LOG(WARNING) << "evaluating the checkpoint at clock " << clock << ": " << st;
      request.set_error(st.ToString());
    }
  }
}

absl::Status CheckpointEvaluator::EvaluateCheckpoint(uint64_t clock, CheckpointEval* done) {
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(auto job, exporter::RestoreJob(o_.config_path, o_.checkpoint_dir, clock));
  ASSIGN_OR_RETURN(
      EvalResult r,
      job->trainer->Evaluate(o_.eval_files, [this](const data::Batch&, absl::Span<const float>) {
        return stop_ ? absl::CancelledError("the worker is stopping") : absl::OkStatus();
      }));
  done->set_auc(r.auc);
  done->set_logloss(r.logloss);
  done->set_examples(r.examples);
  done->set_seconds(absl::ToDoubleSeconds(absl::Now() - start));
  LOG(INFO) << "evaluated the checkpoint at clock " << clock << ": AUC " << r.auc << ", logloss "
            << r.logloss << " (" << r.examples << " examples, " << done->seconds() << " s)";
  metrics::GetGauge("shardps_worker_eval_auc", "AUC on the held-out split.").Set(r.auc);
  metrics::GetGauge("shardps_worker_eval_logloss", "Logloss on the held-out split.").Set(r.logloss);
  return absl::OkStatus();
}

}  // namespace shardps

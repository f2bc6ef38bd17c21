#include "worker/trainer_steps.h"

#include <future>
#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/lr_schedule.h"

namespace shardps {
namespace trainer_internal {
namespace {

double Seconds(absl::Time since) { return absl::ToDoubleSeconds(absl::Now() - since); }

using OpPtr = std::unique_ptr<PsClient::Op>;

// The trainer's side of the job clock. Without one (local mode) every step
// may start at once and ticks go nowhere.
class ClockGate {
 public:
  ClockGate(JobClock* clock, uint32_t rank) : clock_(clock), rank_(rank) {}

  // Blocks until `step` may start. Long waits (a dead server being
  // replaced) are made in slices.
  absl::Status Wait(uint64_t step) {
    if (clock_ == nullptr) return absl::OkStatus();
    absl::Status st;
    for (int i = 0; i < 1000; ++i) {
      st = clock_->WaitClock(rank_, step, absl::Seconds(10));
      if (!absl::IsDeadlineExceeded(st)) return st;
    }
    return st;
  }

  // Whether `step` may start right now (a probe: never blocks for long).
  absl::StatusOr<bool> TryStart(uint64_t step) {
    if (clock_ == nullptr) return true;
    const absl::Status st = clock_->WaitClock(rank_, step, absl::ZeroDuration());
    if (absl::IsDeadlineExceeded(st)) return false;
    if (!st.ok()) return st;
    return true;
  }

  // Step clock - 1, which trained `p`, is done (its push acknowledged).
  absl::Status Tick(uint64_t clock, const Prepared& p) {
    if (clock_ == nullptr) return absl::OkStatus();
    return clock_->Tick(rank_, clock, data::EncodePosition(p.batch.end_position));
  }

 private:
  JobClock* const clock_;
  const uint32_t rank_;
};

// What every pipeline shares: the step counter, the current step's batch
// and pull, and the parts of a step, each timed into progress->times().
class StepLoop {
 public:
  explicit StepLoop(const StepEnv& env)
      : env_(env), clock_(env.clock, env.rank), times_(env.progress->times()),
        step_(env.start_step) {}
  virtual ~StepLoop() = default;

  absl::StatusOr<uint64_t> Run() {
    // The first step's batch, clock and pull (also when start_step is
    // already at max_steps: then only pulled).
    RETURN_IF_ERROR(LoadStep());
    RETURN_IF_ERROR(Steps());
    if (pull_ && cur_) (void)pull_->Wait();  // A pull past max_steps.
    return step_;
  }

 protected:
  // Runs the steps from step_ (cur_ and pull_ loaded, or cur_ null).
  virtual absl::Status Steps() = 0;

  bool InRange(uint64_t step) const { return env_.max_steps == 0 || step < env_.max_steps; }

  // The next prepared batch, null at the end of the data. Timed: data.
  absl::StatusOr<std::unique_ptr<Prepared>> NextBatch() {
    const absl::Time t0 = absl::Now();
    auto next = env_.data->Next();
    times_.data += Seconds(t0);
    return next;
  }

  // Takes step_'s batch into cur_ and, unless the data ended, waits for the
  // clock and starts its pull.
  absl::Status LoadStep() {
    ASSIGN_OR_RETURN(cur_, NextBatch());
    if (cur_) RETURN_IF_ERROR(WaitAndPull(absl::Now()));
    return absl::OkStatus();
  }

  // Waits until the clock allows step_ (timed: wait, from `since`), then
  // starts cur_'s pull.
  absl::Status WaitAndPull(absl::Time since) {
    RETURN_IF_ERROR(clock_.Wait(step_));
    times_.wait += Seconds(since);
    pull_ = env_.params->StartPull(cur_.get(), TRAIN, step_);
    return absl::OkStatus();
  }

  // Waits for cur_'s pull. Timed: pull, from `since`.
  absl::Status WaitPull(absl::Time since) {
    RETURN_IF_ERROR(pull_->Wait());
    times_.pull += Seconds(since);
    return absl::OkStatus();
  }

  // cur_'s forward and backward into `r`. Timed: compute.
  absl::Status Compute(StepResult* r) {
    if (env_.seen != nullptr) {
      env_.seen->resize(cur_->unique_keys.size());
      for (size_t t = 0; t < cur_->unique_keys.size(); ++t) {
        (*env_.seen)[t].insert(cur_->unique_keys[t].begin(), cur_->unique_keys[t].end());
      }
    }
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(env_.model->ForwardBackward(env_.params->Inputs(cur_.get()), true, r));
    if (env_.step_delay > absl::ZeroDuration()) absl::SleepFor(env_.step_delay);
    times_.compute += Seconds(t0);
    return absl::OkStatus();
  }

  float LrScale(uint64_t step) const {
    return static_cast<float>(
        data::LearningRateMultiplier(env_.lr_schedule, step, env_.max_steps));
  }

  // Pushes r for cur_, waits for the acknowledgement, ticks clock step_ + 1.
  // Timed: push.
  absl::Status PushAndTick(const StepResult& r, std::vector<float>* dense_buf) {
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(
        env_.params->StartPush(cur_.get(), step_, LrScale(step_), r, dense_buf)->Wait());
    RETURN_IF_ERROR(clock_.Tick(step_ + 1, *cur_));
    times_.push += Seconds(t0);
    return absl::OkStatus();
  }

  // Step step_ (cur_) trained with `r`: reported; on to the next step.
  void Done(const StepResult& r) {
    env_.progress->StepDone(step_, cur_->batch, r);
    ++step_;
  }

  const StepEnv env_;
  ClockGate clock_;
  StepTimes& times_;
  uint64_t step_;
  std::unique_ptr<Prepared> cur_;  // Step step_'s batch; null: no more.
  OpPtr pull_;                     // Its pull (into cur_), once started.
  StepResult result_;
  std::vector<float> dense_grad_;  // The dense gradient being pushed.
};

class SynchronousSteps final : public StepLoop {
 public:
  using StepLoop::StepLoop;

 private:
  absl::Status Steps() override {
    while (cur_ && InRange(step_)) {
      RETURN_IF_ERROR(WaitPull(absl::Now()));
      const bool more = InRange(step_ + 1);
      RETURN_IF_ERROR(Compute(&result_));
      RETURN_IF_ERROR(PushAndTick(result_, &dense_grad_));
      Done(result_);
      env_.data->Recycle(std::move(cur_));
      if (more) RETURN_IF_ERROR(LoadStep());
    }
    return absl::OkStatus();
  }
};

class PrefetchingSteps final : public StepLoop {
 public:
  using StepLoop::StepLoop;

 private:
  absl::Status Steps() override {
    while (cur_ && InRange(step_)) {
      RETURN_IF_ERROR(WaitPull(absl::Now()));
      std::unique_ptr<Prepared> next;
      OpPtr next_pull;  // Declared after `next`, which it fills.
      if (InRange(step_ + 1)) {
        ASSIGN_OR_RETURN(next, NextBatch());
        // Prefetch only if step + 1 may start now. Waiting here would
        // deadlock against a checkpoint hold at step + 1 (which waits for
        // this step's tick) and gains nothing when the bound is reached
        // anyway.
        ASSIGN_OR_RETURN(const bool may_start, clock_.TryStart(step_ + 1));
        if (next && may_start) next_pull = env_.params->StartPull(next.get(), TRAIN, step_ + 1);
      }
      RETURN_IF_ERROR(Compute(&result_));
      RETURN_IF_ERROR(PushAndTick(result_, &dense_grad_));
      Done(result_);
      env_.data->Recycle(std::move(cur_));
      cur_ = std::move(next);
      pull_ = std::move(next_pull);
      if (cur_ && !pull_) RETURN_IF_ERROR(WaitAndPull(absl::Now()));  // Not prefetched.
    }
    return absl::OkStatus();
  }
};

class AsyncPushSteps final : public StepLoop {
 public:
  using StepLoop::StepLoop;

 private:
  // Step t's push and what follows it, on a thread of its own: the push
  // acknowledged, clock t + 1 ticked, then, if the clock allows step t + 2
  // now, step t + 2's pull started into `after` (null: none).
  class PushChain {
   public:
    PushChain(AsyncPushSteps* steps, uint64_t t, std::unique_ptr<Prepared> batch, OpPtr push,
              Prepared* after)
        : batch_(std::move(batch)), push_(std::move(push)) {
      done_ = std::async(std::launch::async,
                         [steps, t, push = push_.get(), batch = batch_.get(),
                          after]() -> absl::StatusOr<OpPtr> {
                           RETURN_IF_ERROR(push->Wait());
                           RETURN_IF_ERROR(steps->clock_.Tick(t + 1, *batch));
                           if (after == nullptr) return nullptr;
                           ASSIGN_OR_RETURN(const bool may_start, steps->clock_.TryStart(t + 2));
                           if (!may_start) return nullptr;
                           return steps->env_.params->StartPull(after, TRAIN, t + 2);
                         });
    }
    // Waits for the chain: step t + 2's pull (null if not started), or the
    // chain's first error. Once.
    absl::StatusOr<OpPtr> Join() { return done_.get(); }
    std::unique_ptr<Prepared> TakeBatch() { return std::move(batch_); }

   private:
    std::unique_ptr<Prepared> batch_;  // Its keys are being pushed.
    OpPtr push_;
    std::future<absl::StatusOr<OpPtr>> done_;  // Destroyed first: waits.
  };

  absl::Status Steps() override {
    if (cur_ && InRange(step_ + 1)) {
      ASSIGN_OR_RETURN(ahead_, NextBatch());
    }
    while (cur_ && InRange(step_)) {
      const uint64_t t = step_;
      OpPtr next_pull;  // Step t + 1's, started by the chain of step t - 1.
      bool joined = false;
      absl::Time t0 = absl::Now();
      if (pull_ == nullptr) {
        // The chain could not prefetch this step: its push first (this
        // pull then sees it, whatever the timing).
        if (chain_) {
          ASSIGN_OR_RETURN(next_pull, chain_->Join());
          joined = true;
        }
        RETURN_IF_ERROR(WaitAndPull(t0));
        t0 = absl::Now();
      }
      RETURN_IF_ERROR(WaitPull(t0));
      // The step after computes into the other buffers while this step's
      // push is in flight.
      StepResult& result = t % 2 == 1 ? result2_ : result_;
      std::vector<float>& dense_grad = t % 2 == 1 ? dense_grad2_ : dense_grad_;
      RETURN_IF_ERROR(Compute(&result));

      t0 = absl::Now();
      const float lr_scale = LrScale(t);
      if (chain_) {
        // Step t - 1's chain ran during this compute: its push is
        // acknowledged, clock t ticked, and maybe step t + 1's pull issued.
        if (!joined) {
          ASSIGN_OR_RETURN(next_pull, chain_->Join());
        }
        // Step t + 1's pull must not see this step's push (which follows):
        // with one worker the run is then the same whatever the timing.
        if (next_pull) RETURN_IF_ERROR(next_pull->Wait());
        env_.data->Recycle(chain_->TakeBatch());
        chain_.reset();
      }
      std::unique_ptr<Prepared> next = std::move(ahead_);  // Step t + 1's batch.
      if (InRange(t + 2)) {
        ASSIGN_OR_RETURN(ahead_, NextBatch());
      }
      times_.push += Seconds(t0);
      Done(result);

      OpPtr push = env_.params->StartPush(cur_.get(), t, lr_scale, result, &dense_grad);
      chain_ = std::make_unique<PushChain>(this, t, std::move(cur_), std::move(push),
                                           ahead_.get());
      cur_ = std::move(next);
      pull_ = std::move(next_pull);
    }
    if (chain_) {  // The last push: acknowledged and ticked before the end.
      ASSIGN_OR_RETURN(OpPtr pull, chain_->Join());
      if (pull) (void)pull->Wait();
      chain_.reset();
    }
    return absl::OkStatus();
  }

  StepResult result2_;
  std::vector<float> dense_grad2_;
  std::unique_ptr<Prepared> ahead_;  // Step step_ + 1's batch, when known.
  // Declared last: destroyed (and so waited for) before what it uses.
  std::unique_ptr<PushChain> chain_;
};

}  // namespace

StepPipeline ChooseStepPipeline(const JobConfig& config, bool has_clock) {
  // BSP (staleness 0) never prefetches: the next pull must see this step's
  // (aggregated) push.
  const bool prefetch =
      config.training().prefetch() && EffectiveStaleness(config.cluster()) >= 1;
  if (!prefetch) return StepPipeline::kSynchronous;
  return has_clock ? StepPipeline::kAsyncPush : StepPipeline::kPrefetching;
}

absl::StatusOr<uint64_t> RunSteps(StepPipeline pipeline, const StepEnv& env) {
  switch (pipeline) {
    case StepPipeline::kSynchronous:
      return SynchronousSteps(env).Run();
    case StepPipeline::kPrefetching:
      return PrefetchingSteps(env).Run();
    case StepPipeline::kAsyncPush:
      return AsyncPushSteps(env).Run();
  }
  return absl::InternalError("unknown step pipeline");
}

}  // namespace trainer_internal
}  // namespace shardps

#include "worker/trainer_steps.h"

#include <atomic>
#include <functional>
#include <future>
#include <memory>
#include <utility>

#include "absl/time/clock.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "worker/data/criteo_reader.h"
#include "worker/lr_schedule.h"
#include "worker/trainer_split_pull.h"

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

  // Blocks until `step` may start, or the clock stopped training at or
  // before it (OK too: then stop_at() <= step). Long waits (a dead server
  // being replaced) are made in slices.
  absl::Status Wait(uint64_t step) {
    if (clock_ == nullptr) return absl::OkStatus();
    absl::Status st;
    for (int i = 0; i < 1000; ++i) {
      st = clock_->WaitClock(rank_, step, absl::Seconds(10));
      if (absl::IsOutOfRange(st)) return NoteStop(step, st);
      if (!absl::IsDeadlineExceeded(st)) return st;
    }
    return st;
  }

  // Whether `step` may start right now (a probe: never blocks for long).
  absl::StatusOr<bool> TryStart(uint64_t step) {
    if (clock_ == nullptr) return true;
    const absl::Status st = clock_->WaitClock(rank_, step, absl::ZeroDuration());
    if (absl::IsDeadlineExceeded(st)) return false;
    if (absl::IsOutOfRange(st)) {
      (void)NoteStop(step, st);
      return false;
    }
    if (!st.ok()) return st;
    return true;
  }

  // The first step the clock refused (early stopping, OUT_OF_RANGE): steps
  // are asked for in order, so no step from there on is trained.
  uint64_t stop_at() const { return stop_at_.load(); }

  // Step clock - 1, which trained `p`, is done (its push acknowledged).
  absl::Status Tick(uint64_t clock, const Prepared& p) {
    if (clock_ == nullptr) return absl::OkStatus();
    return clock_->Tick(rank_, clock, data::EncodePosition(p.batch.end_position));
  }

 private:
  absl::Status NoteStop(uint64_t step, const absl::Status& why) {
    uint64_t cur = stop_at_.load();
    while (step < cur && !stop_at_.compare_exchange_weak(cur, step)) {
    }
    if (step < cur) LOG(INFO) << "worker " << rank_ << " ends training: " << why.message();
    return absl::OkStatus();
  }

  JobClock* const clock_;
  const uint32_t rank_;
  std::atomic<uint64_t> stop_at_{UINT64_MAX};  // Read by the push chain too.
};

// What every pipeline shares: the step counter, the current step's batch
// and pull, and the parts of a step, each timed into progress->times().
class StepLoop {
 public:
  explicit StepLoop(const StepEnv& env)
      : env_(env),
        clock_(env.clock, env.rank),
        times_(env.progress->times()),
        step_(env.start_step),
        split_(env.params, env.model->spec()) {
    if (env.cache != nullptr) {
      split_.EnableCache(
          env.cache, env.clock,
          env.config != nullptr ? EffectiveStaleness(env.config->cluster()) : UINT32_MAX);
    }
  }
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

  bool InRange(uint64_t step) const {
    return (env_.max_steps == 0 || step < env_.max_steps) && step < clock_.stop_at();
  }

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
    if (!InRange(step_)) {  // The clock stopped training.
      pull_.reset();
      return absl::OkStatus();
    }
    pull_ = StartWholePull();
    return absl::OkStatus();
  }

  // cur_'s pull as of step_, not split against a previous step: every row,
  // or with the cache its misses (with their state) and the dense chunks,
  // in one pull.
  OpPtr StartWholePull() {
    if (split_.cache() == nullptr) return env_.params->StartPull(cur_.get(), TRAIN, step_);
    split_.Split(cur_.get(), nullptr, step_);
    return split_.StartPart(cur_.get(), kUntouched, TRAIN, step_);
  }

  // Waits for cur_'s pull. Timed: pull, from `since`.
  absl::Status WaitPull(absl::Time since) {
    RETURN_IF_ERROR(pull_->Wait());
    times_.pull += Seconds(since);
    return absl::OkStatus();
  }

  // cur_'s forward and backward into `r`. Timed: compute. With the cache,
  // its rows are stored and its hits copied first (timed: pull), and the
  // gradients applied to its cached rows after.
  absl::Status Compute(StepResult* r) {
    if (split_.cache() != nullptr) {
      const absl::Time t0 = absl::Now();
      RETURN_IF_ERROR(split_.FinishStep(cur_.get(), step_));
      times_.pull += Seconds(t0);
    }
    if (env_.seen != nullptr) {
      env_.seen->resize(cur_->unique_keys.size());
      for (size_t t = 0; t < cur_->unique_keys.size(); ++t) {
        (*env_.seen)[t].insert(cur_->unique_keys[t].begin(), cur_->unique_keys[t].end());
      }
    }
    const absl::Time t0 = absl::Now();
    RETURN_IF_ERROR(env_.model->ForwardBackward(env_.params->Inputs(cur_.get()), true, r));
    if (env_.step_delay > absl::ZeroDuration()) absl::SleepFor(env_.step_delay);
    split_.ApplyPush(*cur_, *r, LrScale(step_));
    times_.compute += Seconds(t0);
    return absl::OkStatus();
  }

  float LrScale(uint64_t step) const {
    return static_cast<float>(LearningRateMultiplier(env_.lr_schedule, step, env_.max_steps));
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
  // Splits pulls (prefetch) and plans them against the cache. Used by one
  // thread at a time: the push chain's, or the training thread.
  SplitPuller split_;
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

// SSP/ASP with prefetch: read-your-own-writes prefetch
// (worker/trainer_split_pull.h). Step t computes once its kUntouched part
// (prefetched) and its kOwnWrites part are pulled; its dense gradient is
// made ready (in step order) and a chain runs behind it on a thread of its
// own while the trainer goes on to step t + 1:
//  0. step t's push is encoded and sent (off the trainer's thread);
//  1. step t's push is acknowledged; if step t + 1 was prefetched and its
//     kOwnWrites part is waited for (no replay), that part is started and
//     handed to the trainer at once;
//  2. clock t + 1 is ticked;
//  3. if step t + 2 may start now, its kUntouched part (against step t + 1's
//     keys) is started, to be pulled while step t + 1 computes; with replay,
//     so is its kOwnWrites part, with optimizer state.
// With replay, step t + 1 waits for nothing of step t's push: its
// kOwnWrites part was read before that push was sent (the trainer waits
// for it first), and step t's gradients are replayed on it before step
// t + 1 computes. Without, step t + 1 waits for step t's acknowledgement
// and then its kOwnWrites part. A step that was not prefetched waits for
// the whole chain, then for the clock, and is pulled whole. Every row of
// step t thus includes this worker's pushes of steps < t; the ticks and
// clock probes stay off the path from one compute to the next. Step t's
// gradients live in a buffer of two (results_[t % 2]) until its push is
// acknowledged, while step t + 1 computes into the other.
class PrefetchingSteps final : public StepLoop {
 public:
  explicit PrefetchingSteps(const StepEnv& env) : StepLoop(env) {
    const absl::Status st = env.config != nullptr ? split_.EnableReplay(*env.config)
                                                  : absl::FailedPreconditionError("no job config");
    if (st.ok()) {
      LOG(INFO) << "worker " << env.rank << " prefetches and replays its own pending step "
                << "on the rows it prefetched (read-your-own-writes without waiting)";
    } else {
      LOG(INFO) << "worker " << env.rank << " prefetches and waits for each push's answer "
                << "before reading the rows it pushed: " << st.message();
      if (split_.cache() != nullptr) {  // Rows it pushed would come without state.
        LOG(WARNING) << "worker " << env.rank << ": embedding cache off (it needs the replay)";
        split_.EnableCache(nullptr, nullptr, 0);
      }
    }
  }

 private:
  struct Started {
    absl::Status status;
    OpPtr op;  // Null: none started.
  };
  // A prefetched step's parts in flight (null: not started).
  struct Prefetch {
    OpPtr untouched;
    OpPtr own;  // Replay only: kOwnWrites with state.
  };

  class PushChain {
   public:
    // Step t's chain: `batch` is step t's, `send` sends its push (on the
    // chain's thread), `next` is step t + 1's batch (its kUntouched part in
    // flight iff `next_prefetched`), `after` step t + 2's (null: none).
    PushChain(PrefetchingSteps* steps, uint64_t t, std::unique_ptr<Prepared> batch,
              std::function<OpPtr(Prepared*)> send, Prepared* next, bool next_prefetched,
              Prepared* after)
        : batch_(std::move(batch)), own_(own_promise_.get_future()) {
      done_ = std::async(std::launch::async,
                         [this, steps, t, send = std::move(send), next, next_prefetched,
                          after]() -> absl::StatusOr<Prefetch> {
                           SplitPuller& split = steps->split_;
                           push_ = send(batch_.get());
                           Started own{push_->Wait(), nullptr};
                           if (own.status.ok() && next_prefetched && !split.replay()) {
                             own.op = split.StartPart(next, kOwnWrites, TRAIN, t + 1);
                           }
                           const absl::Status pushed = own.status;
                           own_promise_.set_value(std::move(own));
                           RETURN_IF_ERROR(pushed);
                           RETURN_IF_ERROR(steps->clock_.Tick(t + 1, *batch_));
                           if (after == nullptr) return Prefetch{};
                           ASSIGN_OR_RETURN(const bool may_start, steps->clock_.TryStart(t + 2));
                           if (!may_start) return Prefetch{};
                           split.Split(after, next, t + 2);
                           Prefetch f;
                           f.untouched = split.StartPart(after, kUntouched, TRAIN, t + 2);
                           if (split.replay())
                             f.own = split.StartPart(after, kOwnWrites, TRAIN, t + 2);
                           return f;
                         });
    }
    // Step t + 1's kOwnWrites part once step t's push is acknowledged (null
    // if step t + 1 was not prefetched, or is replayed), or the push's
    // error. Once.
    Started TakeOwn() { return own_.get(); }
    // Waits for the whole chain: step t + 2's parts (null if not started),
    // or the chain's first error. Once.
    absl::StatusOr<Prefetch> Join() { return done_.get(); }
    std::unique_ptr<Prepared> TakeBatch() { return std::move(batch_); }

   private:
    std::unique_ptr<Prepared> batch_;  // Its keys are being pushed.
    OpPtr push_;
    std::promise<Started> own_promise_;
    std::future<Started> own_;
    std::future<absl::StatusOr<Prefetch>> done_;  // Destroyed first: waits.
  };

  // Waits for the chain of the previous step: its prefetch becomes next_.
  absl::Status JoinChain() {
    ASSIGN_OR_RETURN(Prefetch f, chain_->Join());
    next_pull_ = std::move(f.untouched);
    next_own_ = std::move(f.own);
    env_.data->Recycle(chain_->TakeBatch());
    chain_.reset();
    return absl::OkStatus();
  }

  // Starts step step_ + 1's prefetch (next_ read, the clock allows it).
  void PrefetchNext() {
    split_.Split(next_.get(), cur_.get(), step_ + 1);
    next_pull_ = split_.StartPart(next_.get(), kUntouched, TRAIN, step_ + 1);
    if (split_.replay()) next_own_ = split_.StartPart(next_.get(), kOwnWrites, TRAIN, step_ + 1);
  }

  absl::Status Steps() override {
    // The first step: no push before it; step + 1 prefetched from here.
    if (cur_ && InRange(step_ + 1)) {
      ASSIGN_OR_RETURN(next_, NextBatch());
      if (next_) {
        ASSIGN_OR_RETURN(const bool may_start, clock_.TryStart(step_ + 1));
        if (may_start) PrefetchNext();
      }
    }
    while (cur_ && InRange(step_)) {
      const uint64_t t = step_;
      OpPtr own;            // Step t's kOwnWrites part.
      bool replay = false;  // Step t - 1's push is replayed on it.
      absl::Time t0 = absl::Now();
      if (chain_ && pull_ && split_.replay()) {
        own = std::move(own_);  // Done before step t - 1's push was sent.
        replay = true;
      } else if (chain_ && pull_) {
        Started started = chain_->TakeOwn();
        RETURN_IF_ERROR(started.status);
        own = std::move(started.op);
        times_.push += Seconds(t0);
      } else if (chain_) {
        // Not prefetched: the clock allows step t only once clock t is
        // ticked (or later).
        RETURN_IF_ERROR(JoinChain());
        times_.push += Seconds(t0);
        RETURN_IF_ERROR(WaitAndPull(absl::Now()));
        if (!InRange(t)) break;  // The clock stopped training at step t.
      }
      t0 = absl::Now();
      if (own) RETURN_IF_ERROR(own->Wait());
      if (replay) {
        split_.Replay(cur_.get(), results_[(t - 1) % 2], dense_grads_[(t - 1) % 2], LrScale(t - 1));
      }
      RETURN_IF_ERROR(WaitPull(t0));
      StepResult& result = results_[t % 2];
      RETURN_IF_ERROR(Compute(&result));
      t0 = absl::Now();
      if (chain_) RETURN_IF_ERROR(JoinChain());  // Ran during the compute.
      // Replay: step t + 1's kOwnWrites part is read before step t's push
      // can change it (it was started after step t - 1's acknowledgement).
      if (next_own_) RETURN_IF_ERROR(next_own_->Wait());
      // The push's dense gradient here, in step order (compression keeps a
      // residual); the encoding and sending on the chain's thread.
      std::vector<float>* dense = &dense_grads_[t % 2];
      env_.params->PrepareDense(result, dense);
      StepParams* params = env_.params;
      const float lr_scale = LrScale(t);
      auto send = [params, t, lr_scale, &result, dense](Prepared* batch) {
        return params->SendPush(batch, t, lr_scale, result, *dense);
      };
      Done(result);
      std::unique_ptr<Prepared> after;  // Step t + 2's batch.
      if (next_ && InRange(t + 2)) {
        ASSIGN_OR_RETURN(after, NextBatch());
      }
      chain_ = std::make_unique<PushChain>(this, t, std::move(cur_), std::move(send), next_.get(),
                                           next_pull_ != nullptr, after.get());
      times_.push += Seconds(t0);
      cur_ = std::move(next_);
      pull_ = std::move(next_pull_);
      own_ = std::move(next_own_);
      next_ = std::move(after);
    }
    if (chain_) {  // The last push: acknowledged and ticked before the end.
      const absl::Time t0 = absl::Now();
      RETURN_IF_ERROR(JoinChain());
      if (next_pull_) (void)next_pull_->Wait();
      if (next_own_) (void)next_own_->Wait();
      times_.push += Seconds(t0);
    }
    return absl::OkStatus();
  }

  std::unique_ptr<Prepared> next_;     // Step step_ + 1's batch, when read.
  OpPtr next_pull_;                    // Its kUntouched part, once started.
  OpPtr next_own_;                     // Replay: its kOwnWrites part, once started.
  OpPtr own_;                          // Replay: step step_'s kOwnWrites part.
  StepResult results_[2];              // Step t's in [t % 2] until its push is done.
  std::vector<float> dense_grads_[2];  // Step t's pushed dense gradient, likewise.
  // Declared last: destroyed (and so waited for) before what it uses.
  std::unique_ptr<PushChain> chain_;
};

}  // namespace

StepPipeline ChooseStepPipeline(const JobConfig& config, bool has_clock) {
  // BSP (staleness 0) never prefetches: the next pull must see this step's
  // (aggregated) push.
  const bool prefetch = config.training().prefetch() && EffectiveStaleness(config.cluster()) >= 1;
  (void)has_clock;  // Both prefetch the same way (a null clock allows every step).
  return prefetch ? StepPipeline::kPrefetching : StepPipeline::kSynchronous;
}

absl::StatusOr<uint64_t> RunSteps(StepPipeline pipeline, const StepEnv& env) {
  switch (pipeline) {
    case StepPipeline::kSynchronous:
      return SynchronousSteps(env).Run();
    case StepPipeline::kPrefetching:
      return PrefetchingSteps(env).Run();
  }
  return absl::InternalError("unknown step pipeline");
}

}  // namespace trainer_internal
}  // namespace shardps

// LeftRight: two copies of a versioned object, one served to readers while
// the other, idle, is brought up to the next version in place; then they
// swap roles. The replica (replica.h) keeps its two ServedModels in one, so
// a version costs the rows that changed, not a copy of the whole model.
//
// Readers get a *handle* (a std::shared_ptr<T> that does not own the value)
// from Serve; copies of it share it. A value is *lent* from its Serve until
// the last copy of its handle is dropped, and only a value that is not lent
// is handed out for change (Idle). So:
//  - a reader never sees a value change: a value changes only after every
//    handle to it is gone, and it is served again only after its owner
//    finished changing it (Serve happens after the changes, in the one
//    owner thread);
//  - a value stays alive while a reader holds a handle: the handle keeps the
//    value's slot, and the slot owns the value, even after LeftRight drops
//    the slot or is destroyed.
// The return of a handle happens under the slot's mutex, which Idle takes:
// a reader's last access happens before the owner's first change.
//
// Idle waits for the idle value's readers with a deadline. A reader that
// holds it past the deadline does not block the owner: the value is dropped
// from the pair (freed when that reader lets go) and Idle says so; the owner
// then builds the next version another way (a copy of the served one). So
// memory is two values plus those readers still hold after the pair moved
// on.
//
// Typical use, one owner thread:
//   absl::StatusOr<T*> idle = pair.Idle(absl::Now() + wait);
//   if (idle.ok() && *idle != nullptr) { bring **idle to the next version;
//                                         handle = pair.Serve(nullptr, true); }
//   else { handle = pair.Serve(a new T, true); }
//   publish `handle` to readers (and drop the previous one).
//
// Thread-safety: Idle, Serve and served are for one thread at a time (the
// owner); handles may be copied and dropped from any thread.
#ifndef SHARDPS_REPLICA_LEFT_RIGHT_H_
#define SHARDPS_REPLICA_LEFT_RIGHT_H_

#include <memory>
#include <utility>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/mutex.h"
#include "glog/logging.h"

namespace shardps {
namespace replica {

template <typename T>
class LeftRight {
 public:
  LeftRight() = default;
  LeftRight(const LeftRight&) = delete;
  LeftRight& operator=(const LeftRight&) = delete;

  // The value served last, nullptr before the first Serve. Only the owner
  // reads it (the value may be lent: read only).
  const T* served() const { return served_ == nullptr ? nullptr : served_->value.get(); }

  // The idle value, for the owner to change, once no reader holds it (waits
  // until `deadline` for them to let go). nullptr when there is none (before
  // the second version, or after Serve without keep_previous).
  // DEADLINE_EXCEEDED when readers still hold it at the deadline: it is
  // dropped from the pair (see the top), and there is none until the next
  // Serve.
  absl::StatusOr<T*> Idle(absl::Time deadline) {
    if (idle_ == nullptr) return nullptr;
    if (!idle_->WaitReturned(deadline)) {
      idle_.reset();
      return absl::DeadlineExceededError(
          absl::StrCat("waited until ", absl::FormatTime(deadline),
                       " for the readers of the idle version to release it; still held"));
    }
    return idle_->value.get();
  }

  // Drops the idle value (the owner left it unusable; readers cannot hold
  // it: it was handed out by Idle).
  void DropIdle() { idle_.reset(); }

  // Serves `next`, or with nullptr the idle value (after a successful Idle;
  // the owner has brought it to the next version), and returns its handle.
  // The value served before becomes the idle one with `keep_previous`; else
  // it is dropped (readers holding it keep it).
  std::shared_ptr<T> Serve(std::unique_ptr<T> next, bool keep_previous) {
    std::shared_ptr<Slot> slot;
    if (next != nullptr) {
      slot = std::make_shared<Slot>(std::move(next));
      idle_.reset();  // A new value replaces the idle one.
    } else {
      CHECK(idle_ != nullptr) << "LeftRight::Serve(nullptr) without an idle value";
      slot = std::move(idle_);
    }
    if (keep_previous) idle_ = std::move(served_);
    served_ = slot;
    return Slot::Lend(std::move(slot));
  }

 private:
  struct Slot {
    explicit Slot(std::unique_ptr<T> v) : value(std::move(v)) {}

    // A handle to the value; the slot is lent until its last copy is
    // dropped. The slot must not be lent.
    static std::shared_ptr<T> Lend(std::shared_ptr<Slot> slot) {
      {
        MutexLock lock(&slot->mu);
        CHECK(!slot->lent) << "LeftRight: a value lent twice";
        slot->lent = true;
      }
      T* value = slot->value.get();
      return std::shared_ptr<T>(value, [slot = std::move(slot)](T*) {
        {
          MutexLock lock(&slot->mu);
          slot->lent = false;
        }
        slot->returned.SignalAll();
      });
    }

    // Whether no handle is out, by `deadline`.
    bool WaitReturned(absl::Time deadline) {
      MutexLock lock(&mu);
      while (lent) {
        if (absl::Now() >= deadline) return false;
        returned.WaitUntil(&mu, deadline);
      }
      return true;
    }

    const std::unique_ptr<T> value;
    Mutex mu;
    CondVar returned;
    bool lent ABSL_GUARDED_BY(mu) = false;
  };

  std::shared_ptr<Slot> served_;  // The value served last.
  std::shared_ptr<Slot> idle_;    // The other one, if any.
};

}  // namespace replica
}  // namespace shardps

#endif  // SHARDPS_REPLICA_LEFT_RIGHT_H_

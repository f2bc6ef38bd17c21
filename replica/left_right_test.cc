// LeftRight with a small versioned value: a reader holding a version keeps
// seeing it, unchanged, while the owner builds the next two (the held one is
// not changed: the owner builds beside it); a value is changed in place only
// once its readers let go; a handle keeps its value alive after the pair
// dropped it or was destroyed.
#include "replica/left_right.h"

#include <memory>
#include <thread>
#include <vector>

#include "absl/time/clock.h"
#include "gtest/gtest.h"

namespace shardps {
namespace replica {
namespace {

int live = 0;  // Versions alive.

struct Version {
  Version(int v, size_t n) : version(v), rows(n, v) { ++live; }
  ~Version() { --live; }
  void Become(int v) {  // In place, as a model applies deltas.
    version = v;
    for (int& r : rows) r = v;
  }
  int version;
  std::vector<int> rows;
};

bool Holds(const Version& v, int version) {
  if (v.version != version) return false;
  for (int r : v.rows) {
    if (r != version) return false;
  }
  return true;
}

// The owner's step: the next version in place on the idle value if it is
// free within `wait`, else a new value. Returns whether it was in place.
bool Next(LeftRight<Version>* pair, std::shared_ptr<Version>* current, int v, absl::Duration wait) {
  absl::StatusOr<Version*> idle = pair->Idle(absl::Now() + wait);
  std::shared_ptr<Version> handle;
  bool in_place = false;
  if (idle.ok() && *idle != nullptr) {
    (*idle)->Become(v);
    handle = pair->Serve(nullptr, true);
    in_place = true;
  } else {
    handle = pair->Serve(std::make_unique<Version>(v, pair->served()->rows.size()), true);
  }
  current->swap(handle);  // Publish; the previous handle is dropped here.
  return in_place;
}

TEST(LeftRightTest, AReaderKeepsItsVersionWhileTheNextTwoAreBuilt) {
  live = 0;
  {
    LeftRight<Version> pair;
    std::shared_ptr<Version> current = pair.Serve(std::make_unique<Version>(1, 1000), true);
    std::shared_ptr<Version> reader = current;  // Holds version 1.

    EXPECT_FALSE(Next(&pair, &current, 2, absl::Milliseconds(10)));  // No idle value yet.
    // The idle value is version 1, still held: not changed, a new one instead.
    absl::StatusOr<Version*> held = pair.Idle(absl::Now() + absl::Milliseconds(10));
    EXPECT_EQ(held.status().code(), absl::StatusCode::kDeadlineExceeded) << held.status();
    EXPECT_NE(held.status().message().find("readers of the idle version"), std::string::npos);
    EXPECT_FALSE(Next(&pair, &current, 3, absl::Milliseconds(10)));  // None: dropped.
    EXPECT_TRUE(Holds(*reader, 1));
    EXPECT_TRUE(Holds(*current, 3));
    EXPECT_EQ(live, 3);  // 1 (the reader's), 2 (idle), 3 (served).

    // Version 2 has no reader: version 4 is built on it, in place.
    EXPECT_TRUE(Next(&pair, &current, 4, absl::Milliseconds(10)));
    EXPECT_TRUE(Holds(*current, 4));
    EXPECT_TRUE(Holds(*reader, 1));
    EXPECT_EQ(live, 3);

    reader.reset();  // Version 1 is freed with its last handle.
    EXPECT_EQ(live, 2);
    EXPECT_TRUE(Next(&pair, &current, 5, absl::Milliseconds(10)));  // On version 3.
    EXPECT_TRUE(Holds(*current, 5));
    EXPECT_EQ(live, 2);
  }
  EXPECT_EQ(live, 0);
}

TEST(LeftRightTest, TheIdleValueIsHandedOutOnceItsLastReaderLetsGo) {
  live = 0;
  LeftRight<Version> pair;
  std::shared_ptr<Version> current = pair.Serve(std::make_unique<Version>(1, 10), true);
  std::shared_ptr<Version> reader = current;
  ASSERT_FALSE(Next(&pair, &current, 2, absl::Milliseconds(10)));
  // Version 1 is idle and held by `reader`, which another thread drops.
  std::thread other([r = std::move(reader)]() mutable { r.reset(); });
  absl::StatusOr<Version*> idle = pair.Idle(absl::Now() + absl::Seconds(60));
  other.join();
  ASSERT_TRUE(idle.ok()) << idle.status();
  ASSERT_NE(*idle, nullptr);
  EXPECT_TRUE(Holds(**idle, 1));
  EXPECT_NE(*idle, current.get());
}

TEST(LeftRightTest, AHandleOutlivesThePair) {
  live = 0;
  std::shared_ptr<Version> kept;
  {
    LeftRight<Version> pair;
    kept = pair.Serve(std::make_unique<Version>(7, 10), true);
    // Not kept as the idle value: dropped from the pair, alive for `kept`.
    std::shared_ptr<Version> next = pair.Serve(std::make_unique<Version>(8, 10), false);
    absl::StatusOr<Version*> idle = pair.Idle(absl::Now());
    ASSERT_TRUE(idle.ok());
    EXPECT_EQ(*idle, nullptr);
    EXPECT_EQ(live, 2);
  }
  EXPECT_EQ(live, 1);
  EXPECT_TRUE(Holds(*kept, 7));
  kept.reset();
  EXPECT_EQ(live, 0);
}

}  // namespace
}  // namespace replica
}  // namespace shardps

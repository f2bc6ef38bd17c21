// StreamFollower without gRPC or models: scripted sessions of parts (the
// Connector a test gives) and a replica reduced to the versions it serves
// (FakeReplica: (generation, clock), the stream's continuation rule, and a
// checkpoint for each load). The follower bootstraps from a checkpoint,
// applies each version once whatever a reconnect sends again, in chunks;
// a lost session is lost with its reason until a part comes; a version that
// does not continue, fails, or differs from the servers' hash makes it load
// a checkpoint; refused parts are recorded; pushes are timed.
#include "replica/stream_follower.h"

#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/mutex.h"
#include "gtest/gtest.h"

namespace shardps {
namespace replica {
namespace {

using Key = std::pair<uint64_t, uint64_t>;  // (generation, clock)
using Load = StreamFollower::Host::Load;
using State = StreamFollower::State;
constexpr uint32_t kPartitions = 4;

// One server's part of version (generation, clock) holding `partitions`: a
// FULL one without a base, else a delta on (base_generation, base_clock).
std::shared_ptr<const VersionPart> Part(Key key, std::vector<uint32_t> partitions,
                                        std::optional<Key> base, uint32_t chunk = 0,
                                        uint32_t num_chunks = 1) {
  auto part = std::make_shared<VersionPart>();
  part->set_generation(key.first);
  part->set_clock(key.second);
  part->set_server_index(partitions.front());
  part->set_num_partitions(kPartitions);
  for (uint32_t p : partitions) part->add_partitions(p);
  part->set_chunk(chunk);
  part->set_num_chunks(num_chunks);
  part->set_full(!base.has_value());
  if (base.has_value()) {
    part->set_base_generation(base->first);
    part->set_base_clock(base->second);
  }
  part->set_cut_unix_micros(int64_t{1} << 50);  // One cut: every part the same.
  return part;
}

// Every partition of a delta version, in two parts.
std::vector<std::shared_ptr<const VersionPart>> Version(Key key, Key base) {
  return {Part(key, {0, 1}, base), Part(key, {2, 3}, base)};
}

// A replica as the follower sees it.
class FakeReplica final : public StreamFollower::Host {
 public:
  // Set before the follower starts: what built versions hash to (0 unless
  // set), the builds that fail, and the follower.
  std::map<uint64_t, uint64_t> hash_of;
  std::map<uint64_t, absl::Status> fails;
  StreamFollower* follower = nullptr;

  struct LoadSeen {
    Load load;
    State state;
    std::string lost_reason;
  };

  std::optional<Key> Served() const override {
    MutexLock lock(&mu_);
    return served_;
  }
  absl::Status CheckPart(const VersionPart& part) const override {
    if (part.num_partitions() != kPartitions) {
      return absl::InvalidArgumentError(
          absl::StrCat("version part of clock ", part.clock(), ": wrong partition count"));
    }
    return absl::OkStatus();
  }
  absl::StatusOr<std::optional<StreamFollower::Applied>> Apply(
      const VersionAssembler::Complete& version,
      absl::FunctionRef<absl::Status(uint64_t table_hash)> check) override {
    MutexLock lock(&mu_);
    const VersionPart& first = *version.version->parts.front();
    const bool continues =
        first.full() ||
        (served_.has_value() &&
         ((first.generation() == served_->first && first.base_clock() <= served_->second) ||
          (first.base_generation() == served_->first && first.base_clock() == served_->second)));
    if (!continues) return std::nullopt;
    const uint64_t clock = version.version->clock;
    if (auto it = fails.find(clock); it != fails.end()) return it->second;
    const auto hash = hash_of.find(clock);
    if (absl::Status st = check(hash == hash_of.end() ? 0 : hash->second); !st.ok()) return st;
    served_ = Key(version.generation, clock);
    applied_.push_back(*served_);
    StreamFollower::Applied s;
    s.cut_to_serve = absl::Seconds(1);
    return s;
  }
  bool LoadCheckpoint(Load load) override {
    const StreamFollower::StreamStatus status = follower->GetStatus();
    MutexLock lock(&mu_);
    loads_.push_back({load, status.state, status.lost_reason});
    if (!checkpoint_.has_value() ||
        (load == Load::kNewer && served_.has_value() && checkpoint_->second <= served_->second)) {
      return false;
    }
    const bool changed = served_ != checkpoint_;
    served_ = checkpoint_;
    return changed;
  }
  void RecordError(const std::string& error) override {
    MutexLock lock(&mu_);
    errors_.push_back(error);
  }

  std::vector<Key> applied() const {
    MutexLock lock(&mu_);
    return applied_;
  }
  std::vector<LoadSeen> loads() const {
    MutexLock lock(&mu_);
    return loads_;
  }
  std::vector<std::string> errors() const {
    MutexLock lock(&mu_);
    return errors_;
  }
  void Serve(Key key) {
    MutexLock lock(&mu_);
    served_ = key;
  }
  // What each load serves from now on (none: nothing loads).
  void SetCheckpoint(Key key) {
    MutexLock lock(&mu_);
    checkpoint_ = key;
  }

 private:
  mutable Mutex mu_;
  std::optional<Key> served_ ABSL_GUARDED_BY(mu_);
  std::optional<Key> checkpoint_ ABSL_GUARDED_BY(mu_);
  std::vector<Key> applied_ ABSL_GUARDED_BY(mu_);
  std::vector<LoadSeen> loads_ ABSL_GUARDED_BY(mu_);
  std::vector<std::string> errors_ ABSL_GUARDED_BY(mu_);
};

// Sessions as scripted: each Open takes the next script (an error, or parts
// then the reason the session breaks; no reason: it stays open, idle).
// Past the scripts, sessions stay open and idle.
class ScriptedConnector final : public StreamFollower::Connector {
 public:
  struct Script {
    absl::Status open_error;
    std::vector<std::shared_ptr<const VersionPart>> parts;
    std::string broken;
  };

  void Add(Script script) {
    MutexLock lock(&mu_);
    scripts_.push_back(std::move(script));
  }
  std::vector<Key> opens() const {
    MutexLock lock(&mu_);
    return opens_;
  }

  absl::StatusOr<std::unique_ptr<StreamFollower::PartSource>> Open(uint64_t generation,
                                                                   uint64_t clock) override {
    MutexLock lock(&mu_);
    opens_.emplace_back(generation, clock);
    Script script;
    if (!scripts_.empty()) {
      script = std::move(scripts_.front());
      scripts_.pop_front();
    }
    if (!script.open_error.ok()) return script.open_error;
    return std::make_unique<Source>(std::move(script));
  }

 private:
  class Source final : public StreamFollower::PartSource {
   public:
    explicit Source(Script script) : script_(std::move(script)) {}
    std::shared_ptr<const VersionPart> Next(absl::Time deadline, std::string* broken) override {
      if (next_ < script_.parts.size()) return script_.parts[next_++];
      *broken = script_.broken;
      if (broken->empty()) absl::SleepFor(std::max(absl::ZeroDuration(), deadline - absl::Now()));
      return nullptr;
    }

   private:
    const Script script_;
    size_t next_ = 0;
  };

  mutable Mutex mu_;
  std::deque<Script> scripts_ ABSL_GUARDED_BY(mu_);
  std::vector<Key> opens_ ABSL_GUARDED_BY(mu_);
};

// The follower on a thread of its own, stopped at the end.
class FollowerTest : public ::testing::Test {
 protected:
  void Start() {
    StreamFollower::Options options;
    options.num_partitions = kPartitions;
    options.poll_interval = absl::Milliseconds(10);
    follower_ = std::make_unique<StreamFollower>(options, &replica_, &connector_);
    replica_.follower = follower_.get();
    thread_ = std::thread([this] { follower_->Run(); });
  }
  void TearDown() override {
    if (follower_ != nullptr) follower_->Stop();
    if (thread_.joinable()) thread_.join();
  }
  // Polls `done` for up to 10 s; fails naming `what`.
  bool WaitFor(const std::string& what, const std::function<bool()>& done) {
    const absl::Time deadline = absl::Now() + absl::Seconds(10);
    while (!done()) {
      if (absl::Now() > deadline) {
        ADD_FAILURE() << "waited 10 s for " << what;
        return false;
      }
      absl::SleepFor(absl::Milliseconds(2));
    }
    return true;
  }

  FakeReplica replica_;
  ScriptedConnector connector_;
  std::unique_ptr<StreamFollower> follower_;
  std::thread thread_;
};

TEST_F(FollowerTest, BootstrapsFromACheckpointThenFollowsFromIt) {
  Start();
  ASSERT_TRUE(WaitFor("a load of a first checkpoint", [&] { return !replica_.loads().empty(); }));
  EXPECT_EQ(follower_->state(), State::kBootstrapping);
  EXPECT_TRUE(connector_.opens().empty()) << "nothing to follow from";
  replica_.SetCheckpoint(Key(1, 10));
  ASSERT_TRUE(
      WaitFor("a session from the checkpoint", [&] { return !connector_.opens().empty(); }));
  EXPECT_EQ(connector_.opens()[0], Key(1, 10));
  EXPECT_EQ(follower_->state(), State::kFollowing);
  for (const auto& seen : replica_.loads()) {
    EXPECT_EQ(seen.load, Load::kFirst);
    EXPECT_EQ(seen.state, State::kBootstrapping);
  }
}

TEST_F(FollowerTest, EachVersionIsAppliedOnceWhateverAReconnectSendsAgain) {
  replica_.Serve(Key(1, 10));
  // Version 20 in two chunks from server 0, then 30; the session ends.
  ScriptedConnector::Script first;
  first.parts = {Part({1, 20}, {0, 1}, Key(1, 10), 1, 2), Part({1, 20}, {2, 3}, Key(1, 10)),
                 Part({1, 20}, {0, 1}, Key(1, 10), 0, 2)};
  for (auto& part : Version({1, 30}, {1, 10})) first.parts.push_back(part);
  first.broken = "the stream of the server at a:1 ended: UNAVAILABLE";
  connector_.Add(first);
  // The scheduler is not there at first.
  connector_.Add(
      {absl::UnavailableError("cannot get the servers from the scheduler at s:1"), {}, ""});
  // Then the server sends 20 and 30 again, and 40.
  ScriptedConnector::Script again;
  for (uint64_t clock : {20, 30, 40}) {
    for (auto& part : Version({1, clock}, {1, 10})) again.parts.push_back(part);
  }
  connector_.Add(again);
  Start();
  ASSERT_TRUE(WaitFor("version 40", [&] { return replica_.applied().size() >= 3; }));
  EXPECT_EQ(replica_.applied(), (std::vector<Key>{{1, 20}, {1, 30}, {1, 40}}));
  ASSERT_TRUE(WaitFor("the third session", [&] { return connector_.opens().size() >= 3; }));
  EXPECT_EQ(connector_.opens()[0], Key(1, 10));
  EXPECT_EQ(connector_.opens()[1], Key(1, 30));
  EXPECT_EQ(connector_.opens()[2], Key(1, 30));
  // Each loss looked for a newer checkpoint, the stream lost for its reason.
  const std::vector<FakeReplica::LoadSeen> loads = replica_.loads();
  ASSERT_EQ(loads.size(), 2u);
  EXPECT_EQ(loads[0].load, Load::kNewer);
  EXPECT_EQ(loads[0].state, State::kLost);
  EXPECT_EQ(loads[0].lost_reason, "the stream of the server at a:1 ended: UNAVAILABLE");
  EXPECT_EQ(loads[1].lost_reason, "cannot get the servers from the scheduler at s:1");
  // Following again since the first part of the third session.
  const StreamFollower::StreamStatus status = follower_->GetStatus();
  EXPECT_EQ(status.state, State::kFollowing);
  EXPECT_EQ(status.lost_reason, "");
  EXPECT_TRUE(replica_.errors().empty());
}

TEST_F(FollowerTest, AVersionThatDoesNotContinueLoadsACheckpoint) {
  replica_.Serve(Key(1, 10));
  replica_.SetCheckpoint(Key(2, 25));  // After a rollback.
  // Generation 2's delta on 25, which the replica does not hold.
  connector_.Add({absl::OkStatus(), Version({2, 30}, {2, 25}), ""});
  Start();
  ASSERT_TRUE(
      WaitFor("a session from the checkpoint", [&] { return connector_.opens().size() >= 2; }));
  EXPECT_EQ(connector_.opens()[1], Key(2, 25));
  ASSERT_EQ(replica_.loads().size(), 1u);
  EXPECT_EQ(replica_.loads()[0].load, Load::kResync);
  EXPECT_EQ(replica_.loads()[0].state, State::kBootstrapping);
  EXPECT_TRUE(replica_.applied().empty());
}

TEST_F(FollowerTest, AFailedOrDifferentVersionIsRecordedAndNotServed) {
  replica_.Serve(Key(1, 10));
  replica_.SetCheckpoint(Key(1, 10));
  replica_.fails[20] = absl::InternalError("build failed");
  // 30 and 40 carry the servers' hashes: 30's differs from the build's.
  std::vector<std::shared_ptr<const VersionPart>> parts;
  for (uint64_t clock : {30, 40}) {
    for (uint32_t server = 0; server < 2; ++server) {
      auto part = std::make_shared<VersionPart>(
          *Part({1, clock}, {2 * server, 2 * server + 1}, Key(1, 10)));
      part->set_state_hash(clock + server);
      parts.push_back(part);
    }
    replica_.hash_of[clock] = 2 * clock + 1;  // The sum.
  }
  replica_.hash_of[30] = 7;
  connector_.Add({absl::OkStatus(), Version({1, 20}, {1, 10}), ""});
  connector_.Add({absl::OkStatus(), {parts[0], parts[1]}, ""});
  connector_.Add({absl::OkStatus(), {parts[2], parts[3]}, ""});
  Start();
  ASSERT_TRUE(WaitFor("version 40", [&] { return !replica_.applied().empty(); }));
  EXPECT_EQ(replica_.applied(), (std::vector<Key>{{1, 40}}));
  const std::vector<std::string> errors = replica_.errors();
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0], "stream version 20: INTERNAL: build failed");
  EXPECT_EQ(errors[1],
            "stream version 30: DATA_LOSS: version 30 built from the stream has table hash "
            "0000000000000007, the servers' rows at the cut hash to 000000000000003d; not served");
  const StreamFollower::StreamStatus status = follower_->GetStatus();
  EXPECT_EQ(status.verified_versions, 1u);
  EXPECT_EQ(status.hash_mismatches, 1u);
  ASSERT_EQ(replica_.loads().size(), 2u);
  EXPECT_EQ(replica_.loads()[0].load, Load::kResync);
  EXPECT_EQ(replica_.loads()[1].load, Load::kResync);
}

TEST_F(FollowerTest, RefusedPartsAreRecordedAndTheRestApplies) {
  replica_.Serve(Key(1, 10));
  auto wrong = std::make_shared<VersionPart>(*Part({1, 20}, {0, 1}, Key(1, 10)));
  wrong->set_num_partitions(7);
  ScriptedConnector::Script script;
  script.parts = {wrong, Part({1, 20}, {0, 1}, Key(1, 10)), Part({1, 20}, {1, 2, 3}, Key(1, 10))};
  // 30 arrives whole, its pushes timed.
  for (auto& part : Version({1, 30}, {1, 10})) {
    auto timed = std::make_shared<VersionPart>(*part);
    timed->add_push_ages_micros(1000);
    timed->add_push_ages_micros(2000);
    script.parts.push_back(timed);
  }
  connector_.Add(script);
  Start();
  ASSERT_TRUE(WaitFor("version 30", [&] { return !replica_.applied().empty(); }));
  EXPECT_EQ(replica_.applied(), (std::vector<Key>{{1, 30}}));
  const std::vector<std::string> errors = replica_.errors();
  ASSERT_EQ(errors.size(), 2u);
  EXPECT_EQ(errors[0], "refused INVALID_ARGUMENT: version part of clock 20: wrong partition count");
  EXPECT_EQ(errors[1],
            "version 20: server 1's part holds a partition another server's part holds; dropped");
  const StreamFollower::StreamStatus status = follower_->GetStatus();
  EXPECT_EQ(status.pushes_timed, 4u);
  EXPECT_EQ(status.push_to_serve_max, absl::Seconds(1) + absl::Microseconds(2000));
  EXPECT_TRUE(replica_.loads().empty());
}

}  // namespace
}  // namespace replica
}  // namespace shardps

// VersionAssembler: a stream version is complete once every partition
// arrived exactly once, in every chunk of every server's part; parts that
// disagree drop their version; completing a version forgets the ones
// before it; at most kMaxPendingVersions wait.
#include "replica/version_assembler.h"

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace shardps {
namespace replica {
namespace {

constexpr uint32_t kPartitions = 4;

// Server `server`'s chunk `chunk` of `num_chunks` of version (generation,
// clock), holding `partitions`.
std::shared_ptr<const VersionPart> Part(uint64_t generation, uint64_t clock, uint32_t server,
                                        std::vector<uint32_t> partitions, uint32_t chunk = 0,
                                        uint32_t num_chunks = 1, int64_t cut_micros = 1000) {
  auto part = std::make_shared<VersionPart>();
  part->set_generation(generation);
  part->set_clock(clock);
  part->set_server_index(server);
  part->set_num_partitions(kPartitions);
  for (uint32_t p : partitions) part->add_partitions(p);
  part->set_chunk(chunk);
  part->set_num_chunks(num_chunks);
  part->set_cut_unix_micros(cut_micros);
  return part;
}

// Adds `part`, expecting it accepted; whether it completed a version.
std::optional<VersionAssembler::Complete> Add(VersionAssembler* a,
                                              std::shared_ptr<const VersionPart> part) {
  auto added = a->Add(std::move(part));
  EXPECT_TRUE(added.ok()) << added.status();
  return added.ok() ? *added : std::nullopt;
}

TEST(VersionAssemblerTest, CompleteOnceEveryPartitionInEveryChunkArrived) {
  VersionAssembler a(kPartitions);
  // Server 0 holds 0 and 1 in two chunks; server 1 holds 2 and 3 in one.
  EXPECT_FALSE(Add(&a, Part(1, 20, 0, {0, 1}, 1, 2, 900)).has_value());
  EXPECT_FALSE(Add(&a, Part(1, 20, 1, {2, 3}, 0, 1, 800)).has_value());
  EXPECT_EQ(a.pending(), 1u);
  std::optional<VersionAssembler::Complete> done = Add(&a, Part(1, 20, 0, {0, 1}, 0, 2, 950));
  ASSERT_TRUE(done.has_value());
  EXPECT_EQ(done->version->clock, 20u);
  EXPECT_EQ(done->version->parts.size(), 3u);
  EXPECT_EQ(done->generation, 1u);
  EXPECT_EQ(done->cut_micros, 800) << "the earliest server's copy";
  EXPECT_GT(done->bytes, 0u);
  EXPECT_EQ(a.pending(), 0u);
}

TEST(VersionAssemblerTest, PartsThatDisagreeDropTheirVersion) {
  struct Case {
    std::string want;
    std::vector<std::shared_ptr<const VersionPart>> parts;  // The last one is refused.
  };
  const std::vector<Case> cases = {
      {"holds a partition another server's part holds",
       {Part(1, 20, 0, {0, 1}), Part(1, 20, 1, {1, 2})}},
      {"does not name the chunks and partitions of its first chunk",
       {Part(1, 20, 0, {0, 1}, 0, 2), Part(1, 20, 0, {0}, 1, 2)}},
      {"does not name the chunks and partitions of its first chunk",
       {Part(1, 20, 0, {0, 1}, 0, 2), Part(1, 20, 0, {0, 1}, 1, 3)}},
      {"chunk 0 of 2 is out of range or came twice",
       {Part(1, 20, 0, {0, 1}, 0, 2), Part(1, 20, 0, {0, 1}, 0, 2)}},
      {"chunk 2 of 2 is out of range or came twice", {Part(1, 20, 0, {0, 1}, 2, 2)}},
  };
  for (const Case& c : cases) {
    VersionAssembler a(kPartitions);
    for (size_t i = 0; i + 1 < c.parts.size(); ++i) Add(&a, c.parts[i]);
    auto refused = a.Add(c.parts.back());
    ASSERT_FALSE(refused.ok()) << c.want;
    EXPECT_EQ(refused.status().code(), absl::StatusCode::kInvalidArgument);
    EXPECT_EQ(refused.status().message(), "version 20: server " +
                                              std::to_string(c.parts.back()->server_index()) +
                                              "'s part " + c.want + "; dropped");
    EXPECT_EQ(a.pending(), 0u) << c.want;
    // The version starts again from nothing: its first part is not enough.
    EXPECT_FALSE(Add(&a, Part(1, 20, 0, {0, 1})).has_value());
  }
}

TEST(VersionAssemblerTest, ACompleteVersionForgetsTheOnesBeforeIt) {
  VersionAssembler a(kPartitions);
  Add(&a, Part(1, 20, 0, {0, 1}));
  Add(&a, Part(1, 40, 0, {0, 1}));
  Add(&a, Part(2, 10, 0, {0, 1}));  // A later generation sorts after.
  EXPECT_EQ(a.pending(), 3u);
  ASSERT_TRUE(Add(&a, Part(1, 30, 0, {0, 1, 2, 3})).has_value());
  EXPECT_EQ(a.pending(), 2u) << "20 forgotten; 40 and (2, 10) wait";
  ASSERT_TRUE(Add(&a, Part(2, 10, 1, {2, 3})).has_value());
  EXPECT_EQ(a.pending(), 0u);
}

TEST(VersionAssemblerTest, AtMostMaxPendingVersionsWait) {
  VersionAssembler a(kPartitions);
  for (uint64_t clock = 1; clock <= VersionAssembler::kMaxPendingVersions + 5; ++clock) {
    Add(&a, Part(1, clock, 0, {0}));
    EXPECT_LE(a.pending(), VersionAssembler::kMaxPendingVersions);
  }
  // The oldest were dropped: version 1's other parts start it anew.
  EXPECT_FALSE(Add(&a, Part(1, 1, 1, {1, 2, 3})).has_value());
  // The newest still completes.
  const uint64_t newest = VersionAssembler::kMaxPendingVersions + 5;
  EXPECT_TRUE(Add(&a, Part(1, newest, 1, {1, 2, 3})).has_value());
}

}  // namespace
}  // namespace replica
}  // namespace shardps

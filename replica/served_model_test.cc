// ServedModel::WithDeltas against ServedModel::Load on checkpoints written
// with the servers' own code (worker/export/checkpointed_job.h): a
// FULL checkpoint at clock 10 and deltas at 20, 30 and 40 of a table with
// eviction (deletions) and shared unadmitted rows. A version built from the
// one before plus its deltas has the same table hash, rows, Lookup answers
// and predictions as the same checkpoint restored from its whole chain; an
// evicted key is gone from both; links that do not continue the version are
// refused. Two models advanced in place, alternately, give the same versions.
#include "replica/served_model.h"

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/partition.h"
#include "gtest/gtest.h"
#include "worker/export/checkpointed_job.h"

namespace shardps {
namespace replica {
namespace {

using export_testing::CheckpointedJob;
using export_testing::Key;

constexpr uint32_t kSparse = export_testing::kSparseTable;
constexpr uint32_t kDense = export_testing::kDenseTable;

JobConfig Config() { return export_testing::SmallJobConfig(); }

// The stream version of each checkpoint written.
std::map<uint64_t, ServedModel::StreamLink> WriteFourVersions(const JobConfig& config,
                                                              const std::string& root) {
  std::map<uint64_t, ServedModel::StreamLink> out;
  for (auto& [clock, parts] : export_testing::WriteFourVersions(config, root)) {
    auto version = std::make_shared<ServedModel::StreamVersion>();
    version->clock = clock;
    version->parts = parts;
    out[clock] = version;
  }
  return out;
}

std::string Root(const std::string& name) {
  const std::string root = ::testing::TempDir() + "/" + name;
  (void)checkpoint::RemoveAll(root);
  return root;
}

std::unique_ptr<ServedModel> Load(const JobConfig& config, const std::string& root,
                                  uint64_t clock) {
  auto model = ServedModel::Load(config, root, clock);
  EXPECT_TRUE(model.ok()) << model.status();
  return model.ok() ? *std::move(model) : nullptr;
}

checkpoint::ResolvedCheckpoint Resolve(const std::string& root, uint64_t clock) {
  auto resolved = checkpoint::LoadCheckpoint(root, clock);
  EXPECT_TRUE(resolved.ok()) << resolved.status();
  return resolved.ok() ? *std::move(resolved) : checkpoint::ResolvedCheckpoint();
}

std::vector<uint64_t> Keys(uint64_t first, uint64_t last) {
  std::vector<uint64_t> keys;
  for (uint64_t k = first; k < last; ++k) keys.push_back(Key(k));
  return keys;
}

struct Answer {
  std::vector<bool> found;
  std::vector<float> values;
};
Answer Lookup(const ServedModel& model, uint32_t table, const std::vector<uint64_t>& keys) {
  Answer a;
  uint32_t dim = 0;
  EXPECT_TRUE(model.Lookup(table, keys, &dim, &a.found, &a.values).ok());
  return a;
}

// Criteo lines: label, 13 integers, 26 categorical ids (hex).
std::vector<std::string> Lines() {
  std::vector<std::string> lines;
  for (int i = 0; i < 8; ++i) {
    std::vector<std::string> cols = {absl::StrCat(i % 2)};
    for (int d = 0; d < 13; ++d) cols.push_back(absl::StrCat((i * 13 + d) % 7));
    for (int c = 0; c < 26; ++c) {
      cols.push_back(absl::StrCat(absl::Hex((i * 26 + c) * 7919 + 3, absl::kZeroPad8)));
    }
    lines.push_back(absl::StrJoin(cols, "\t"));
  }
  return lines;
}

std::vector<float> Predict(ServedModel& model) {
  const std::vector<std::string> lines = Lines();
  std::vector<absl::string_view> views(lines.begin(), lines.end());
  std::vector<float> probs;
  absl::Status st = model.Predict(views, &probs);
  EXPECT_TRUE(st.ok()) << st;
  return probs;
}

// `incremental` and `full` serve the same version, answer for answer (and
// name the same checkpoint directory unless `streamed`: a stream version has
// none).
void ExpectSameVersion(ServedModel& incremental, ServedModel& full, bool streamed = false) {
  EXPECT_EQ(incremental.clock(), full.clock());
  if (!streamed) {
    EXPECT_EQ(incremental.dir(), full.dir());
  }
  EXPECT_EQ(incremental.table_hash(), full.table_hash()) << "version " << full.clock();
  EXPECT_EQ(incremental.rows(), full.rows()) << "version " << full.clock();
  const std::vector<uint64_t> keys = Keys(0, 400);
  const Answer a = Lookup(incremental, kSparse, keys), b = Lookup(full, kSparse, keys);
  EXPECT_EQ(a.found, b.found) << "version " << full.clock();
  EXPECT_EQ(a.values, b.values) << "version " << full.clock();
  const std::vector<uint64_t> chunks = {0};
  const Answer da = Lookup(incremental, kDense, chunks), db = Lookup(full, kDense, chunks);
  EXPECT_EQ(da.found, db.found);
  EXPECT_EQ(da.values, db.values);
  EXPECT_EQ(Predict(incremental), Predict(full)) << "version " << full.clock();
}

TEST(ServedModelTest, ADeltaOnTheVersionServedGivesTheVersionOfItsChain) {
  const JobConfig config = Config();
  const std::string root = Root("incremental");
  WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;

  std::unique_ptr<ServedModel> v10 = Load(config, root, 10);
  std::unique_ptr<ServedModel> v20 = Load(config, root, 20);
  std::unique_ptr<ServedModel> v30 = Load(config, root, 30);
  ASSERT_TRUE(v10 && v20 && v30);
  const checkpoint::ResolvedCheckpoint at20 = Resolve(root, 20), at30 = Resolve(root, 30);

  uint64_t bytes = 0;
  auto inc20 = v10->WithDeltas(at20, 1, &bytes);
  ASSERT_TRUE(inc20.ok()) << inc20.status();
  ExpectSameVersion(**inc20, *v20);
  EXPECT_NE((*inc20)->table_hash(), v10->table_hash());
  uint64_t own = 0;
  for (const auto& f : at20.manifest.files()) own += f.size();
  EXPECT_EQ(bytes, own) << "only the delta's files are read";

  // Key 5 (index 5) was evicted before 20: served at 10, gone at 20 either
  // way. Key 320 was created after 10.
  const std::vector<uint64_t> probe = {Keys(5, 6)[0], Keys(320, 321)[0]};
  EXPECT_EQ(Lookup(*v10, kSparse, probe).found, (std::vector<bool>{true, false}));
  EXPECT_EQ(Lookup(**inc20, kSparse, probe).found, (std::vector<bool>{false, true}));
  EXPECT_EQ(Lookup(*v20, kSparse, probe).found, (std::vector<bool>{false, true}));

  // One delta at a time up to 40, and three at once from 10.
  std::unique_ptr<ServedModel> v40 = Load(config, root, 40);
  ASSERT_TRUE(v40);
  const checkpoint::ResolvedCheckpoint at40 = Resolve(root, 40);
  auto inc30 = (*inc20)->WithDeltas(at30, 2, nullptr);
  ASSERT_TRUE(inc30.ok()) << inc30.status();
  ExpectSameVersion(**inc30, *v30);
  auto inc40 = (*inc30)->WithDeltas(at40, 3, nullptr);
  ASSERT_TRUE(inc40.ok()) << inc40.status();
  ExpectSameVersion(**inc40, *v40);
  auto three = v10->WithDeltas(at40, 1, nullptr);
  ASSERT_TRUE(three.ok()) << three.status();
  ExpectSameVersion(**three, *v40);
  // Key 5 written again at 35; key 320 evicted at 30.
  EXPECT_EQ(Lookup(**inc30, kSparse, probe).found, (std::vector<bool>{false, false}));
  EXPECT_EQ(Lookup(**inc40, kSparse, probe).found, (std::vector<bool>{true, false}));
}

// Two models advanced in place, as the replica alternates them: each
// catches up with the other (the links it lacks, written without reads)
// and applies the next link (read once, on the model ahead), and each
// version's incremental table hash and row count equal those of a walk of
// the same checkpoint loaded from its chain (ExpectSameVersion): overwritten
// rows, new rows, deleted rows and shared rows that move all leave and
// enter the sum.
TEST(ServedModelTest, AdvancingInPlaceGivesTheVersionOfItsChain) {
  const JobConfig config = Config();
  const std::string root = Root("in_place");
  WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;

  std::unique_ptr<ServedModel> a = Load(config, root, 10);
  ASSERT_TRUE(a);
  auto b = a->Copy();
  ASSERT_TRUE(b.ok()) << b.status();
  ExpectSameVersion(**b, *a);
  std::vector<ServedModel::Link> lacking;  // What `behind` lacks to equal `ahead`.
  ServedModel* ahead = a.get();
  ServedModel* behind = b->get();
  for (const uint64_t clock : {20, 30, 40}) {
    const checkpoint::ResolvedCheckpoint next = Resolve(root, clock);
    auto read = ahead->ReadDeltas(next, next.chain.size() - 1, nullptr);
    ASSERT_TRUE(read.ok()) << read.status();
    const uint64_t before = behind->table_hash();
    const absl::Status st = behind->CatchUp(lacking, *ahead, next, *read);
    ASSERT_TRUE(st.ok()) << "version " << clock << ": " << st;
    std::unique_ptr<ServedModel> full = Load(config, root, clock);
    ASSERT_TRUE(full);
    ExpectSameVersion(*behind, *full);
    EXPECT_NE(behind->table_hash(), before);
    lacking = *std::move(read);
    std::swap(ahead, behind);
  }
  // The one behind (at 30) refuses links that do not start at its clock:
  // 40's link twice would start at 20.
  const checkpoint::ResolvedCheckpoint at40 = Resolve(root, 40);
  ASSERT_EQ(behind->clock(), 30u);
  std::vector<ServedModel::Link> two = {lacking[0], lacking[0]};
  const absl::Status st = behind->Advance(at40, two);
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
  EXPECT_EQ(behind->clock(), 30u);
}

// The stream's versions of the same cuts (server/version_log.h parts): a
// FULL one builds the version of its checkpoint; DELTA ones applied in
// place, the model behind catching up (as the replica's idle model does),
// give each checkpoint's version, hash, lookups and predictions included.
TEST(ServedModelTest, StreamVersionsGiveTheVersionOfTheirCut) {
  const JobConfig config = Config();
  const std::string root = Root("stream");
  const std::map<uint64_t, ServedModel::StreamLink> versions = WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;
  ASSERT_EQ(versions.size(), 4u);
  auto a = ServedModel::FromStream(config, *versions.at(10));
  ASSERT_TRUE(a.ok()) << a.status();
  std::unique_ptr<ServedModel> at10 = Load(config, root, 10);
  ASSERT_TRUE(at10);
  ExpectSameVersion(**a, *at10, /*streamed=*/true);
  auto b = (*a)->Copy();
  ASSERT_TRUE(b.ok()) << b.status();
  std::vector<ServedModel::StreamLink> lacking;
  ServedModel* ahead = a->get();
  ServedModel* behind = b->get();
  for (const uint64_t clock : {20, 30, 40}) {
    const ServedModel::StreamLink& link = versions.at(clock);
    ASSERT_GT(link->parts.size(), 1u);
    for (const auto& part : link->parts) ASSERT_TRUE(ahead->CheckStreamPart(*part).ok());
    const absl::Status st = lacking.empty() ? behind->AdvanceStream({link})
                                            : behind->CatchUpStream(lacking, *ahead, {link});
    ASSERT_TRUE(st.ok()) << "version " << clock << ": " << st;
    std::unique_ptr<ServedModel> full = Load(config, root, clock);
    ASSERT_TRUE(full);
    ExpectSameVersion(*behind, *full, /*streamed=*/true);
    lacking = {link};
    std::swap(ahead, behind);
  }
  // A catch-up that does not end at the model ahead is refused.
  const absl::Status st = behind->CatchUpStream({versions.at(20)}, *ahead, {versions.at(40)});
  EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << st;
}

// A part that does not fit the job is refused naming what is wrong, before
// any row is written.
TEST(ServedModelTest, StreamPartsThatDoNotFitTheJobAreRefused) {
  const JobConfig config = Config();
  const std::string root = Root("stream_bad");
  const std::map<uint64_t, ServedModel::StreamLink> versions = WriteFourVersions(config, root);
  if (::testing::Test::HasFatalFailure()) return;
  std::unique_ptr<ServedModel> model = Load(config, root, 10);
  ASSERT_TRUE(model);
  const VersionPart& good = *versions.at(20)->parts[0];
  ASSERT_TRUE(model->CheckStreamPart(good).ok());
  VersionPart timed = good;  // As many push ages as a server sends, in chunk 0.
  timed.set_chunk(0);
  timed.mutable_push_ages_micros()->Resize(ServedModel::kMaxPushAges, 7);
  EXPECT_TRUE(model->CheckStreamPart(timed).ok());
  ASSERT_GT(good.tables(0).keys_size(), 0);
  const std::vector<std::pair<std::string, std::function<void(VersionPart*)>>> cases = {
      {"partitions, this job has", [](VersionPart* p) { p->set_num_partitions(7); }},
      {"out of range", [](VersionPart* p) { p->set_partitions(0, 1u << 20); }},
      {"named twice", [](VersionPart* p) { p->add_partitions(p->partitions(0)); }},
      {"is not a table of this job",
       [](VersionPart* p) { p->mutable_tables(0)->set_table_id(99); }},
      {"is not a table of this job", [](VersionPart* p) { p->mutable_tables(0)->set_dim(3); }},
      {"bytes of weights",
       [](VersionPart* p) { p->mutable_tables(0)->mutable_weights()->pop_back(); }},
      {"push ages in chunk 0 (at most 4096",
       [](VersionPart* p) {
         p->set_chunk(0);
         p->mutable_push_ages_micros()->Resize(ServedModel::kMaxPushAges + 1, 7);
       }},
      {"1 push ages in chunk 1 (at most",
       [](VersionPart* p) {
         p->set_chunk(1);
         p->add_push_ages_micros(7);
       }},
      {"a partition the part does not hold",
       [](VersionPart* p) {
         // Only the partitions after the first key's.
         const uint32_t first =
             PartitionOf(p->tables(0).table_id(), p->tables(0).keys(0), p->num_partitions());
         p->clear_partitions();
         for (uint32_t q = 0; q < p->num_partitions(); ++q) {
           if (q != first) p->add_partitions(q);
         }
       }},
  };
  for (const auto& [want, damage] : cases) {
    VersionPart bad = good;
    damage(&bad);
    const absl::Status st = model->CheckStreamPart(bad);
    EXPECT_EQ(st.code(), absl::StatusCode::kInvalidArgument) << want << ": " << st;
    EXPECT_NE(st.message().find(want), absl::string_view::npos) << st;
  }
}

TEST(ServedModelTest, LinksThatDoNotContinueTheVersionAreRefused) {
  const JobConfig config = Config();
  const std::string root = Root("refused");
  CheckpointedJob job(config);
  job.Train(1, 0, 100);
  job.Checkpoint(root, 10, std::nullopt);
  job.Train(12, 50, 150);
  job.Checkpoint(root, 20, 10);
  job.Train(22, 50, 150);
  job.Checkpoint(root, 30, 20);
  std::unique_ptr<ServedModel> v20 = Load(config, root, 20);
  ASSERT_TRUE(v20);
  const checkpoint::ResolvedCheckpoint at30 = Resolve(root, 30);
  // Link 1 (ckpt 20) is a delta on 10, not on the version served (20).
  auto wrong = v20->WithDeltas(at30, 1, nullptr);
  EXPECT_EQ(wrong.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_NE(wrong.status().message().find("not a delta on ckpt-000000000020"), std::string::npos)
      << wrong.status();
  EXPECT_EQ(v20->WithDeltas(at30, 0, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(v20->WithDeltas(at30, 3, nullptr).status().code(), absl::StatusCode::kInvalidArgument);
  // A damaged delta file is refused before a row is applied.
  const std::string file = checkpoint::JoinPath(at30.dir, at30.manifest.files(0).name());
  auto contents = checkpoint::ReadFileToString(file);
  ASSERT_TRUE(contents.ok());
  (*contents)[contents->size() / 2] ^= 0x40;
  ASSERT_TRUE(checkpoint::WriteFileAtomically(file, *contents).ok());
  auto damaged = v20->WithDeltas(at30, 2, nullptr);
  EXPECT_EQ(damaged.status().code(), absl::StatusCode::kDataLoss) << damaged.status();
}

}  // namespace
}  // namespace replica
}  // namespace shardps

#include "common/checkpoint/fuzz/fuzz_seeds.h"

#include "absl/strings/str_cat.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/partition.h"
#include "common/status_macros.h"

namespace shardps {
namespace checkpoint {
namespace {

constexpr uint32_t kPartitions = 4;

// What a seed file holds besides rows.
enum class Extra { kNone, kDeletions, kAdmissionCounts };

absl::StatusOr<WrittenFile> WriteSeedFile(const std::string& path, Compression compression,
                                          Extra extra) {
  FileHeader h;
  h.job_name = "fuzz";
  h.clock = 42;
  h.num_partitions = kPartitions;
  h.tables = FuzzSeedTables();
  h.partitions = {0, 1, 2, 3};
  h.admission_counts = extra == Extra::kAdmissionCounts;
  WriterOptions options;
  options.compression = compression;
  options.block_bytes = 128;
  ASSIGN_OR_RETURN(auto writer, CheckpointFileWriter::Create(path, h, options));
  for (const TableSchema& t : h.tables) {
    for (uint64_t key = 0; key < 12; ++key) {
      const uint32_t p = PartitionOf(t.id, key, kPartitions);
      if (extra == Extra::kDeletions && key % 3 == 0) {
        RETURN_IF_ERROR(writer->AddDeleted(p, t.id, key));
      } else if (extra == Extra::kAdmissionCounts && key % 3 == 0) {
        RETURN_IF_ERROR(
            writer->AddAdmissionCount(p, t.id, key, std::string(kAdmissionCountBytes, char(key))));
      } else {
        RETURN_IF_ERROR(
            writer->Add(p, t.id, key, std::string(t.payload_bytes, char('a' + key % 4))));
      }
    }
  }
  return writer->Finish();
}

std::string WithMode(char mode, absl::string_view input) {
  return absl::StrCat(absl::string_view(&mode, 1), input);
}

}  // namespace

std::vector<TableSchema> FuzzSeedTables() {
  return {{1, "emb", 1, 2, 8, 0x1234}, {3, "dense", 2, 1, 4, 0x5678}};
}

absl::StatusOr<std::vector<std::string>> MakeFuzzSeeds(const std::string& scratch_dir) {
  std::vector<std::string> seeds;
  CheckpointManifest m;
  m.set_format_version(kManifestFormatVersion);
  m.set_checkpoint_id(CheckpointId(42));
  m.set_clock(42);
  m.set_job_name("fuzz");
  m.set_config_fingerprint(99);
  m.set_num_partitions(kPartitions);
  m.set_kind(CheckpointManifest::FULL);
  m.add_chain(m.checkpoint_id());
  int n = 0;
  for (Compression c : {Compression::kNone, Compression::kZstd}) {
    for (Extra extra : {Extra::kNone, Extra::kDeletions, Extra::kAdmissionCounts}) {
      const std::string path = JoinPath(scratch_dir, absl::StrCat("seed-", n++, ".shard"));
      ASSIGN_OR_RETURN(WrittenFile file, WriteSeedFile(path, c, extra));
      ASSIGN_OR_RETURN(std::string bytes, ReadFileToString(path));
      seeds.push_back(WithMode(0, bytes));
      seeds.push_back(WithMode(1, bytes));
      if (n == 1) *m.add_files() = ToManifestEntry(file);
    }
  }
  WorkerPosition* w = m.add_worker_positions();
  w->set_rank(0);
  w->set_position("epoch=0 file=3 offset=1234");
  const std::string text = SerializeManifest(m);
  seeds.push_back(WithMode(2, text));
  seeds.push_back(WithMode(3, text.substr(0, text.rfind("# crc32c"))));
  return seeds;
}

}  // namespace checkpoint
}  // namespace shardps

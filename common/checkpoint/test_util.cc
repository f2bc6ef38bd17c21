#include "common/checkpoint/test_util.h"

#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"

namespace shardps {
namespace checkpoint {
namespace testing {
namespace {

void Die(absl::string_view what) {
  std::fprintf(stderr, "test_util: %s\n", std::string(what).c_str());
  std::abort();
}

}  // namespace

std::string NewTempDir(absl::string_view label) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string pattern = absl::StrCat(base != nullptr ? base : "/tmp", "/", label, ".XXXXXX");
  if (::mkdtemp(&pattern[0]) == nullptr) Die("mkdtemp failed");
  return pattern;
}

std::string ReadAll(const std::string& path) {
  auto contents = ReadFileToString(path);
  if (!contents.ok()) Die(contents.status().ToString());
  return *contents;
}

void WriteAll(const std::string& path, absl::string_view contents) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(contents.data(), contents.size());
  if (!out.good()) Die(absl::StrCat("cannot write ", path));
}

void FlipByte(const std::string& path, uint64_t offset) {
  std::string data = ReadAll(path);
  if (offset >= data.size()) Die("FlipByte past the end");
  data[offset] ^= 0x5A;
  WriteAll(path, data);
}

void Truncate(const std::string& path, uint64_t size) {
  if (::truncate(path.c_str(), static_cast<off_t>(size)) != 0) {
    Die(absl::StrCat("truncate ", path));
  }
}

std::vector<TableSchema> TestTables() {
  return {{1, "emb", 1, 4, 16, 0xe1}, {2, "mlp", 2, 2, 8, 0xe2}};
}

CheckpointManifest WriteTestCheckpoint(const std::string& root, uint64_t clock,
                                       const std::vector<std::string>& chain_before,
                                       Compression compression) {
  auto dir = CreateCheckpointDir(root, clock);
  if (!dir.ok()) Die(dir.status().ToString());
  CheckpointManifest m;
  m.set_format_version(kManifestFormatVersion);
  m.set_checkpoint_id(CheckpointId(clock));
  m.set_clock(clock);
  m.set_job_name("job");
  m.set_config_fingerprint(77);
  m.set_num_partitions(8);
  m.set_kind(chain_before.empty() ? CheckpointManifest::FULL : CheckpointManifest::DELTA);
  if (!chain_before.empty()) m.set_base_id(chain_before.back());
  for (const std::string& id : chain_before) m.add_chain(id);
  m.add_chain(m.checkpoint_id());
  m.set_created_unix_micros(1700000000000000 + clock);
  for (uint32_t group = 0; group < 2; ++group) {
    FileHeader h;
    h.job_name = "job";
    h.clock = clock;
    h.num_partitions = 8;
    h.tables = TestTables();
    for (uint32_t p = 4 * group; p < 4 * group + 4; ++p) h.partitions.push_back(p);
    WriterOptions options;
    options.compression = compression;
    auto writer =
        CheckpointFileWriter::Create(JoinPath(*dir, PartitionGroupFileName(group)), h, options);
    if (!writer.ok()) Die(writer.status().ToString());
    for (uint32_t p : h.partitions) {
      for (uint64_t key = 0; key < 5; ++key) {
        const std::string payload(16, static_cast<char>('a' + p + key + clock));
        absl::Status s = (*writer)->Add(p, 1, key * 8 + p, payload);
        if (s.ok()) s = (*writer)->Add(p, 2, key, payload.substr(0, 8));
        if (!s.ok()) Die(s.ToString());
      }
    }
    auto done = (*writer)->Finish();
    if (!done.ok()) Die(done.status().ToString());
    *m.add_files() = ToManifestEntry(*done);
  }
  WorkerPosition* w = m.add_worker_positions();
  w->set_rank(0);
  w->set_position(absl::StrCat("file=0 offset=", clock * 100));
  w = m.add_worker_positions();
  w->set_rank(1);
  w->set_position(std::string("binary\0\xff", 8));
  absl::Status s = WriteManifest(*dir, m);
  if (!s.ok()) Die(s.ToString());
  return m;
}

}  // namespace testing
}  // namespace checkpoint
}  // namespace shardps

#include "server/snapshot.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/checkpoint/manifest.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "google/protobuf/io/coded_stream.h"
#include "google/protobuf/io/zero_copy_stream_impl_lite.h"

namespace shardps {

namespace ckpt = checkpoint;

uint64_t TableSchemaFingerprint(const TableConfig& config, size_t row_stride) {
  std::string bytes;
  {
    google::protobuf::io::StringOutputStream stream(&bytes);
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    config.SerializeToCodedStream(&out);
  }
  uint64_t h = 0x13198a2e03707344ULL;
  for (unsigned char ch : bytes) h = Mix64(h ^ ch);
  h = Mix64(h ^ bytes.size());
  return Mix64(h ^ uint64_t{row_stride});
}

std::vector<ckpt::TableSchema> TableSchemas(const TableStore& store) {
  std::vector<ckpt::TableSchema> schemas;
  for (const Table* table : store.tables()) {
    ckpt::TableSchema s;
    s.id = table->id();
    s.name = table->config().name();
    s.kind = static_cast<uint32_t>(table->config().kind());
    s.dim = table->dim();
    s.payload_bytes = static_cast<uint32_t>(table->row_stride() * sizeof(float));
    s.fingerprint = TableSchemaFingerprint(table->config(), table->row_stride());
    schemas.push_back(std::move(s));
  }
  return schemas;
}

std::string SnapshotFileName(const std::vector<uint32_t>& partitions, uint32_t num_partitions) {
  const uint32_t group = partitions.front() / kPartitionsPerGroup;
  const uint32_t begin = group * kPartitionsPerGroup;
  const uint32_t end = std::min(begin + kPartitionsPerGroup, num_partitions);
  if (partitions.size() == end - begin) {  // Sorted and unique: all of it.
    return ckpt::PartitionGroupFileName(group);
  }
  char name[64];
  std::snprintf(name, sizeof(name), "part-%04u-%06u.shard", group, partitions.front());
  return name;
}

std::unique_ptr<StoreSnapshot> StoreSnapshot::Take(const TableStore& store,
                                                   const std::vector<bool>& owned,
                                                   std::optional<uint32_t> since) {
  std::unique_ptr<StoreSnapshot> snap(new StoreSnapshot());
  snap->num_partitions_ = static_cast<uint32_t>(owned.size());
  snap->delta_ = since.has_value();
  std::vector<int64_t> index_of(owned.size(), -1);
  for (uint32_t p = 0; p < owned.size(); ++p) {
    if (!owned[p]) continue;
    index_of[p] = snap->partitions_.size();
    snap->partitions_.push_back(p);
  }
  const std::vector<Table*> tables = store.tables();
  for (const Table* table : tables) {
    snap->table_ids_.push_back(table->id());
    snap->strides_.push_back(table->row_stride());
  }
  const size_t num_tables = tables.size();
  snap->rows_of_.resize(snap->partitions_.size() * num_tables);
  const uint32_t parts = snap->num_partitions_;
  for (size_t t = 0; t < num_tables; ++t) {
    const uint32_t table_id = tables[t]->id();
    const size_t stride = tables[t]->row_stride();
    const auto add_row = [&](uint64_t key, const float* payload) {
      const int64_t i = index_of[PartitionOf(table_id, key, parts)];
      if (i < 0) return;  // Not ours (a partition that moved away).
      Rows& rows = snap->rows_of_[i * num_tables + t];
      rows.keys.push_back(key);
      rows.payloads.insert(rows.payloads.end(), payload, payload + stride);
      ++snap->rows_;
    };
    // Shared unadmitted rows: one record per partition under its reserved
    // key (table.h), after the partition's rows.
    const auto add_shared = [&](uint32_t, uint64_t key, const float* payload) {
      add_row(key, payload);
    };
    const auto add_count = [&](uint64_t key, const AdmissionCount& count) {
      const int64_t i = index_of[PartitionOf(table_id, key, parts)];
      if (i < 0) return;
      Rows& rows = snap->rows_of_[i * num_tables + t];
      rows.count_keys.push_back(key);
      rows.counts.push_back(count);
    };
    if (since.has_value()) {  // A delta: few rows, let the buffers grow.
      tables[t]->ForEachChangedRow(*since, add_row, [&](uint64_t key) {
        const int64_t i = index_of[PartitionOf(table_id, key, parts)];
        if (i < 0) return;
        snap->rows_of_[i * num_tables + t].deleted.push_back(key);
        ++snap->deletions_;
      });
      tables[t]->ForEachSharedRow(since, add_shared);
      tables[t]->ForEachAdmissionCount(since, add_count);
      continue;
    }
    // Rows spread evenly over partitions: reserve the expected count plus
    // three standard deviations, so most buffers never grow.
    const double expected = static_cast<double>(tables[t]->Counters().live_rows) / parts;
    const size_t reserve = static_cast<size_t>(expected + 3 * std::sqrt(expected) + 4);
    for (size_t i = 0; i < snap->partitions_.size(); ++i) {
      Rows& rows = snap->rows_of_[i * num_tables + t];
      rows.keys.reserve(reserve);
      rows.payloads.reserve(reserve * stride);
    }
    tables[t]->ForEachRow(add_row);
    tables[t]->ForEachSharedRow(std::nullopt, add_shared);
    tables[t]->ForEachAdmissionCount(std::nullopt, add_count);
  }
  return snap;
}

namespace {

// An admission-count record's payload (snapshot.h): u32 count, u32
// last_seconds, u64 last_clock, little-endian (checkpoint_format.h asserts
// the byte order).
static_assert(ckpt::kAdmissionCountBytes == 16);
void EncodeAdmissionCount(const AdmissionCount& c, char* out) {
  std::memcpy(out, &c.count, 4);
  std::memcpy(out + 4, &c.last_seconds, 4);
  std::memcpy(out + 8, &c.last_clock, 8);
}
AdmissionCount DecodeAdmissionCount(absl::string_view in) {
  AdmissionCount c;
  std::memcpy(&c.count, in.data(), 4);
  std::memcpy(&c.last_seconds, in.data() + 4, 4);
  std::memcpy(&c.last_clock, in.data() + 8, 8);
  return c;
}

absl::StatusOr<ckpt::WrittenFile> WriteGroup(const StoreSnapshot& snapshot, size_t first,
                                             size_t last, const SnapshotWriteOptions& options) {
  ckpt::FileHeader header;
  header.job_name = options.job_name;
  header.clock = options.clock;
  header.delta = snapshot.delta();
  header.base_clock = snapshot.delta() ? options.base_clock : 0;
  header.num_partitions = snapshot.num_partitions();
  header.tables = options.tables;
  header.partitions.assign(snapshot.partitions().begin() + first,
                           snapshot.partitions().begin() + last);
  for (size_t i = first; i < last && !header.admission_counts; ++i) {
    for (size_t t = 0; t < snapshot.table_ids().size(); ++t) {
      if (!snapshot.rows_of(i, t).counts.empty()) header.admission_counts = true;
    }
  }
  const std::string path =
      ckpt::JoinPath(options.dir, SnapshotFileName(header.partitions, snapshot.num_partitions()));
  ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointFileWriter> writer,
                   ckpt::CheckpointFileWriter::Create(path, std::move(header), options.writer));
  for (size_t i = first; i < last; ++i) {
    const uint32_t partition = snapshot.partitions()[i];
    for (size_t t = 0; t < snapshot.table_ids().size(); ++t) {
      const StoreSnapshot::Rows& rows = snapshot.rows_of(i, t);
      const size_t bytes = snapshot.stride(t) * sizeof(float);
      const char* payloads = reinterpret_cast<const char*>(rows.payloads.data());
      for (uint64_t key : rows.deleted) {
        RETURN_IF_ERROR(writer->AddDeleted(partition, snapshot.table_ids()[t], key));
      }
      for (size_t r = 0; r < rows.keys.size(); ++r) {
        RETURN_IF_ERROR(writer->Add(partition, snapshot.table_ids()[t], rows.keys[r],
                                    absl::string_view(payloads + r * bytes, bytes)));
      }
      for (size_t r = 0; r < rows.counts.size(); ++r) {
        char count[ckpt::kAdmissionCountBytes];
        EncodeAdmissionCount(rows.counts[r], count);
        RETURN_IF_ERROR(writer->AddAdmissionCount(partition, snapshot.table_ids()[t],
                                                  rows.count_keys[r],
                                                  absl::string_view(count, sizeof count)));
      }
    }
  }
  return writer->Finish();
}

}  // namespace

absl::StatusOr<std::vector<ckpt::WrittenFile>> WriteSnapshot(const StoreSnapshot& snapshot,
                                                             const SnapshotWriteOptions& options) {
  std::vector<ckpt::WrittenFile> written;
  const std::vector<uint32_t>& parts = snapshot.partitions();
  size_t first = 0;
  while (first < parts.size()) {
    const uint32_t group = parts[first] / kPartitionsPerGroup;
    size_t last = first + 1;
    while (last < parts.size() && parts[last] / kPartitionsPerGroup == group) {
      ++last;
    }
    ASSIGN_OR_RETURN(ckpt::WrittenFile file, WriteGroup(snapshot, first, last, options));
    written.push_back(std::move(file));
    first = last;
  }
  return written;
}

namespace {

bool HoldsOwned(const ckpt::CheckpointFile& file, const std::vector<bool>& owned) {
  for (uint32_t p : file.partitions()) {
    if (p < owned.size() && owned[p]) return true;
  }
  return false;
}

}  // namespace

namespace {

absl::StatusOr<LoadedFiles> LoadLinkFiles(const std::string& checkpoint_dir,
                                          const ckpt::CheckpointManifest& manifest,
                                          const std::vector<bool>& owned,
                                          const std::vector<ckpt::TableSchema>& tables,
                                          RestorePace* pace) {
  if (manifest.num_partitions() != owned.size()) {
    return absl::FailedPreconditionError(absl::StrCat(checkpoint_dir, ": checkpoint has ",
                                                      manifest.num_partitions(),
                                                      " partitions, the job ", owned.size()));
  }
  LoadedFiles loaded;
  for (const ckpt::CheckpointFile& entry : manifest.files()) {
    if (!HoldsOwned(entry, owned)) continue;
    const std::string path = ckpt::JoinPath(checkpoint_dir, entry.name());
    ASSIGN_OR_RETURN(std::string contents, ckpt::ReadFileToString(path));
    if (contents.size() != entry.size()) {
      return absl::DataLossError(
          absl::StrCat(path, ": ", contents.size(), " bytes, the manifest says ", entry.size()));
    }
    const uint32_t crc = ckpt::Crc32c(contents);
    if (crc != entry.crc32c()) {
      return absl::DataLossError(absl::StrCat(path, ": CRC32C ", absl::Hex(crc, absl::kZeroPad8),
                                              " does not match the manifest's ",
                                              absl::Hex(entry.crc32c(), absl::kZeroPad8)));
    }
    ckpt::Expectations expect = ckpt::FileExpectations(manifest, entry);
    expect.tables = tables;
    expect.check_key_partitions = true;
    loaded.bytes += contents.size();
    if (pace != nullptr) pace->Done(contents.size() / 2);
    ASSIGN_OR_RETURN(std::unique_ptr<ckpt::CheckpointFileReader> reader,
                     ckpt::CheckpointFileReader::Parse(std::move(contents), path, expect));
    loaded.files.push_back(std::move(reader));
  }
  return loaded;
}

// Applies one link's files: per file, the deletions, then the rows (a
// block's rows in one Table::RestoreRows), then the admission counts.
uint64_t ApplyLink(const LoadedFiles& files, const std::vector<bool>& owned, TableStore* store,
                   RestorePace* pace = nullptr) {
  uint64_t rows = 0;
  std::vector<uint64_t> keys;
  std::vector<AdmissionCount> counts;
  for (const auto& file : files.files) {
    for (const ckpt::BlockKind kind :
         {ckpt::BlockKind::kDeletions, ckpt::BlockKind::kRows, ckpt::BlockKind::kAdmissionCounts}) {
      for (const ckpt::RecordBlock& block : file->blocks()) {
        if (block.kind() != kind || !owned[block.partition()]) continue;
        Table* table = store->FindTable(block.table_id());
        if (kind == ckpt::BlockKind::kDeletions) {
          for (size_t i = 0; i < block.size(); ++i) table->DeleteRow(block.key(i));
          continue;
        }
        if (kind == ckpt::BlockKind::kAdmissionCounts) {
          keys.resize(block.size());
          counts.resize(block.size());
          for (size_t i = 0; i < block.size(); ++i) {
            keys[i] = block.key(i);
            counts[i] = DecodeAdmissionCount(block.payload(i));
          }
          table->RestoreAdmissionCounts(keys.data(), counts.data(), block.size());
          continue;
        }
        // The reader checked the payload size against the table's schema.
        CHECK_EQ(block.payloads().size(), block.size() * table->row_stride() * sizeof(float));
        keys.resize(block.size());
        for (size_t i = 0; i < block.size(); ++i) keys[i] = block.key(i);
        table->RestoreRows(keys.data(), block.payloads().data(), block.size());
        rows += block.size();
        if (pace != nullptr) pace->Done((block.payloads().size() + 8 * block.size()) / 2);
      }
    }
  }
  return rows;
}

// Before restoring a full link into tables without those rows: room in each
// table's index for the rows the link holds for it, and in its pending
// maps for its admission counts.
void ReserveFor(const LoadedFiles& files, const std::vector<bool>& owned, TableStore* store) {
  std::map<uint32_t, std::pair<size_t, size_t>> records;  // Rows, admission counts.
  for (const auto& file : files.files) {
    for (const ckpt::RecordBlock& block : file->blocks()) {
      if (!owned[block.partition()]) continue;
      if (block.rows()) records[block.table_id()].first += block.size();
      if (block.kind() == ckpt::BlockKind::kAdmissionCounts) {
        records[block.table_id()].second += block.size();
      }
    }
  }
  for (const auto& [table_id, n] : records) {
    store->FindTable(table_id)->ReserveRows(n.first, n.second);
  }
}

// ApplyLink for each link in order.
uint64_t ApplyLinks(const std::vector<LoadedFiles>& links, const std::vector<bool>& owned,
                    TableStore* store, RestorePace* pace) {
  uint64_t rows = 0;
  for (const LoadedFiles& link : links) rows += ApplyLink(link, owned, store, pace);
  return rows;
}

}  // namespace

absl::StatusOr<LoadedFiles> LoadOwnedFiles(const std::string& checkpoint_dir,
                                           const ckpt::CheckpointManifest& manifest,
                                           const std::vector<bool>& owned,
                                           const std::vector<ckpt::TableSchema>& tables) {
  if (manifest.kind() != ckpt::CheckpointManifest::FULL) {
    return absl::FailedPreconditionError(
        absl::StrCat(checkpoint_dir, ": a delta checkpoint (on ", manifest.base_id(),
                     "): restore its whole chain (LoadOwnedChain)"));
  }
  return LoadLinkFiles(checkpoint_dir, manifest, owned, tables, /*pace=*/nullptr);
}

absl::StatusOr<std::vector<LoadedFiles>> LoadOwnedChain(
    const ckpt::ResolvedCheckpoint& checkpoint, const std::vector<bool>& owned,
    const std::vector<ckpt::TableSchema>& tables, RestorePace* pace) {
  if (checkpoint.chain.empty() || checkpoint.chain.size() != checkpoint.chain_dirs.size()) {
    return absl::InvalidArgumentError(
        absl::StrCat(checkpoint.dir, ": the checkpoint's chain is not resolved"));
  }
  std::vector<LoadedFiles> links;
  for (size_t i = 0; i < checkpoint.chain.size(); ++i) {
    absl::StatusOr<LoadedFiles> link =
        LoadLinkFiles(checkpoint.chain_dirs[i], checkpoint.chain[i], owned, tables, pace);
    if (!link.ok()) {
      if (i + 1 == checkpoint.chain.size()) return link.status();
      return absl::Status(link.status().code(),
                          absl::StrCat(checkpoint.dir, ": link ", i,
                                       " of its delta chain: ", link.status().message()));
    }
    links.push_back(*std::move(link));
  }
  return links;
}

uint64_t ApplyFiles(const LoadedFiles& files, const std::vector<bool>& owned, TableStore* store) {
  for (Table* table : store->tables()) table->Clear();
  ReserveFor(files, owned, store);
  return ApplyLink(files, owned, store);
}

uint64_t CatchUpPartitions(const std::vector<LoadedFiles>& links,
                           const std::vector<bool>& partitions, TableStore* store) {
  return ApplyLinks(links, partitions, store, /*pace=*/nullptr);
}

uint64_t AddPartitionsFromChain(const std::vector<LoadedFiles>& chain,
                                const std::vector<bool>& partitions, TableStore* store,
                                RestorePace* pace) {
  for (Table* table : store->tables()) table->DropPartitions(partitions);
  if (!chain.empty()) ReserveFor(chain.front(), partitions, store);
  return ApplyLinks(chain, partitions, store, pace);
}

RestorePace::RestorePace(uint64_t bytes_per_sec)
    : bytes_per_sec_(bytes_per_sec), start_(absl::Now()) {}

void RestorePace::Done(uint64_t bytes) {
  if (bytes_per_sec_ == 0) return;
  bytes_ += bytes;
  const absl::Time due =
      start_ + absl::Seconds(static_cast<double>(bytes_) / static_cast<double>(bytes_per_sec_));
  const absl::Duration ahead = due - absl::Now();
  // Small leads are kept for later: fewer, longer sleeps.
  if (ahead < absl::Milliseconds(2)) return;
  absl::SleepFor(ahead);
  slept_ += ahead;
}

uint64_t ApplyChain(const std::vector<LoadedFiles>& chain, const std::vector<bool>& owned,
                    TableStore* store) {
  for (Table* table : store->tables()) table->Clear();
  if (!chain.empty()) ReserveFor(chain.front(), owned, store);
  return ApplyLinks(chain, owned, store, /*pace=*/nullptr);
}

}  // namespace shardps

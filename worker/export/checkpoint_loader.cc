#include "worker/export/checkpoint_loader.h"

#include <utility>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "server/snapshot.h"
#include "server/table_store.h"

namespace shardps {
namespace exporter {
namespace {

// The checkpoint's manifest, as a restoring server resolves it (sizes only
// here: LoadOwnedFiles reads every file and checks its CRC).
absl::StatusOr<checkpoint::ResolvedCheckpoint> Resolve(const std::string& root,
                                                       std::optional<uint64_t> clock) {
  checkpoint::LoadManifestOptions options;
  options.verify_file_crcs = false;
  if (clock.has_value()) return checkpoint::LoadCheckpoint(root, *clock, options);
  return checkpoint::LatestComplete(root, options);
}

// FAILED_PRECONDITION unless every chunk row of the dense table is present.
absl::Status CheckDenseChunks(const JobConfig& config, const std::string& dir, uint64_t num_chunks,
                              const TableStore& store) {
  if (num_chunks == 0 || config.model().dense_table().empty()) return absl::OkStatus();
  const TableConfig* dense = FindTable(config, config.model().dense_table());
  if (dense == nullptr) return absl::OkStatus();  // The trainer refuses the config.
  const Table* table = store.FindTable(dense->id());
  if (table == nullptr) return absl::OkStatus();
  absl::flat_hash_set<uint64_t> chunks;
  table->ForEachRow([&chunks](uint64_t key, const float*) { chunks.insert(key); });
  for (uint64_t c = 0; c < num_chunks; ++c) {
    if (!chunks.contains(c)) {
      return absl::FailedPreconditionError(
          absl::StrCat(dir, ": dense table ", dense->id(), " (\"", dense->name(),
                       "\") has no chunk ", c, " of the model's ", num_chunks,
                       " (a cut taken before the dense weights were "
                       "written?)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<LoadedCheckpoint> RestoreCheckpoint(const JobConfig& config, const std::string& root,
                                                   std::optional<uint64_t> clock,
                                                   uint64_t num_dense_chunks, TableStore* store) {
  if (store == nullptr) return absl::InvalidArgumentError("RestoreCheckpoint: no store");
  if (root.empty()) return absl::InvalidArgumentError("no checkpoint directory given");
  ASSIGN_OR_RETURN(checkpoint::ResolvedCheckpoint resolved, Resolve(root, clock));
  // As a restoring server: the job name must match; the config fingerprint
  // is not compared (it covers the server count), each file's table schemas
  // are (LoadOwnedFiles).
  if (resolved.manifest.job_name() != config.name()) {
    return absl::FailedPreconditionError(absl::StrCat(resolved.dir, ": checkpoint of job \"",
                                                      resolved.manifest.job_name(),
                                                      "\", this job is \"", config.name(), "\""));
  }
  const std::vector<bool> owned(config.cluster().num_partitions(), true);
  // A delta checkpoint comes with its chain (full base, then deltas).
  ASSIGN_OR_RETURN(const std::vector<LoadedFiles> chain,
                   LoadOwnedChain(resolved, owned, TableSchemas(*store)));
  LoadedCheckpoint out;
  out.rows = ApplyChain(chain, owned, store);
  out.bytes = 0;
  for (const LoadedFiles& files : chain) out.bytes += files.bytes;
  out.dir = resolved.dir;
  out.clock = resolved.manifest.clock();
  out.manifest = std::move(resolved.manifest);
  store->SetClock(out.clock);
  for (const Table* table : store->tables()) {
    uint64_t n = 0;
    table->ForEachRow([&n](uint64_t, const float*) { ++n; });
    out.rows_per_table[table->id()] = n;
  }
  RETURN_IF_ERROR(CheckDenseChunks(config, out.dir, num_dense_chunks, *store));
  return out;
}

}  // namespace exporter
}  // namespace shardps

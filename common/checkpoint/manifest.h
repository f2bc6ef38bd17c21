// The manifest of one checkpoint: what makes a checkpoint directory a
// complete checkpoint. It is written LAST (after every partition-group file
// is durable), under a temporary name, fsynced and renamed to
// "<checkpoint dir>/MANIFEST"; a directory without it is not a checkpoint.
//
// ## Format
//
// Text-format protobuf of shardps.checkpoint.CheckpointManifest
// (proto/checkpoint.proto), readable with any protobuf tool, followed by one last
// line "# crc32c: xxxxxxxx" (lower-case hex CRC32C of every byte before that
// line; a comment to text-format parsers). The CRC line makes a torn or
// edited manifest detectable; text keeps it greppable by operators.
//
// ## Rules (ValidateManifest)
//
// - format_version == kManifestFormatVersion; checkpoint_id ==
//   CheckpointId(clock); job_name non-empty; num_partitions > 0.
// - files: plain base names (no '/', not "MANIFEST", not a temporary name),
//   unique; together their partitions cover [0, num_partitions) exactly once.
// - worker_positions: unique ranks.
// - format_version stays 1 with deltas: kind, base_id and chain were part of
//   version 1 from the start, and builds before delta support refuse to
//   restore a DELTA (UNIMPLEMENTED, naming the checkpoint). The files of a
//   DELTA are file format version 2 (3 with admission counts), which those
//   builds refuse as well (checkpoint_file.h, kFileFormatVersion).
// - FULL: no base_id; chain == {checkpoint_id}.
//   DELTA: base_id is an older checkpoint id; chain starts with a FULL
//   checkpoint (checked when the chain is resolved, see checkpoint_dir.h),
//   has strictly increasing clocks, ends with {..., base_id, checkpoint_id}.
//
// Errors name the manifest or the file; codes: DATA_LOSS (corrupt, truncated,
// wrong size or CRC), NOT_FOUND (manifest or listed file missing),
// FAILED_PRECONDITION (unsupported version), INVALID_ARGUMENT (WriteManifest
// given an invalid manifest).
//
// Thread-safety: pure functions apart from the file I/O they name.
#ifndef SHARDPS_COMMON_CHECKPOINT_MANIFEST_H_
#define SHARDPS_COMMON_CHECKPOINT_MANIFEST_H_

#include <cstdint>
#include <optional>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/checkpoint/checkpoint_file.h"
#include "proto/checkpoint.pb.h"

namespace shardps {
namespace checkpoint {

inline constexpr uint32_t kManifestFormatVersion = 1;
inline constexpr char kManifestFileName[] = "MANIFEST";

// "ckpt-000000000123": the directory name of the checkpoint at `clock`
// (zero-padded to 12 digits so names sort by clock).
std::string CheckpointId(uint64_t clock);
// The clock of a checkpoint id ("ckpt-" and 1-20 digits), or nullopt.
std::optional<uint64_t> ParseCheckpointId(absl::string_view id);

// The manifest entry of a file the writer produced (base name of its path).
CheckpointFile ToManifestEntry(const WrittenFile& file);

// What a file listed in `manifest` must hold (job, clock, P, partitions, and
// its kind: a FULL manifest's files are full files, a DELTA manifest's are
// delta files on its base_id's clock); the caller adds the tables of its job
// config before opening the file.
Expectations FileExpectations(const CheckpointManifest& manifest, const CheckpointFile& file);

// The rules above; no file access. INVALID_ARGUMENT naming the field.
absl::Status ValidateManifest(const CheckpointManifest& manifest);

// FAILED_PRECONDITION unless `manifest` belongs to this job: same job name,
// config fingerprint and number of partitions. The message says which
// differs, e.g. "ckpt-000000000400: config fingerprint 00000000000000aa does
// not match the job config's 00000000000000bb".
absl::Status CheckManifestMatchesJob(const CheckpointManifest& manifest, absl::string_view job_name,
                                     uint64_t config_fingerprint, uint32_t num_partitions);

// Text plus the CRC line. Deterministic for a given manifest.
std::string SerializeManifest(const CheckpointManifest& manifest);

// Checks the CRC line, parses, validates. `name` is used in errors. Safe on
// arbitrary bytes.
absl::StatusOr<CheckpointManifest> ParseManifest(absl::string_view text, absl::string_view name);

// Validates `manifest`, checks that every listed file exists in
// `checkpoint_dir` with the listed size, then writes MANIFEST atomically and
// durably. Call it only after every file's writer has finished.
absl::Status WriteManifest(const std::string& checkpoint_dir, const CheckpointManifest& manifest);

struct LoadManifestOptions {
  // Read every listed file and compare its CRC32C (else only sizes).
  bool verify_file_crcs = true;
};

// Reads and parses "<checkpoint_dir>/MANIFEST", checks that its id matches
// the directory's name, and that every listed file exists with the right
// size (and CRC). A missing, short, long or corrupt file is refused naming it.
absl::StatusOr<CheckpointManifest> LoadManifest(
    const std::string& checkpoint_dir, const LoadManifestOptions& options = LoadManifestOptions());

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_MANIFEST_H_

#include "common/checkpoint/manifest.h"

#include <algorithm>
#include <vector>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/strip.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/file_io.h"
#include "common/status_macros.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace shardps {
namespace checkpoint {
namespace {

constexpr absl::string_view kIdPrefix = "ckpt-";
constexpr absl::string_view kCrcPrefix = "# crc32c: ";
constexpr size_t kCrcLineSize = 10 + 8 + 1;  // Prefix, 8 hex digits, '\n'.

absl::Status Invalid(absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat("manifest: ", what));
}

std::string BaseName(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

bool IsPlainFileName(absl::string_view name) {
  return !name.empty() && name != "." && name != ".." && name != kManifestFileName &&
         !IsTempFileName(name) && !absl::StrContains(name, '/') && !absl::StrContains(name, '\0');
}

absl::Status ValidateFiles(const CheckpointManifest& m) {
  absl::flat_hash_set<std::string> names;
  std::vector<int> owner(m.num_partitions(), -1);
  for (int i = 0; i < m.files_size(); ++i) {
    const CheckpointFile& f = m.files(i);
    if (!IsPlainFileName(f.name())) {
      return Invalid(
          absl::StrCat("files[", i, "]: bad file name \"", absl::CEscape(f.name()), "\""));
    }
    if (!names.insert(f.name()).second) {
      return Invalid(absl::StrCat("files[", i, "]: ", f.name(), " listed twice"));
    }
    for (uint32_t p : f.partitions()) {
      if (p >= m.num_partitions()) {
        return Invalid(absl::StrCat(f.name(), ": partition ", p, " >= ", m.num_partitions()));
      }
      if (owner[p] >= 0) {
        return Invalid(absl::StrCat("partition ", p, " is in both ", m.files(owner[p]).name(),
                                    " and ", f.name()));
      }
      owner[p] = i;
    }
  }
  auto missing = std::find(owner.begin(), owner.end(), -1);
  if (missing != owner.end()) {
    return Invalid(absl::StrCat("partition ", missing - owner.begin(), " is in no file"));
  }
  return absl::OkStatus();
}

absl::Status ValidateChain(const CheckpointManifest& m) {
  const auto& chain = m.chain();
  if (chain.empty() || chain[chain.size() - 1] != m.checkpoint_id()) {
    return Invalid("chain must end with the checkpoint's own id");
  }
  if (m.kind() == CheckpointManifest::FULL) {
    if (!m.base_id().empty() || chain.size() != 1) {
      return Invalid("a FULL checkpoint has no base_id and a chain of itself");
    }
    return absl::OkStatus();
  }
  if (m.kind() != CheckpointManifest::DELTA) {
    return Invalid(absl::StrCat("kind ", m.kind(), " is not FULL or DELTA"));
  }
  if (chain.size() < 2 || chain[chain.size() - 2] != m.base_id()) {
    return Invalid("a DELTA's chain must end with {base_id, checkpoint_id}");
  }
  uint64_t previous = 0;
  for (int i = 0; i < chain.size(); ++i) {
    std::optional<uint64_t> clock = ParseCheckpointId(chain[i]);
    if (!clock || (i > 0 && *clock <= previous)) {
      return Invalid(absl::StrCat("chain[", i, "] \"", absl::CEscape(chain[i]),
                                  "\" is not a checkpoint id newer than the "
                                  "one before"));
    }
    previous = *clock;
  }
  return absl::OkStatus();
}

}  // namespace

std::string CheckpointId(uint64_t clock) { return absl::StrFormat("ckpt-%012u", clock); }

std::optional<uint64_t> ParseCheckpointId(absl::string_view id) {
  if (!absl::ConsumePrefix(&id, kIdPrefix) || id.empty() || id.size() > 20) {
    return std::nullopt;
  }
  for (char c : id) {
    if (!absl::ascii_isdigit(static_cast<unsigned char>(c))) return std::nullopt;
  }
  uint64_t clock;
  if (!absl::SimpleAtoi(id, &clock)) return std::nullopt;
  return clock;
}

CheckpointFile ToManifestEntry(const WrittenFile& file) {
  CheckpointFile entry;
  entry.set_name(BaseName(file.path));
  entry.set_size(file.size);
  entry.set_crc32c(file.crc32c);
  for (uint32_t p : file.partitions) entry.add_partitions(p);
  return entry;
}

Expectations FileExpectations(const CheckpointManifest& manifest, const CheckpointFile& file) {
  Expectations e;
  e.job_name = manifest.job_name();
  e.clock = manifest.clock();
  e.num_partitions = manifest.num_partitions();
  e.partitions = std::vector<uint32_t>(file.partitions().begin(), file.partitions().end());
  const bool delta = manifest.kind() == CheckpointManifest::DELTA;
  e.delta = delta;
  e.base_clock = delta ? ParseCheckpointId(manifest.base_id()).value_or(0) : 0;
  return e;
}

absl::Status ValidateManifest(const CheckpointManifest& m) {
  if (m.format_version() != kManifestFormatVersion) {
    return absl::FailedPreconditionError(
        absl::StrCat("manifest: format_version ", m.format_version(),
                     " is not supported (this build reads ", kManifestFormatVersion, ")"));
  }
  if (m.checkpoint_id() != CheckpointId(m.clock())) {
    return Invalid(absl::StrCat("checkpoint_id \"", absl::CEscape(m.checkpoint_id()),
                                "\" does not match clock ", m.clock(), " (expected ",
                                CheckpointId(m.clock()), ")"));
  }
  if (m.job_name().empty()) return Invalid("job_name is empty");
  if (m.num_partitions() == 0) return Invalid("num_partitions must be > 0");
  // Bounds the coverage vector for parsed (untrusted) manifests.
  if (m.num_partitions() > (1u << 24)) {
    return Invalid(absl::StrCat("num_partitions ", m.num_partitions(), " is implausible"));
  }
  RETURN_IF_ERROR(ValidateFiles(m));
  absl::flat_hash_set<uint32_t> ranks;
  for (const WorkerPosition& w : m.worker_positions()) {
    if (!ranks.insert(w.rank()).second) {
      return Invalid(absl::StrCat("worker rank ", w.rank(), " listed twice"));
    }
  }
  return ValidateChain(m);
}

absl::Status CheckManifestMatchesJob(const CheckpointManifest& m, absl::string_view job_name,
                                     uint64_t config_fingerprint, uint32_t num_partitions) {
  const absl::string_view id = m.checkpoint_id();
  if (m.job_name() != job_name) {
    return absl::FailedPreconditionError(absl::StrCat(
        id, ": job \"", m.job_name(), "\" does not match the job config's \"", job_name, "\""));
  }
  if (m.config_fingerprint() != config_fingerprint) {
    return absl::FailedPreconditionError(
        absl::StrFormat("%s: config fingerprint %016x does not match the job config's %016x", id,
                        m.config_fingerprint(), config_fingerprint));
  }
  if (m.num_partitions() != num_partitions) {
    return absl::FailedPreconditionError(absl::StrCat(id, ": num_partitions ", m.num_partitions(),
                                                      " does not match the job config's ",
                                                      num_partitions));
  }
  return absl::OkStatus();
}

std::string SerializeManifest(const CheckpointManifest& manifest) {
  std::string text;
  google::protobuf::TextFormat::PrintToString(manifest, &text);
  return absl::StrCat(text, kCrcPrefix, absl::StrFormat("%08x\n", Crc32c(text)));
}

namespace {

// Collects the first text-format error as "line:col: message".
class FirstError : public google::protobuf::io::ErrorCollector {
 public:
  void AddError(int line, int column, const std::string& message) override {
    if (error_.empty()) {
      error_ = absl::StrCat(line + 1, ":", column + 1, ": ", message);
    }
  }
  const std::string& error() const { return error_; }

 private:
  std::string error_;
};

}  // namespace

absl::StatusOr<CheckpointManifest> ParseManifest(absl::string_view text, absl::string_view name) {
  const auto corrupt = [&](absl::string_view what) {
    return absl::DataLossError(absl::StrCat(name, ": ", what));
  };
  if (text.size() < kCrcLineSize || text.back() != '\n') {
    return corrupt("truncated: no CRC line at the end");
  }
  const absl::string_view body = text.substr(0, text.size() - kCrcLineSize);
  absl::string_view line = text.substr(body.size(), kCrcLineSize - 1);
  if ((!body.empty() && body.back() != '\n') || !absl::ConsumePrefix(&line, kCrcPrefix)) {
    return corrupt("truncated: no CRC line at the end");
  }
  uint32_t stored;
  if (!absl::SimpleHexAtoi(line, &stored) || absl::StrFormat("%08x", stored) != line) {
    return corrupt("malformed CRC line");
  }
  const uint32_t computed = Crc32c(body);
  if (stored != computed) {
    return corrupt(absl::StrFormat(
        "CRC mismatch (stored %08x, computed %08x): the manifest is corrupt", stored, computed));
  }
  CheckpointManifest manifest;
  google::protobuf::TextFormat::Parser parser;
  FirstError errors;
  parser.RecordErrorsTo(&errors);
  if (!parser.ParseFromString(std::string(body), &manifest)) {
    return corrupt(absl::StrCat("not a manifest: ", errors.error()));
  }
  absl::Status valid = ValidateManifest(manifest);
  if (!valid.ok()) {
    return absl::Status(valid.code() == absl::StatusCode::kInvalidArgument
                            ? absl::StatusCode::kDataLoss
                            : valid.code(),
                        absl::StrCat(name, ": ", valid.message()));
  }
  return manifest;
}

absl::Status WriteManifest(const std::string& checkpoint_dir, const CheckpointManifest& manifest) {
  RETURN_IF_ERROR(ValidateManifest(manifest));
  for (const CheckpointFile& f : manifest.files()) {
    const std::string path = JoinPath(checkpoint_dir, f.name());
    ASSIGN_OR_RETURN(uint64_t size, FileSize(path));
    if (size != f.size()) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": ", size,
                                                        " bytes on disk, the manifest to "
                                                        "write says ",
                                                        f.size()));
    }
  }
  return WriteFileAtomically(JoinPath(checkpoint_dir, kManifestFileName),
                             SerializeManifest(manifest));
}

absl::StatusOr<CheckpointManifest> LoadManifest(const std::string& checkpoint_dir,
                                                const LoadManifestOptions& options) {
  const std::string path = JoinPath(checkpoint_dir, kManifestFileName);
  ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  ASSIGN_OR_RETURN(CheckpointManifest manifest, ParseManifest(text, path));
  std::string dir_name = checkpoint_dir;
  while (dir_name.size() > 1 && dir_name.back() == '/') dir_name.pop_back();
  if (BaseName(dir_name) != manifest.checkpoint_id()) {
    return absl::DataLossError(absl::StrCat(path, ": checkpoint_id ", manifest.checkpoint_id(),
                                            " does not match its directory ", BaseName(dir_name)));
  }
  for (const CheckpointFile& f : manifest.files()) {
    const std::string file = JoinPath(checkpoint_dir, f.name());
    absl::StatusOr<uint64_t> size = FileSize(file);
    if (!size.ok()) {
      if (absl::IsNotFound(size.status())) {
        return absl::NotFoundError(absl::StrCat(file, ": listed in the manifest but missing"));
      }
      return size.status();
    }
    if (*size != f.size()) {
      return absl::DataLossError(
          absl::StrCat(file, ": size ", *size, " does not match the manifest's ", f.size()));
    }
    if (!options.verify_file_crcs) continue;
    ASSIGN_OR_RETURN(FileDigest digest, DigestFile(file));
    if (digest.size != f.size() || digest.crc32c != f.crc32c()) {
      return absl::DataLossError(absl::StrFormat(
          "%s: CRC32C %08x does not match the manifest's %08x", file, digest.crc32c, f.crc32c()));
    }
  }
  return manifest;
}

}  // namespace checkpoint
}  // namespace shardps

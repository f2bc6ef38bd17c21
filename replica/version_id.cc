#include "replica/version_id.h"

#include <filesystem>
#include <fstream>
#include <sstream>
#include <system_error>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/checkpoint/manifest.h"

namespace shardps {
namespace replica {

std::optional<int64_t> CreatedMicros(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", checkpoint::kManifestFileName);
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) return std::nullopt;
  std::ifstream in(path, std::ios::binary);
  if (!in) return std::nullopt;  // Gone since.
  std::stringstream text;
  text << in.rdbuf();
  absl::StatusOr<checkpoint::CheckpointManifest> m = checkpoint::ParseManifest(text.str(), path);
  if (!m.ok()) return absl::IsNotFound(m.status()) ? std::nullopt : std::optional<int64_t>(-1);
  return m->created_unix_micros();
}

int64_t CutMicros(const checkpoint::CheckpointManifest& manifest) {
  return manifest.cut_unix_micros() > 0 ? manifest.cut_unix_micros()
                                        : manifest.created_unix_micros();
}

uint64_t FileBytes(const checkpoint::CheckpointManifest& manifest) {
  uint64_t bytes = 0;
  for (const checkpoint::CheckpointFile& f : manifest.files()) bytes += f.size();
  return bytes;
}

}  // namespace replica
}  // namespace shardps

// Constants and little-endian helpers of the checkpoint file format
// (documented in checkpoint_file.h), shared by its writer and reader.
// Private to //common/checkpoint:checkpoint_file.
#ifndef SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_FORMAT_H_
#define SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_FORMAT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/string_view.h"

static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__,
              "the checkpoint format is little-endian; add byte swaps");

namespace shardps {
namespace checkpoint {
namespace internal {

inline constexpr uint32_t kBlockTag = 0x314B4C42;   // "BLK1"
inline constexpr uint32_t kFooterTag = 0x31444E45;  // "END1"
inline constexpr uint32_t kFlagZstd = 1;
inline constexpr uint32_t kFlagDeleted = 2;
inline constexpr uint32_t kFlagAdmissionCounts = 4;  // Version 3.
inline constexpr uint32_t kFileKindFull = 1;         // Versions 2 and 3 file_kind.
inline constexpr uint32_t kFileKindDelta = 2;
inline constexpr size_t kMagicSize = 8;
inline constexpr size_t kHeaderPrefix = kMagicSize + 4 + 4;  // magic, version, len.
inline constexpr size_t kBlockHeaderSize = 7 * 4;
inline constexpr size_t kFooterSize = 4 + 8 + 8 + 4;
inline constexpr size_t kMaxHeaderBody = size_t{16} << 20;
inline constexpr size_t kMaxNameBytes = 4096;

inline void PutU32(std::string* out, uint32_t v) {
  out->append(reinterpret_cast<const char*>(&v), 4);
}
inline void PutU64(std::string* out, uint64_t v) {
  out->append(reinterpret_cast<const char*>(&v), 8);
}
inline void PutStr(std::string* out, absl::string_view s) {
  PutU32(out, static_cast<uint32_t>(s.size()));
  out->append(s.data(), s.size());
}

inline uint32_t LoadU32(const char* p) {
  uint32_t v;
  std::memcpy(&v, p, 4);
  return v;
}
inline uint64_t LoadU64(const char* p) {
  uint64_t v;
  std::memcpy(&v, p, 8);
  return v;
}

}  // namespace internal
}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_CHECKPOINT_FORMAT_H_

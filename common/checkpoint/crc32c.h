// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the CRC
// of iSCSI, ext4, LevelDB and RocksDB. Checkpoint files use it for every
// header, block and footer, and the manifest for whole files.
//
// Why CRC32C and not zlib's crc32: it detects more error patterns at the
// block sizes we write, and x86 has an instruction for it if we ever need the
// speed. This is a portable slicing-by-8 implementation (about 1-2 GB/s per
// core), so the checkpoint code needs no CPU dispatch.
//
// Thread-safety: pure functions (the tables are built once, thread-safely).
#ifndef SHARDPS_COMMON_CHECKPOINT_CRC32C_H_
#define SHARDPS_COMMON_CHECKPOINT_CRC32C_H_

#include <cstddef>
#include <cstdint>

#include "absl/strings/string_view.h"

namespace shardps {
namespace checkpoint {

// The CRC32C of `data` appended to a stream whose CRC so far is `crc` (0 for
// an empty stream): Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t size);

inline uint32_t Crc32c(const void* data, size_t size) {
  return Crc32cExtend(0, data, size);
}
inline uint32_t Crc32c(absl::string_view data) {
  return Crc32cExtend(0, data.data(), data.size());
}

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_CRC32C_H_

// CRC32C (Castagnoli, polynomial 0x1EDC6F41, reflected 0x82F63B78), the CRC
// of iSCSI, ext4, LevelDB and RocksDB. Checkpoint files use it for every
// header, block and footer, and the manifest for whole files.
//
// Why CRC32C and not zlib's crc32: it detects more error patterns at the
// block sizes we write, and x86 has an instruction for it. On x86-64 with
// SSE4.2 (checked once at run time) the instruction does the work, 8 bytes
// at a time; elsewhere a portable slicing-by-8 loop (about 1-2 GB/s per
// core). Both give the same result (crc32c_test checks them against each
// other).
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

// The portable implementation, whatever the CPU (tests and benchmarks).
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t size);
// Whether Crc32cExtend uses the CPU's CRC32 instruction.
bool Crc32cHardware();

inline uint32_t Crc32c(const void* data, size_t size) { return Crc32cExtend(0, data, size); }
inline uint32_t Crc32c(absl::string_view data) { return Crc32cExtend(0, data.data(), data.size()); }

}  // namespace checkpoint
}  // namespace shardps

#endif  // SHARDPS_COMMON_CHECKPOINT_CRC32C_H_

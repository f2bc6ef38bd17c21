// Fuzz target: arbitrary bytes into the checkpoint file reader and the
// manifest parser. Neither may crash, hang, leak or read out of bounds, and
// every refusal is a status.
//
// The first input byte picks a mode (mod 4); the rest is the input:
//   0  a checkpoint file, as is (mostly exercises the CRC gates);
//   1  a checkpoint file whose header, block and footer CRCs the harness
//      recomputes first, so mutations reach the checks behind the CRCs
//      (lengths, flags, zstd, counts, schema, key partitions);
//   2  a MANIFEST, as is;
//   3  a MANIFEST body to which the harness appends a valid CRC line, so
//      mutations reach the text-format parser and the validation rules.
//
// Build and run with libFuzzer (see README.md in this directory).
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

#include "absl/strings/str_format.h"
#include "common/checkpoint/checkpoint_file.h"
#include "common/checkpoint/crc32c.h"
#include "common/checkpoint/fuzz/fuzz_seeds.h"
#include "common/checkpoint/manifest.h"

namespace shardps {
namespace checkpoint {
namespace {

uint32_t Load32(const std::string& s, size_t at) {
  uint32_t v;
  std::memcpy(&v, s.data() + at, 4);
  return v;
}

void StoreCrc(std::string* s, size_t begin, size_t end) {
  const uint32_t crc = Crc32c(s->data() + begin, end - begin);
  std::memcpy(&(*s)[end], &crc, 4);
}

// Rewrites every CRC of the format (checkpoint_file.h) that the claimed
// lengths let us find.
void FixCrcs(std::string* s) {
  if (s->size() < 16) return;
  const uint64_t header_end = 16 + uint64_t{Load32(*s, 12)};
  if (header_end + 4 > s->size()) return;
  StoreCrc(s, 0, header_end);
  size_t pos = header_end + 4;
  while (pos + 4 <= s->size()) {
    const uint32_t tag = Load32(*s, pos);
    if (tag == 0x314B4C42) {  // Block.
      if (pos + 32 > s->size()) return;
      const uint64_t crc_at = pos + 28 + uint64_t{Load32(*s, pos + 24)};
      if (crc_at + 4 > s->size()) return;
      StoreCrc(s, pos, crc_at);
      pos = crc_at + 4;
    } else if (tag == 0x31444E45) {  // Footer.
      if (pos + 24 <= s->size()) StoreCrc(s, pos, pos + 20);
      return;
    } else {
      return;
    }
  }
}

void ReadFile(const std::string& bytes) {
  auto reader = CheckpointFileReader::Parse(bytes, "fuzz");
  if (reader.ok()) {
    // Touch every key and payload byte: they must all be in bounds.
    uint64_t sum = 0;
    for (const RecordBlock& block : (*reader)->blocks()) {
      for (size_t i = 0; i < block.size(); ++i) {
        sum += block.key(i);
        for (char c : block.payload(i)) sum += static_cast<unsigned char>(c);
      }
    }
    volatile uint64_t sink = sum;
    (void)sink;
  }
  Expectations expect;
  expect.tables = FuzzSeedTables();
  expect.check_key_partitions = true;
  (void)CheckpointFileReader::Parse(bytes, "fuzz", expect);
}

}  // namespace
}  // namespace checkpoint
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardps::checkpoint;  // NOLINT
  if (size == 0) return 0;
  const int mode = data[0] % 4;
  std::string input(reinterpret_cast<const char*>(data) + 1, size - 1);
  switch (mode) {
    case 0:
      ReadFile(input);
      break;
    case 1:
      FixCrcs(&input);
      ReadFile(input);
      break;
    case 2:
      (void)ParseManifest(input, "fuzz");
      break;
    default:
      if (!input.empty() && input.back() != '\n') input += '\n';
      input += absl::StrFormat("# crc32c: %08x\n", Crc32c(input));
      (void)ParseManifest(input, "fuzz");
      break;
  }
  return 0;
}

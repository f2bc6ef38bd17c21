// ps_table_hash: the table hash of a complete checkpoint, from its files alone
// (replica/checkpoint_hash.h): what a serving replica at that version must
// report.
//
//   ps_table_hash --checkpoint_dir DIR [--clock N]
//
// Prints one line
//
//   PS_TABLE_HASH clock=<C> hash=<16 hex digits> rows=<R> chain=<links> checkpoint=<dir>
//
// Exit status: 0 done, 1 the checkpoint could not be read, 2 bad flags.
#include <cinttypes>
#include <cstdio>
#include <optional>
#include <string>

#include "absl/flags/flag.h"
#include "common/init.h"
#include "glog/logging.h"
#include "replica/checkpoint_hash.h"

ABSL_FLAG(std::string, checkpoint_dir, "", "Checkpoint root (checkpoint.dir of the job).");
ABSL_FLAG(int64_t, clock, -1, "Checkpoint clock (-1: the latest complete one).");

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_table_hash --checkpoint_dir DIR [--clock N]");
  if (absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    LOG(ERROR) << "give --checkpoint_dir";
    return 2;
  }
  std::optional<uint64_t> clock;
  if (absl::GetFlag(FLAGS_clock) >= 0) clock = absl::GetFlag(FLAGS_clock);
  auto hash = shardps::replica::HashCheckpoint(absl::GetFlag(FLAGS_checkpoint_dir), clock);
  if (!hash.ok()) {
    LOG(ERROR) << hash.status();
    return 1;
  }
  std::printf("PS_TABLE_HASH clock=%" PRIu64 " hash=%016" PRIx64 " rows=%" PRIu64
              " chain=%zu checkpoint=%s\n",
              hash->clock, hash->hash, hash->rows, hash->chain_length, hash->dir.c_str());
  std::fflush(stdout);
  return 0;
}

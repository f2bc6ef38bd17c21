// Prints "table key partition" for each (table, key) read from stdin, one
// per line. Used by partition_test to check that another process maps keys
// to the same partitions.
#include <cinttypes>
#include <cstdio>

#include "common/partition.h"

int main(int argc, char** argv) {
  unsigned table = 0;
  uint64_t key = 0;
  unsigned partitions = 4096;
  if (argc > 1) std::sscanf(argv[1], "%u", &partitions);
  while (std::scanf("%u %" SCNu64, &table, &key) == 2) {
    std::printf("%u %" PRIu64 " %u\n", table, key, shardps::PartitionOf(table, key, partitions));
  }
  return 0;
}

// ps_config_check: validates job configs and prints what they resolve to.
//
//   ps_config_check configs/default.pbtxt [more.pbtxt ...]
//
// Exit status 0 if every config is valid; errors name file, line and field.
#include <cinttypes>
#include <cstdio>

#include "common/config.h"
#include "common/init.h"
#include "google/protobuf/text_format.h"

int main(int argc, char** argv) {
  const auto files = shardps::InitProcess(
      argc, argv, "ps_config_check JOB.pbtxt...: validate job configs");
  if (files.empty()) {
    std::fprintf(stderr, "usage: ps_config_check JOB.pbtxt...\n");
    return 2;
  }
  int bad = 0;
  for (const std::string& path : files) {
    auto config = shardps::LoadJobConfig(path);
    if (!config.ok()) {
      std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
      ++bad;
      continue;
    }
    std::printf("%s: ok, job \"%s\", %d tables, %u servers, %u workers, "
                "fingerprint %016" PRIx64 "\n",
                path.c_str(), config->name().c_str(), config->tables_size(),
                config->cluster().num_servers(), config->cluster().num_workers(),
                shardps::ConfigFingerprint(*config));
  }
  return bad == 0 ? 0 : 1;
}

// ps_config_check: validates job configs and prints what they resolve to.
//
//   ps_config_check configs/default.pbtxt [more.pbtxt ...]
//
// Exit status 0 if every config is valid; errors name file, line and field.
//
// With --write=OUT (one input), the config is rewritten to OUT after the
// overrides below are applied and checked again: the local launcher uses it
// so that every process of a job loads the same, final config.
#include <cinttypes>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "common/config.h"
#include "common/init.h"
#include "common/partition.h"
#include "google/protobuf/text_format.h"

ABSL_FLAG(std::string, write, "", "Write the final config here (one input).");
ABSL_FLAG(int, servers, 0, "Override cluster.num_servers.");
ABSL_FLAG(int, workers, 0, "Override cluster.num_workers.");
ABSL_FLAG(std::string, mode, "", "Override cluster.mode: BSP, SSP or ASP.");
ABSL_FLAG(int, staleness, -1, "Override cluster.staleness.");
ABSL_FLAG(std::string, train_files, "", "Override data.train_files (comma list).");
ABSL_FLAG(std::string, eval_files, "", "Override data.eval_files (comma list).");
ABSL_FLAG(std::string, synthetic_dir, "", "Override data.synthetic_dir.");
ABSL_FLAG(std::string, checkpoint_dir, "", "Override checkpoint.dir.");
ABSL_FLAG(int, heartbeat_ms, 0, "Override cluster.heartbeat_ms.");
ABSL_FLAG(int, dead_after_ms, 0, "Override cluster.dead_after_ms.");
ABSL_FLAG(int, epochs, 0, "Override training.epochs.");
ABSL_FLAG(uint64_t, max_steps, 0, "Override training.max_steps.");
ABSL_FLAG(uint32_t, eval_every_steps, 0,
          "Override training.eval_every_steps (evaluate a checkpoint every N clocks).");
ABSL_FLAG(double, eval_every_epochs, 0,
          "Override training.eval_every_epochs (evaluate a checkpoint every X epochs).");
ABSL_FLAG(bool, prefetch, true, "training.prefetch (when --write).");
ABSL_FLAG(float, dense_compression, 0,
          "Set training.dense_compression.ratio (0: leave the config's).");
ABSL_FLAG(std::string, mixed_precision, "",
          "Override training.mixed_precision: FP32, BF16 or FP16.");
ABSL_FLAG(std::string, torchscript_file, "",
          "Set model.kind TORCHSCRIPT and model.torchscript_file (the module's file).");

namespace {

absl::Status ApplyOverrides(shardps::JobConfig* c) {
  auto* k = c->mutable_cluster();
  if (absl::GetFlag(FLAGS_servers) > 0) k->set_num_servers(absl::GetFlag(FLAGS_servers));
  if (absl::GetFlag(FLAGS_workers) > 0) k->set_num_workers(absl::GetFlag(FLAGS_workers));
  const std::string mode = absl::GetFlag(FLAGS_mode);
  if (!mode.empty()) {
    shardps::ConsistencyMode m;
    if (!shardps::ConsistencyMode_Parse(mode, &m)) {
      return absl::InvalidArgumentError("--mode must be BSP, SSP or ASP");
    }
    k->set_mode(m);
    if (m == shardps::BSP) k->set_staleness(0);
  }
  if (absl::GetFlag(FLAGS_staleness) >= 0) k->set_staleness(absl::GetFlag(FLAGS_staleness));
  if (absl::GetFlag(FLAGS_heartbeat_ms) > 0) k->set_heartbeat_ms(absl::GetFlag(FLAGS_heartbeat_ms));
  if (absl::GetFlag(FLAGS_dead_after_ms) > 0)
    k->set_dead_after_ms(absl::GetFlag(FLAGS_dead_after_ms));
  auto* d = c->mutable_data();
  if (!absl::GetFlag(FLAGS_train_files).empty()) {
    d->clear_train_files();
    for (auto f : absl::StrSplit(absl::GetFlag(FLAGS_train_files), ','))
      d->add_train_files(std::string(f));
  }
  if (!absl::GetFlag(FLAGS_eval_files).empty()) {
    d->clear_eval_files();
    for (auto f : absl::StrSplit(absl::GetFlag(FLAGS_eval_files), ','))
      d->add_eval_files(std::string(f));
  }
  if (!absl::GetFlag(FLAGS_synthetic_dir).empty())
    d->set_synthetic_dir(absl::GetFlag(FLAGS_synthetic_dir));
  if (!absl::GetFlag(FLAGS_checkpoint_dir).empty()) {
    c->mutable_checkpoint()->set_dir(absl::GetFlag(FLAGS_checkpoint_dir));
  }
  if (absl::GetFlag(FLAGS_epochs) > 0)
    c->mutable_training()->set_epochs(absl::GetFlag(FLAGS_epochs));
  if (absl::GetFlag(FLAGS_max_steps) > 0)
    c->mutable_training()->set_max_steps(absl::GetFlag(FLAGS_max_steps));
  // Either cadence replaces the config's, whichever of the two it has.
  if (absl::GetFlag(FLAGS_eval_every_steps) > 0) {
    c->mutable_training()->set_eval_every_steps(absl::GetFlag(FLAGS_eval_every_steps));
    c->mutable_training()->clear_eval_every_epochs();
  }
  if (absl::GetFlag(FLAGS_eval_every_epochs) > 0) {
    c->mutable_training()->set_eval_every_epochs(absl::GetFlag(FLAGS_eval_every_epochs));
    c->mutable_training()->clear_eval_every_steps();
  }
  c->mutable_training()->set_prefetch(absl::GetFlag(FLAGS_prefetch) && c->training().prefetch());
  if (absl::GetFlag(FLAGS_dense_compression) != 0) {
    c->mutable_training()->mutable_dense_compression()->set_ratio(
        absl::GetFlag(FLAGS_dense_compression));
  }
  if (const std::string p = absl::GetFlag(FLAGS_mixed_precision); !p.empty()) {
    shardps::TrainingConfig::Precision precision;
    if (!shardps::TrainingConfig::Precision_Parse(p, &precision)) {
      return absl::InvalidArgumentError("--mixed_precision must be FP32, BF16 or FP16");
    }
    c->mutable_training()->set_mixed_precision(precision);
  }
  if (const std::string f = absl::GetFlag(FLAGS_torchscript_file); !f.empty()) {
    c->mutable_model()->set_kind(shardps::ModelConfig::TORCHSCRIPT);
    c->mutable_model()->set_torchscript_file(f);
  }
  return shardps::FinalizeJobConfig(c);
}

// `path`'s text parsed without defaults or checks; false if it cannot be
// read or is not text-format JobConfig.
bool ParseUnchecked(const std::string& path, shardps::JobConfig* out) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  google::protobuf::TextFormat::Parser parser;
  return parser.ParseFromString(text.str(), out);
}

}  // namespace

int main(int argc, char** argv) {
  const auto files =
      shardps::InitProcess(argc, argv, "ps_config_check JOB.pbtxt...: validate job configs");
  if (files.empty()) {
    std::fprintf(stderr, "usage: ps_config_check JOB.pbtxt...\n");
    return 2;
  }
  int bad = 0;
  for (const std::string& path : files) {
    auto config = shardps::LoadJobConfig(path);
    if (!absl::GetFlag(FLAGS_write).empty()) {
      // The flags may set what the file lacks (a config that evaluates
      // periodically, given its checkpoint.dir by --checkpoint_dir): when
      // the file alone does not validate, its text is parsed unchecked, the
      // flags applied, and the result checked. If that fails too, the
      // file's own error (with its line) is what is reported.
      shardps::JobConfig base;
      if (config.ok()) {
        base = *config;
      } else if (!ParseUnchecked(path, &base)) {
        std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
        return 1;
      }
      if (absl::Status st = ApplyOverrides(&base); !st.ok()) {
        if (!config.ok()) {
          std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
        } else {
          std::fprintf(stderr, "%s: %s\n", path.c_str(), std::string(st.message()).c_str());
        }
        return 1;
      }
      config = std::move(base);
      std::string text;
      google::protobuf::TextFormat::PrintToString(*config, &text);
      std::FILE* out = std::fopen(absl::GetFlag(FLAGS_write).c_str(), "w");
      if (out == nullptr || std::fputs(text.c_str(), out) < 0 || std::fclose(out) != 0) {
        std::fprintf(stderr, "cannot write %s\n", absl::GetFlag(FLAGS_write).c_str());
        return 1;
      }
    } else if (!config.ok()) {
      std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
      ++bad;
      continue;
    }
    std::printf(
        "%s: ok, job \"%s\", %d tables, %u servers, %u workers, "
        "fingerprint %016" PRIx64 "\n",
        path.c_str(), config->name().c_str(), config->tables_size(),
        config->cluster().num_servers(), config->cluster().num_workers(),
        shardps::ConfigFingerprint(*config));
  }
  return bad == 0 ? 0 : 1;
}

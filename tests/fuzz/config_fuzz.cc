// Fuzz target: arbitrary text into the job-config loader
// (common/config.h ParseJobConfig), named "fuzz.pbtxt".
//
// Checked: a refusal is INVALID_ARGUMENT and names the file; an accepted
// config is final (FinalizeJobConfig accepts it again and changes neither it
// nor its fingerprint), every table is found by name and its text form
// parses back to the same config.
#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/string_view.h"
#include "common/config.h"
#include "google/protobuf/text_format.h"
#include "google/protobuf/util/message_differencer.h"
#include "tests/fuzz/fuzz_target.h"

namespace shardps {
namespace fuzz {
namespace {

constexpr char kFile[] = "fuzz.pbtxt";

void CheckAccepted(const JobConfig& config) {
  JobConfig again = config;
  FuzzCheck(FinalizeJobConfig(&again).ok(), "accepted config finalizes again");
  FuzzCheck(google::protobuf::util::MessageDifferencer::Equals(again, config),
            "finalizing a final config changes nothing");
  FuzzCheck(ConfigFingerprint(again) == ConfigFingerprint(config), "fingerprint stable");
  for (const TableConfig& t : config.tables()) {
    FuzzCheck(FindTable(config, t.name()) == &t, "table found by its name");
  }
  (void)EffectiveStaleness(config.cluster());
  std::string text;
  FuzzCheck(google::protobuf::TextFormat::PrintToString(config, &text), "config prints");
  auto reparsed = ParseJobConfig(text, kFile);
  FuzzCheck(reparsed.ok(), "printed config parses");
  FuzzCheck(google::protobuf::util::MessageDifferencer::Equals(*reparsed, config),
            "printed config parses to itself");
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  return {
      R"pb(name: "t"
tables { id: 1 name: "emb" dim: 8 optimizer { sgd { learning_rate: 0.1 } } }
data { train_files: "train.tsv" }
cluster { mode: SSP staleness: 2 }
)pb",
      R"pb(# The default job.
name: "dlrm-synthetic"
tables {
  id: 1
  name: "categorical"
  kind: SPARSE
  dim: 16
  seed: 17
  init { kind: UNIFORM scale: 0.05 }
  optimizer { rowwise_adagrad { learning_rate: 0.05 } }
}
tables {
  id: 2
  name: "mlp"
  kind: DENSE
  seed: 18
  init { kind: MODEL }
  optimizer { adagrad { learning_rate: 0.02 } }
}
model { kind: DLRM bottom_mlp: [64, 16] top_mlp: [64, 32] dense_table: "mlp" }
data {
  format: CRITEO
  synthetic_dir: "data/synthetic"
  synthetic_train_lines: 400000
  synthetic_eval_lines: 50000
  synthetic_seed: 2024
  error_budget: 100
}
training {
  batch_size: 256
  epochs: 1
  shuffle_seed: 7
  prefetch: true
  intra_op_threads: 1
  lr_schedule { warmup_steps: 50 }
}
cluster { num_servers: 2 num_workers: 2 num_partitions: 4096 mode: SSP staleness: 2 }
)pb",
      R"pb(name: "bsp"
tables { id: 3 name: "a" dim: 4 optimizer { adam { learning_rate: 0.01 } } }
tables { id: 4 name: "b" dim: 2 optimizer { ftrl { alpha: 0.1 l1: 0.01 } } }
fields { name: "x" column: 3 table: "a" pooling: MEAN }
fields { name: "y" column: 4 table: "b" }
data { format: TSV_MULTIHOT train_files: "t.tsv" }
cluster { num_servers: 1 num_workers: 3 mode: BSP }
)pb",
  };
}

}  // namespace fuzz
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardps::fuzz;  // NOLINT
  const absl::string_view text(reinterpret_cast<const char*>(data), size);
  auto config = shardps::ParseJobConfig(text, kFile);
  if (config.ok()) {
    CheckAccepted(*config);
  } else {
    if (Verbose()) std::fprintf(stderr, "%s\n", config.status().ToString().c_str());
    FuzzCheck(config.status().code() == absl::StatusCode::kInvalidArgument,
              "refusal is INVALID_ARGUMENT");
    FuzzCheck(absl::StrContains(config.status().message(), kFile), "refusal names the file");
  }
  CountOutcome(config.ok());
  return 0;
}

// ps_datagen: writes a synthetic Criteo-format data set (worker/data/
// synthetic.h) and prints its best achievable AUC and logloss.
//
//   ps_datagen --out_dir=data/synthetic --train_lines=400000
//       --eval_lines=50000 --seed=2024 [--gzip] [--train_shards=1]
//       [--family=default|criteo|crosses|noisy|drift]
#include <cstdint>
#include <iostream>
#include <string>

#include "absl/flags/flag.h"
#include "common/init.h"
#include "glog/logging.h"
#include "worker/data/synthetic.h"

ABSL_FLAG(std::string, out_dir, "", "Directory to write the data set into.");
ABSL_FLAG(uint64_t, train_lines, 400000, "Training lines.");
ABSL_FLAG(uint64_t, eval_lines, 50000, "Evaluation lines.");
ABSL_FLAG(uint64_t, seed, 2024, "Seed of the ground-truth model and samples.");
ABSL_FLAG(bool, gzip, false, "Write .tsv.gz files.");
ABSL_FLAG(uint32_t, train_shards, 1, "Number of training files.");
ABSL_FLAG(std::string, family, "default",
          "Family of ground truths (worker/data/synthetic_family.h): default, criteo, crosses, "
          "noisy or drift.");

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv,
                       "Writes a synthetic Criteo-format data set with known "
                       "best AUC.\nUsage: ps_datagen --out_dir=DIR [flags]");
  shardps::data::SyntheticOptions options;
  options.out_dir = absl::GetFlag(FLAGS_out_dir);
  options.train_lines = absl::GetFlag(FLAGS_train_lines);
  options.eval_lines = absl::GetFlag(FLAGS_eval_lines);
  options.seed = absl::GetFlag(FLAGS_seed);
  options.gzip = absl::GetFlag(FLAGS_gzip);
  options.train_shards = absl::GetFlag(FLAGS_train_shards);
  options.family = absl::GetFlag(FLAGS_family);
  const auto summary = shardps::data::GenerateSynthetic(options);
  if (!summary.ok()) {
    LOG(ERROR) << summary.status();
    return 1;
  }
  std::cout << "wrote " << options.out_dir << " (family " << options.family
            << "): " << summary->train_lines << " train / " << summary->eval_lines
            << " eval lines, ctr " << summary->eval_positive_rate << "\nbest auc "
            << summary->best_auc << ", best logloss " << summary->best_logloss
            << ", dense-only auc " << summary->dense_only_auc << std::endl;
  return 0;
}

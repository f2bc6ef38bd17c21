#include "common/config.h"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "common/partition.h"
#include "google/protobuf/io/tokenizer.h"
#include "google/protobuf/text_format.h"

namespace shardps {
namespace {

using google::protobuf::FieldDescriptor;
using google::protobuf::Message;
using google::protobuf::TextFormat;

// Collects the text-format parser's errors, quoting the offending line so the
// message names the field even when the parser only says "Expected integer".
class ParseErrors : public google::protobuf::io::ErrorCollector {
 public:
  ParseErrors(absl::string_view filename, absl::string_view text)
      : filename_(filename), lines_(absl::StrSplit(text, '\n')) {}

  void AddError(int line, int column, const std::string& message) override {
    std::string where = absl::StrCat(filename_, ":", line + 1, ":", column + 1);
    std::string quoted;
    if (line >= 0 && line < static_cast<int>(lines_.size())) {
      quoted = absl::StrCat(" (in `", absl::StripAsciiWhitespace(lines_[line]), "`)");
    }
    errors_.push_back(absl::StrCat(where, ": ", message, quoted));
  }
  void AddWarning(int line, int column, const std::string& message) override {}

  std::string Joined() const { return absl::StrJoin(errors_, "\n"); }

 private:
  std::string filename_;
  std::vector<std::string> lines_;
  std::vector<std::string> errors_;
};

// One step of a field path: a field name and an index (-1 if singular).
struct PathStep {
  std::string field;
  int index = -1;
};
using Path = std::vector<PathStep>;

// Semantic checks, with errors located through the parser's ParseInfoTree
// (absent when the config did not come from text).
class Validator {
 public:
  Validator(const JobConfig& config, std::string filename, const TextFormat::ParseInfoTree* tree)
      : config_(config), filename_(std::move(filename)), tree_(tree) {}

  void Error(const Path& path, absl::string_view what) {
    errors_.push_back(absl::StrCat(Where(path), PathName(path), ": ", what));
  }
  bool ok() const { return errors_.empty(); }
  absl::Status status() const {
    if (errors_.empty()) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrJoin(errors_, "\n"));
  }

 private:
  // "file:line:col: " of the deepest element of `path` present in the text.
  std::string Where(const Path& path) const {
    if (filename_.empty()) return "";
    int line = -1, column = -1;
    const Message* msg = &config_;
    const TextFormat::ParseInfoTree* tree = tree_;
    for (const PathStep& step : path) {
      if (tree == nullptr || msg == nullptr) break;
      const FieldDescriptor* field = msg->GetDescriptor()->FindFieldByName(step.field);
      if (field == nullptr) break;
      if (field->is_repeated() != (step.index >= 0)) break;  // Else DFATAL.
      const auto loc = tree->GetLocation(field, step.index);
      if (loc.line >= 0) {
        line = loc.line;
        column = loc.column;
      }
      if (field->cpp_type() != FieldDescriptor::CPPTYPE_MESSAGE) break;
      const auto* refl = msg->GetReflection();
      if (field->is_repeated()) {
        if (step.index < 0 || step.index >= refl->FieldSize(*msg, field)) break;
        msg = &refl->GetRepeatedMessage(*msg, field, step.index);
      } else {
        if (!refl->HasField(*msg, field)) break;
        msg = &refl->GetMessage(*msg, field);
      }
      tree = tree->GetTreeForNested(field, step.index);
    }
    if (line < 0) return absl::StrCat(filename_, ": ");
    return absl::StrCat(filename_, ":", line + 1, ":", column + 1, ": ");
  }

  std::string PathName(const Path& path) const {
    std::string out;
    for (const PathStep& step : path) {
      if (!out.empty()) out += ".";
      out += step.field;
      if (step.index >= 0) {
        absl::StrAppend(&out, "[", step.index, "]");
        if (step.field == "tables" && step.index < config_.tables_size()) {
          absl::StrAppend(&out, " (\"", config_.tables(step.index).name(), "\")");
        }
      }
    }
    return out;
  }

  const JobConfig& config_;
  std::string filename_;
  const TextFormat::ParseInfoTree* tree_;
  std::vector<std::string> errors_;
};

void FillDefaults(JobConfig* c) {
  for (TableConfig& t : *c->mutable_tables()) {
    if (t.kind() == TableConfig::KIND_UNSPECIFIED) t.set_kind(TableConfig::SPARSE);
    InitializerConfig* init = t.mutable_init();
    if (init->kind() == InitializerConfig::KIND_UNSPECIFIED) {
      init->set_kind(t.kind() == TableConfig::DENSE ? InitializerConfig::MODEL
                                                    : InitializerConfig::UNIFORM);
    }
    if (init->scale() == 0 &&
        (init->kind() == InitializerConfig::UNIFORM || init->kind() == InitializerConfig::NORMAL)) {
      init->set_scale(0.01f);
    }
    OptimizerConfig* opt = t.mutable_optimizer();
    if (opt->has_adagrad() && opt->adagrad().eps() == 0) {
      opt->mutable_adagrad()->set_eps(1e-10f);
    }
    if (opt->has_rowwise_adagrad() && opt->rowwise_adagrad().eps() == 0) {
      opt->mutable_rowwise_adagrad()->set_eps(1e-10f);
    }
    if (opt->has_adam()) {
      AdamConfig* a = opt->mutable_adam();
      if (a->beta1() == 0) a->set_beta1(0.9f);
      if (a->beta2() == 0) a->set_beta2(0.999f);
      if (a->eps() == 0) a->set_eps(1e-8f);
    }
    if (opt->has_ftrl() && opt->ftrl().beta() == 0) opt->mutable_ftrl()->set_beta(1.0f);
  }
  ClusterConfig* k = c->mutable_cluster();
  if (k->num_servers() == 0) k->set_num_servers(1);
  if (k->max_servers() == 0) k->set_max_servers(k->num_servers());
  if (k->num_workers() == 0) k->set_num_workers(1);
  if (k->num_partitions() == 0) k->set_num_partitions(4096);
  if (k->mode() == CONSISTENCY_UNSPECIFIED) k->set_mode(SSP);
  if (k->mode() == SSP && k->staleness() == 0) k->set_staleness(1);
  if (k->heartbeat_ms() == 0) k->set_heartbeat_ms(1000);
  if (k->dead_after_ms() == 0) k->set_dead_after_ms(10000);
  if (k->server_deadline_ms() == 0) k->set_server_deadline_ms(60000);
  if (k->worker_deadline_ms() == 0) k->set_worker_deadline_ms(60000);
  if (k->start_deadline_ms() == 0) k->set_start_deadline_ms(600000);
  k->set_on_worker_loss(EffectiveOnWorkerLoss(*k));
  if (k->max_message_bytes() == 0) k->set_max_message_bytes(64ull << 20);
  if (k->dense_chunk_size() == 0) k->set_dense_chunk_size(4096);
  if (k->max_concurrent_streams() == 0) k->set_max_concurrent_streams(100);
  if (k->grpc_memory_bytes() == 0) k->set_grpc_memory_bytes(1ull << 30);
  if (k->max_unsent_answer_bytes() == 0) k->set_max_unsent_answer_bytes(1ull << 30);
  if (k->answer_send_timeout_ms() == 0) k->set_answer_send_timeout_ms(60000);
  if (k->scheduler_grpc_memory_bytes() == 0) k->set_scheduler_grpc_memory_bytes(64ull << 20);
  DataConfig* d = c->mutable_data();
  if (d->format() == DataConfig::FORMAT_UNSPECIFIED) d->set_format(DataConfig::CRITEO);
  if (d->num_dense() == 0) d->set_num_dense(13);
  if (d->error_budget() == 0) d->set_error_budget(100);
  TrainingConfig* tr = c->mutable_training();
  if (tr->batch_size() == 0) tr->set_batch_size(256);
  if (tr->epochs() == 0) tr->set_epochs(1);
  if (tr->intra_op_threads() == 0) tr->set_intra_op_threads(1);
  ModelConfig* m = c->mutable_model();
  if (m->kind() == ModelConfig::KIND_UNSPECIFIED) m->set_kind(ModelConfig::DLRM);
  if (c->checkpoint().keep() == 0) c->mutable_checkpoint()->set_keep(3);
}

void ValidateOptimizer(const TableConfig& t, const Path& at, Validator* v) {
  const OptimizerConfig& o = t.optimizer();
  Path p = at;
  p.push_back({"optimizer"});
  auto positive = [&](const char* kind, const char* field, float value) {
    if (!(value > 0)) {
      Path q = p;
      q.push_back({kind});
      q.push_back({field});
      v->Error(q, "must be > 0");
    }
  };
  switch (o.kind_case()) {
    case OptimizerConfig::kSgd:
      positive("sgd", "learning_rate", o.sgd().learning_rate());
      if (o.sgd().momentum() < 0 || o.sgd().momentum() >= 1) {
        v->Error(p, "sgd.momentum must be in [0, 1)");
      }
      break;
    case OptimizerConfig::kAdagrad:
      positive("adagrad", "learning_rate", o.adagrad().learning_rate());
      break;
    case OptimizerConfig::kRowwiseAdagrad:
      positive("rowwise_adagrad", "learning_rate", o.rowwise_adagrad().learning_rate());
      if (t.kind() == TableConfig::DENSE) {
        v->Error(p,
                 "rowwise_adagrad is a row-wise optimizer and is refused on "
                 "DENSE tables (use adagrad)");
      }
      break;
    case OptimizerConfig::kAdam:
      positive("adam", "learning_rate", o.adam().learning_rate());
      if (o.adam().beta1() >= 1 || o.adam().beta2() >= 1) {
        v->Error(p, "adam betas must be < 1");
      }
      break;
    case OptimizerConfig::kFtrl:
      positive("ftrl", "alpha", o.ftrl().alpha());
      if (o.ftrl().l1() < 0 || o.ftrl().l2() < 0) {
        v->Error(p, "ftrl l1 and l2 must be >= 0");
      }
      break;
    case OptimizerConfig::KIND_NOT_SET:
      v->Error(p,
               "an optimizer is required (sgd, adagrad, rowwise_adagrad, "
               "adam or ftrl)");
      break;
  }
  if (o.clip_norm() < 0) v->Error(p, "clip_norm must be >= 0");
  if (o.weight_decay() < 0) v->Error(p, "weight_decay must be >= 0");
}

void ValidateTables(const JobConfig& c, Validator* v) {
  if (c.tables_size() == 0) v->Error({{"tables"}}, "at least one table is required");
  std::set<uint32_t> ids;
  std::set<std::string> names;
  for (int i = 0; i < c.tables_size(); ++i) {
    const TableConfig& t = c.tables(i);
    const Path at = {{"tables", i}};
    auto field = [&](const char* name) {
      Path p = at;
      p.push_back({name});
      return p;
    };
    if (t.name().empty()) v->Error(field("name"), "must not be empty");
    if (!names.insert(t.name()).second) v->Error(field("name"), "is used by another table");
    if (!ids.insert(t.id()).second) v->Error(field("id"), "is used by another table");
    if (t.kind() == TableConfig::SPARSE) {
      if (t.dim() == 0 || t.dim() > 65536) {
        v->Error(field("dim"), "must be > 0 (and <= 65536) for a SPARSE table");
      }
      if (t.init().kind() == InitializerConfig::MODEL) {
        v->Error(field("init"), "MODEL init is for DENSE tables only");
      }
    } else if (t.optimizer().has_ftrl()) {
      v->Error(field("optimizer"), "ftrl is for SPARSE tables");
    }
    if (t.kind() == TableConfig::DENSE && t.admission().min_count() > 1) {
      v->Error(field("admission"), "min_count is for SPARSE tables");
    }
    if (t.admission().unadmitted() != AdmissionConfig::SHARED && t.admission().min_count() <= 1) {
      v->Error(field("admission"),
               "unadmitted needs min_count > 1 (every key is admitted "
               "at its first touch)");
    }
    if (t.init().scale() < 0) v->Error(field("init"), "scale must be >= 0");
    if (!std::isfinite(t.max_gradient_abs()) || t.max_gradient_abs() < 0) {
      v->Error(field("max_gradient_abs"), "must be finite and >= 0 (0: the default, 1e6)");
    }
    ValidateOptimizer(t, at, v);
  }
}

constexpr uint32_t kMaxBatchSize = 1u << 24;
constexpr uint32_t kMaxIntraOpThreads = 1024;
constexpr double kMaxEvalEveryEpochs = 1e6;

// The model's kind and what it needs: a TORCHSCRIPT model its file and its
// dense table; torchscript_file only with that kind.
void ValidateModelKind(const ModelConfig& m, Validator* v) {
  if (!ModelConfig::Kind_IsValid(m.kind())) {
    v->Error({{"model"}, {"kind"}}, "must be DLRM or TORCHSCRIPT");
    return;
  }
  if (m.kind() != ModelConfig::TORCHSCRIPT) {
    if (!m.torchscript_file().empty()) {
      v->Error({{"model"}, {"torchscript_file"}},
               absl::StrCat("is read only by kind TORCHSCRIPT (the kind is ",
                            ModelConfig::Kind_Name(m.kind()), ")"));
    }
    return;
  }
  if (m.torchscript_file().empty()) {
    v->Error({{"model"}, {"kind"}},
             "TORCHSCRIPT needs model.torchscript_file, the module's file (models/script.py "
             "writes one)");
  }
  if (m.dense_table().empty()) {
    v->Error({{"model"}, {"kind"}},
             "TORCHSCRIPT needs model.dense_table, the DENSE table of the module's parameters");
  }
}

// Fields and the model name tables of the right kind.
void ValidateRest(const JobConfig& c, Validator* v) {
  for (int i = 0; i < c.fields_size(); ++i) {
    const FieldConfig& f = c.fields(i);
    const TableConfig* t = FindTable(c, f.table());
    if (t == nullptr) {
      v->Error({{"fields", i}, {"table"}}, absl::StrCat("names no table (\"", f.table(), "\")"));
    } else if (t->kind() != TableConfig::SPARSE) {
      v->Error({{"fields", i}, {"table"}}, "must name a SPARSE table");
    }
  }
  const ModelConfig& m = c.model();
  if (!m.dense_table().empty()) {
    const TableConfig* t = FindTable(c, m.dense_table());
    if (t == nullptr || t->kind() != TableConfig::DENSE) {
      v->Error({{"model"}, {"dense_table"}}, "must name a DENSE table");
    }
  }
  if (!m.wide_table().empty()) {
    const TableConfig* t = FindTable(c, m.wide_table());
    if (t == nullptr || t->kind() != TableConfig::SPARSE || t->dim() != 1) {
      v->Error({{"model"}, {"wide_table"}},
               "must name a SPARSE table of dim 1 (one first-order weight per id)");
    }
  }
  ValidateModelKind(m, v);
}

void ValidateCluster(const JobConfig& c, Validator* v) {
  const ClusterConfig& k = c.cluster();
  if (k.num_partitions() < k.num_servers() || k.num_partitions() > (1u << 20)) {
    v->Error({{"cluster"}, {"num_partitions"}}, "must be >= num_servers and <= 1048576");
  }
  if (k.max_servers() < k.num_servers() || k.max_servers() > k.num_partitions()) {
    v->Error({{"cluster"}, {"max_servers"}}, "must be >= num_servers and <= num_partitions");
  }
  if (k.staleness() < 0) v->Error({{"cluster"}, {"staleness"}}, "must be >= 0");
  if (k.mode() == SSP && k.staleness() < 1) {
    v->Error({{"cluster"}, {"staleness"}}, "SSP needs staleness >= 1 (BSP is 0)");
  }
  if (k.mode() == BSP && k.staleness() != 0) {
    v->Error({{"cluster"}, {"staleness"}}, "BSP has staleness 0");
  }
  if (k.dead_after_ms() <= k.heartbeat_ms()) {
    v->Error({{"cluster"}, {"dead_after_ms"}}, "must exceed heartbeat_ms");
  }
  // What a peer may hold (docs/security.md): each bound must leave room for
  // one message of the job.
  if (k.grpc_memory_bytes() < 2 * k.max_message_bytes()) {
    v->Error(
        {{"cluster"}, {"grpc_memory_bytes"}},
        absl::StrCat("must be at least 2 x max_message_bytes (", 2 * k.max_message_bytes(), ")"));
  }
  if (k.max_unsent_answer_bytes() < k.max_message_bytes()) {
    v->Error({{"cluster"}, {"max_unsent_answer_bytes"}},
             absl::StrCat("must be at least max_message_bytes (", k.max_message_bytes(), ")"));
  }
  if (k.scheduler_grpc_memory_bytes() < (8u << 20)) {
    v->Error({{"cluster"}, {"scheduler_grpc_memory_bytes"}}, "must be at least 8 MiB (8388608)");
  }
  if (k.max_concurrent_streams() > (1u << 20)) {
    v->Error({{"cluster"}, {"max_concurrent_streams"}}, "must be <= 1048576");
  }
}

void ValidateData(const JobConfig& c, Validator* v) {
  const DataConfig& d = c.data();
  if (d.train_files_size() == 0 && d.synthetic_dir().empty()) {
    v->Error({{"data"}, {"train_files"}}, "no training data: give train_files (or synthetic_dir)");
  }
  for (int i = 0; i < d.train_files_size(); ++i) {
    if (d.train_files(i).empty()) v->Error({{"data"}, {"train_files", i}}, "is empty");
  }
  // The reader's kMaxShuffleBuffer (worker/data/criteo_reader.h).
  constexpr uint64_t kMaxShuffleBuffer = uint64_t{1} << 24;
  if (d.shuffle_buffer() > kMaxShuffleBuffer) {
    v->Error({{"data"}, {"shuffle_buffer"}},
             absl::StrCat("must be <= ", kMaxShuffleBuffer,
                          " (lines per worker's shuffle window; 0 = no line shuffling)"));
  }
  if (c.checkpoint().recovery() == CheckpointConfig::PARTIAL && c.cluster().mode() == BSP) {
    v->Error({{"checkpoint"}, {"recovery"}}, "PARTIAL recovery is for SSP/ASP jobs");
  }
  if (!CheckpointConfig::OnCorrupt_IsValid(c.checkpoint().on_corrupt())) {
    v->Error({{"checkpoint"}, {"on_corrupt"}}, "must be FAIL or FALL_BACK");
  }
  if (c.checkpoint().version_every_steps() > 0 && c.checkpoint().dir().empty()) {
    v->Error({{"checkpoint"}, {"version_every_steps"}},
             "versions between checkpoints are deltas on the last checkpoint: set checkpoint.dir");
  }
}

void ValidateTraining(const JobConfig& c, Validator* v) {
  const ClusterConfig& k = c.cluster();
  const DataConfig& d = c.data();
  // Integers that are narrowed later (to int, for the data pipeline and
  // LibTorch) are bounded here, so a huge value is refused by name instead
  // of wrapping negative at run time.
  const TrainingConfig& tr = c.training();
  if (tr.batch_size() > kMaxBatchSize) {
    v->Error({{"training"}, {"batch_size"}},
             absl::StrCat("must be <= ", kMaxBatchSize, " (examples per worker and step)"));
  }
  if (tr.intra_op_threads() > kMaxIntraOpThreads) {
    v->Error({{"training"}, {"intra_op_threads"}}, absl::StrCat("must be <= ", kMaxIntraOpThreads));
  }
  if (tr.has_dense_compression()) {
    const float ratio = tr.dense_compression().ratio();
    if (!(ratio > 0.0f && ratio <= 1.0f)) {  // NaN too.
      v->Error({{"training"}, {"dense_compression"}, {"ratio"}},
               absl::StrCat("must be in (0, 1] (the share of the dense gradient sent "
                            "each step), got ",
                            ratio));
    }
  }
  const bool periodic = PeriodicEvaluation(tr);
  // Which field turns periodic evaluation on, for the errors below.
  const char* const every = tr.eval_every_steps() > 0 ? "eval_every_steps" : "eval_every_epochs";
  if (!(tr.eval_every_epochs() >= 0 && tr.eval_every_epochs() <= kMaxEvalEveryEpochs)) {
    v->Error({{"training"}, {"eval_every_epochs"}},
             absl::StrCat("must be in [0, ", kMaxEvalEveryEpochs,
                          "] (epochs between evaluations; 0 = off), got ", tr.eval_every_epochs()));
  }
  if (tr.eval_every_steps() > 0 && tr.eval_every_epochs() > 0) {
    v->Error({{"training"}, {"eval_every_epochs"}},
             "set eval_every_steps (clocks) or eval_every_epochs, not both");
  }
  if (periodic && c.checkpoint().dir().empty()) {
    v->Error({{"training"}, {every}}, "periodic evaluation reads checkpoints: set checkpoint.dir");
  }
  if (periodic && d.eval_files_size() == 0 && d.train_files_size() > 0) {
    v->Error({{"training"}, {every}},
             "periodic evaluation needs data.eval_files (or generated data)");
  }
  if (tr.has_early_stopping()) {
    const EarlyStoppingConfig& es = tr.early_stopping();
    if (!periodic) {
      v->Error({{"training"}, {"early_stopping"}},
               "needs training.eval_every_steps or eval_every_epochs > 0");
    }
    if (es.patience() == 0) {
      v->Error({{"training"}, {"early_stopping"}, {"patience"}},
               "must be >= 1 (evaluations without improvement before the job stops)");
    }
    if (!(es.min_delta() >= 0.0 && es.min_delta() <= 1.0)) {  // NaN too.
      v->Error({{"training"}, {"early_stopping"}, {"min_delta"}},
               absl::StrCat("must be in [0, 1] (an AUC gain), got ", es.min_delta()));
    }
  }
  if (tr.has_cache() && k.mode() == SSP && k.staleness() >= 1 &&
      tr.cache().staleness() > static_cast<uint32_t>(k.staleness())) {
    v->Error({{"training"}, {"cache"}, {"staleness"}},
             absl::StrCat("must be <= cluster.staleness (", k.staleness(),
                          "): a cached row must be as fresh as a pull under SSP (0 = the "
                          "same)"));
  }
  if (!TrainingConfig::Precision_IsValid(tr.mixed_precision())) {
    v->Error({{"training"}, {"mixed_precision"}}, "must be FP32, BF16 or FP16");
  }
  const LrScheduleConfig& lr = tr.lr_schedule();
  if (!(lr.min_scale() >= 0 && lr.min_scale() <= 1)) {  // NaN too.
    v->Error({{"training"}, {"lr_schedule"}, {"min_scale"}},
             absl::StrCat("must be in [0, 1] (the last step's share of the rate), got ",
                          lr.min_scale()));
  }
  if (!(lr.step_gamma() >= 0 && lr.step_gamma() <= 1)) {
    v->Error({{"training"}, {"lr_schedule"}, {"step_gamma"}},
             absl::StrCat("must be in [0, 1] (0: 0.1), got ", lr.step_gamma()));
  }
}

absl::Status FinalizeWith(JobConfig* config, const std::string& filename,
                          const TextFormat::ParseInfoTree* tree) {
  FillDefaults(config);
  Validator v(*config, filename, tree);
  ValidateTables(*config, &v);
  ValidateRest(*config, &v);
  ValidateCluster(*config, &v);
  ValidateData(*config, &v);
  ValidateTraining(*config, &v);
  return v.status();
}

}  // namespace

absl::StatusOr<JobConfig> ParseJobConfig(absl::string_view text, absl::string_view filename) {
  JobConfig config;
  ParseErrors errors(filename, text);
  TextFormat::ParseInfoTree tree;
  TextFormat::Parser parser;
  parser.RecordErrorsTo(&errors);
  parser.WriteLocationsTo(&tree);
  if (!parser.ParseFromString(std::string(text), &config)) {
    return absl::InvalidArgumentError(errors.Joined());
  }
  absl::Status st = FinalizeWith(&config, std::string(filename), &tree);
  if (!st.ok()) return st;
  return config;
}

absl::StatusOr<JobConfig> LoadJobConfig(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot read job config"));
  std::stringstream buf;
  buf << in.rdbuf();
  return ParseJobConfig(buf.str(), path);
}

absl::Status FinalizeJobConfig(JobConfig* config) { return FinalizeWith(config, "", nullptr); }

bool PeriodicEvaluation(const TrainingConfig& training) {
  return training.eval_every_steps() > 0 || training.eval_every_epochs() > 0;
}

uint64_t ConfigFingerprint(const JobConfig& config) {
  JobConfig shared;
  *shared.mutable_tables() = config.tables();
  *shared.mutable_fields() = config.fields();
  *shared.mutable_model() = config.model();
  shared.mutable_cluster()->set_num_partitions(config.cluster().num_partitions());
  shared.mutable_cluster()->set_num_servers(config.cluster().num_servers());
  // Only when the job may grow: the fingerprints of other jobs stay as they were.
  if (config.cluster().max_servers() > config.cluster().num_servers()) {
    shared.mutable_cluster()->set_max_servers(config.cluster().max_servers());
  }
  shared.mutable_cluster()->set_num_workers(config.cluster().num_workers());
  shared.mutable_cluster()->set_mode(config.cluster().mode());
  shared.mutable_cluster()->set_staleness(config.cluster().staleness());
  shared.mutable_cluster()->set_dense_chunk_size(config.cluster().dense_chunk_size());
  std::string bytes;
  google::protobuf::io::StringOutputStream stream(&bytes);
  {
    google::protobuf::io::CodedOutputStream out(&stream);
    out.SetSerializationDeterministic(true);
    shared.SerializeToCodedStream(&out);
  }
  uint64_t h = 0x243f6a8885a308d3ULL;
  for (unsigned char ch : bytes) h = Mix64(h ^ ch);
  return Mix64(h ^ bytes.size());
}

uint64_t UnsizedDenseTableSize(const JobConfig& config) {
  const uint64_t chunk =
      config.cluster().dense_chunk_size() > 0 ? config.cluster().dense_chunk_size() : 4096;
  const uint64_t message = config.cluster().max_message_bytes() > 0
                               ? config.cluster().max_message_bytes()
                               : uint64_t{64} << 20;
  return std::max<uint64_t>(1, message / sizeof(float) / chunk) * chunk;
}

const TableConfig* FindTable(const JobConfig& config, absl::string_view name) {
  for (const TableConfig& t : config.tables()) {
    if (t.name() == name) return &t;
  }
  return nullptr;
}

uint32_t EffectiveStaleness(const ClusterConfig& cluster) {
  switch (cluster.mode()) {
    case BSP:
      return 0;
    case ASP:
      return std::numeric_limits<uint32_t>::max();
    default:
      return static_cast<uint32_t>(cluster.staleness());
  }
}

ClusterConfig::OnWorkerLoss EffectiveOnWorkerLoss(const ClusterConfig& cluster) {
  if (cluster.on_worker_loss() != ClusterConfig::ON_WORKER_LOSS_UNSPECIFIED) {
    return cluster.on_worker_loss();
  }
  return cluster.mode() == BSP ? ClusterConfig::WAIT : ClusterConfig::REASSIGN;
}

}  // namespace shardps

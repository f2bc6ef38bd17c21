// ps_model_spec: the shape of a job's model, as the workers resolve it.
//
//   ps_model_spec --config job.pbtxt            prints the shape as JSON
//   ps_model_spec --config job.pbtxt --check    loads the job's model as a
//                                               worker does, prints one line
//
// The JSON (models/script.py reads it to size a model for the job):
//
//   {"num_dense": 13, "fields": [{"name": "C1", "table": "categorical",
//     "dim": 16, "pooling": "SUM", "wide": false}, ...],
//    "bottom_mlp": [64, 16], "top_mlp": [64, 32]}
//
// fields in the config's order (with no `fields`, the 26 Criteo columns on
// the first SPARSE table, then on model.wide_table if set: config.proto),
// "wide" for the fields of model.wide_table. --check creates the model on
// the CPU (a TORCHSCRIPT module loaded and checked, its dense table's size
// against the module's) and prints its description, or the refusal.
// Exit status 0, 1 if the model is refused, 2 on a bad config.
#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/config.h"
#include "common/init.h"
#include "worker/model/model.h"
#include "worker/model/model_factory.h"

ABSL_FLAG(std::string, config, "", "The job config.");
ABSL_FLAG(bool, check, false, "Load the job's model as a worker does and say what it is.");

namespace {

std::string Quoted(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    if (c == '"' || c == '\\') {
      out += '\\';
      out += c;
    } else if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else {
      out += c;
    }
  }
  return out + "\"";
}

std::string Json(const shardps::ModelSpec& spec) {
  std::vector<std::string> fields;
  for (const shardps::FieldSpec& f : spec.fields) {
    const shardps::TableSpec& t = spec.tables[f.table];
    fields.push_back(
        absl::StrCat("{\"name\": ", Quoted(f.name), ", \"table\": ", Quoted(t.name),
                     ", \"dim\": ", t.dim, ", \"pooling\": \"", f.mean_pooling ? "MEAN" : "SUM",
                     "\", \"wide\": ", f.table == spec.wide_table ? "true" : "false", "}"));
  }
  return absl::StrCat("{\"num_dense\": ", spec.num_dense, ",\n \"fields\": [\n  ",
                      absl::StrJoin(fields, ",\n  "), "],\n \"bottom_mlp\": [",
                      absl::StrJoin(spec.bottom_mlp, ", "), "],\n \"top_mlp\": [",
                      absl::StrJoin(spec.top_mlp, ", "), "]}\n");
}

}  // namespace

int main(int argc, char** argv) {
  shardps::InitProcess(argc, argv, "ps_model_spec --config job.pbtxt [--check]");
  auto config = shardps::LoadJobConfig(absl::GetFlag(FLAGS_config));
  if (!config.ok()) {
    std::fprintf(stderr, "%s\n", std::string(config.status().message()).c_str());
    return 2;
  }
  if (absl::GetFlag(FLAGS_check)) {
    auto model = shardps::CreateModel(*config, c10::Device(c10::DeviceType::CPU));
    if (!model.ok()) {
      std::fprintf(stderr, "%s\n", std::string(model.status().message()).c_str());
      return 1;
    }
    std::printf("%s\n", (*model)->DebugString().c_str());
    return 0;
  }
  auto spec = shardps::ModelSpecFromConfig(*config);
  if (!spec.ok()) {
    std::fprintf(stderr, "%s\n", std::string(spec.status().message()).c_str());
    return 2;
  }
  std::fputs(Json(*spec).c_str(), stdout);
  return 0;
}

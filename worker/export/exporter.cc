#include "worker/export/exporter.h"

#include <algorithm>
#include <numeric>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/checkpoint/file_io.h"
#include "common/config.h"
#include "common/status_macros.h"
#include "server/table_store.h"
#include "worker/export/dense_export.h"

namespace shardps {
namespace exporter {
namespace {

// Keys (sorted) and weights (the first dim floats of each payload) of a
// table. Memory: two copies of the weights while sorting.
void SortedRows(const Table& table, std::vector<uint64_t>* keys, std::vector<float>* weights) {
  const uint32_t dim = table.dim();
  std::vector<uint64_t> seen_keys;
  std::vector<float> seen_rows;
  table.ForEachRow([&](uint64_t key, const float* payload) {
    seen_keys.push_back(key);
    seen_rows.insert(seen_rows.end(), payload, payload + dim);
  });
  std::vector<size_t> order(seen_keys.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(),
            [&seen_keys](size_t a, size_t b) { return seen_keys[a] < seen_keys[b]; });
  keys->resize(order.size());
  weights->resize(order.size() * dim);
  for (size_t i = 0; i < order.size(); ++i) {
    (*keys)[i] = seen_keys[order[i]];
    std::copy_n(seen_rows.begin() + order[i] * dim, dim, weights->begin() + i * dim);
  }
}

// The flat dense buffer from the dense table's chunk rows.
absl::StatusOr<std::vector<float>> DenseBuffer(const JobConfig& config, const TableStore& store,
                                               int64_t num_dense_params) {
  const TableConfig* dense = FindTable(config, config.model().dense_table());
  const Table* table = dense ? store.FindTable(dense->id()) : nullptr;
  if (table == nullptr) {
    return absl::FailedPreconditionError("model.dense_table names no table of the job");
  }
  const uint64_t chunk = table->dim();
  const uint64_t chunks = (num_dense_params + chunk - 1) / chunk;
  std::vector<float> flat(chunks * chunk, 0.0f);
  std::vector<bool> seen(chunks, false);
  table->ForEachRow([&](uint64_t key, const float* payload) {
    if (key >= chunks) return;
    std::copy(payload, payload + chunk, flat.begin() + key * chunk);
    seen[key] = true;
  });
  for (uint64_t c = 0; c < chunks; ++c) {
    if (!seen[c]) {
      return absl::FailedPreconditionError(
          absl::StrCat("dense table \"", dense->name(), "\" has no chunk ", c));
    }
  }
  flat.resize(num_dense_params);
  return flat;
}

std::string ManifestHeader(const JobConfig& config, const ModelSpec& spec,
                           const LoadedCheckpoint& ckpt, int64_t num_dense_params,
                           const std::vector<DenseTensor>& tensors) {
  std::string m = "format: shardps-export 1\n";
  absl::StrAppend(&m, "job: ", config.name(), "\ncheckpoint: ", ckpt.dir, "\nclock: ", ckpt.clock,
                  "\n");
  absl::StrAppend(&m, "model: DLRM num_dense=", spec.num_dense, " fields=", spec.fields.size(),
                  " bottom_mlp=", absl::StrJoin(spec.bottom_mlp, ","),
                  " top_mlp=", absl::StrJoin(spec.top_mlp, ","), "\n");
  absl::StrAppend(&m, "dense_file: ", kDenseFileName, "\ndense_params: ", num_dense_params, "\n");
  for (const DenseTensor& t : tensors) {
    absl::StrAppend(&m, "dense_tensor: ", t.name, " shape=", absl::StrJoin(t.shape, "x"),
                    " offset=", t.offset, "\n");
  }
  return m;
}

std::string ManifestTableLine(const TableConfig& tc, uint64_t rows,
                              const WrittenEmbeddingFile& file) {
  return absl::StrCat("table: id=", tc.id(), " name=", tc.name(), " dim=", tc.dim(), " rows=", rows,
                      " file=", EmbeddingFileName(tc.id()), " size=", file.size,
                      " crc32c=", absl::Hex(file.crc32c, absl::kZeroPad8),
                      " init=", InitializerConfig::Kind_Name(tc.init().kind()),
                      " scale=", tc.init().scale(), " value=", tc.init().value(),
                      " seed=", tc.seed(), "\n");
}

}  // namespace

std::string EmbeddingFileName(uint32_t table_id) {
  return absl::StrCat("table-", table_id, ".emb");
}

std::string UnadmittedFileName(uint32_t table_id) {
  return absl::StrCat("table-", table_id, "-unadmitted.emb");
}

absl::StatusOr<ExportSummary> ExportModel(const JobConfig& config, const ModelSpec& spec,
                                          int64_t num_dense_params, const TableStore& store,
                                          const LoadedCheckpoint& checkpoint,
                                          const std::string& out_dir) {
  RETURN_IF_ERROR(checkpoint::MakeDir(out_dir));
  ASSIGN_OR_RETURN(const std::vector<DenseTensor> tensors, DenseTensors(spec, num_dense_params));
  ASSIGN_OR_RETURN(const std::vector<float> flat, DenseBuffer(config, store, num_dense_params));
  RETURN_IF_ERROR(SaveDenseTensors(checkpoint::JoinPath(out_dir, kDenseFileName), tensors, flat));

  ExportSummary summary;
  summary.dense_params = num_dense_params;
  std::string manifest = ManifestHeader(config, spec, checkpoint, num_dense_params, tensors);
  std::vector<uint64_t> keys;
  std::vector<float> weights;
  for (const Table* table : store.tables()) {
    if (table->dense()) continue;
    SortedRows(*table, &keys, &weights);
    EmbeddingFileHeader header;
    header.table_id = table->id();
    header.table_name = table->config().name();
    header.dim = table->dim();
    header.clock = checkpoint.clock;
    header.job_name = config.name();
    const std::string path = checkpoint::JoinPath(out_dir, EmbeddingFileName(table->id()));
    ASSIGN_OR_RETURN(WrittenEmbeddingFile file, WriteEmbeddingFile(path, header, keys, weights));
    manifest += ManifestTableLine(table->config(), keys.size(), file);
    summary.rows += keys.size();
    summary.tables.push_back(std::move(file));
    if (!table->has_shared_rows()) continue;
    // Row p: partition p's shared row (keys are the partitions, increasing).
    keys.clear();
    weights.clear();
    table->ForEachSharedRow(std::nullopt, [&](uint32_t p, uint64_t, const float* payload) {
      keys.push_back(p);
      weights.insert(weights.end(), payload, payload + table->dim());
    });
    const std::string shared_path = checkpoint::JoinPath(out_dir, UnadmittedFileName(table->id()));
    ASSIGN_OR_RETURN(WrittenEmbeddingFile shared,
                     WriteEmbeddingFile(shared_path, header, keys, weights));
    absl::StrAppend(&manifest, "unadmitted: table=", table->id(),
                    " file=", UnadmittedFileName(table->id()), " size=", shared.size,
                    " crc32c=", absl::Hex(shared.crc32c, absl::kZeroPad8),
                    " num_partitions=", keys.size(), "\n");
    summary.unadmitted.push_back(std::move(shared));
  }
  summary.manifest_path = checkpoint::JoinPath(out_dir, kExportManifestName);
  RETURN_IF_ERROR(checkpoint::WriteFileAtomically(summary.manifest_path, manifest));
  return summary;
}

}  // namespace exporter
}  // namespace shardps

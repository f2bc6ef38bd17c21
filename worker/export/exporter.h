// Exporting a restored checkpoint for serving (ps_export).
//
// Writes into an output directory (created if missing; files are written
// atomically, an existing export of the same names is replaced):
//
//   dense.pt             the dense (MLP) weights as named LibTorch tensors
//                        (dense_export.h: names, shapes, how to load)
//   table-<id>.emb       one per SPARSE table: every row of the checkpoint
//                        (the weights only, no optimizer state), keys sorted,
//                        in the versioned format of embedding_file.h
//   table-<id>-unadmitted.emb
//                        one per SPARSE table with shared unadmitted rows
//                        (admission, server/table.h): in the same format,
//                        row p is partition p's shared row, keys 0..P-1
//   manifest.txt         "key: value" lines describing all of it (below)
//
// manifest.txt:
//
//   format: shardps-export 1
//   job: <job name>
//   checkpoint: <checkpoint dir>
//   clock: <C>                       the cut: pushes of steps < C
//   model: DLRM num_dense=13 fields=26 bottom_mlp=32,8 top_mlp=32
//   dense_file: dense.pt
//   dense_params: <n>
//   dense_tensor: <name> shape=<a>x<b> offset=<o>           one per tensor
//   table: id=<id> name=<name> dim=<d> rows=<n> file=table-<id>.emb
//          size=<bytes> crc32c=<hex> init=<kind> scale=<s> value=<v> seed=<seed>
//                                    (one line per sparse table)
//   unadmitted: table=<id> file=table-<id>-unadmitted.emb size=<bytes>
//          crc32c=<hex> num_partitions=<P>   (tables with shared rows only)
//
// A key absent from a table file reads, as evaluation pulls do, the table's
// shared unadmitted row of its partition if the table has an "unadmitted"
// line: row PartitionOf(id, key, P) of that file (common/partition.h);
// otherwise the table's initial value (init/scale/value/seed above;
// server/initializer.h).
//
// Thread-compatible; reads the store (nothing may write it meanwhile).
#ifndef SHARDPS_WORKER_EXPORT_EXPORTER_H_
#define SHARDPS_WORKER_EXPORT_EXPORTER_H_

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/config.pb.h"
#include "worker/export/checkpoint_loader.h"
#include "worker/export/embedding_file.h"
#include "worker/model/model.h"

namespace shardps {

class TableStore;

namespace exporter {

inline constexpr char kDenseFileName[] = "dense.pt";
inline constexpr char kExportManifestName[] = "manifest.txt";

// "table-<id>.emb".
std::string EmbeddingFileName(uint32_t table_id);
// "table-<id>-unadmitted.emb".
std::string UnadmittedFileName(uint32_t table_id);

struct ExportSummary {
  std::vector<WrittenEmbeddingFile> tables;  // In table id order.
  // The shared unadmitted rows' files, in table id order.
  std::vector<WrittenEmbeddingFile> unadmitted;
  uint64_t rows = 0;  // Embedding rows written.
  int64_t dense_params = 0;
  std::string manifest_path;
};

// Exports `store` (restored from `checkpoint` of job `config`) into
// `out_dir`. `spec` and `num_dense_params` describe the model
// (ModelSpecFromConfig, Model::NumDenseParams). Errors name the file.
absl::StatusOr<ExportSummary> ExportModel(const JobConfig& config, const ModelSpec& spec,
                                          int64_t num_dense_params, const TableStore& store,
                                          const LoadedCheckpoint& checkpoint,
                                          const std::string& out_dir);

}  // namespace exporter
}  // namespace shardps

#endif  // SHARDPS_WORKER_EXPORT_EXPORTER_H_

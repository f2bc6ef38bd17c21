// A step's parameters (internal to worker/trainer): the pulls and pushes of
// a prepared batch against the ParamStore, and the model inputs it makes.
//
// A step pulls its batch's unique rows of every model table and every chunk
// of the dense weights (the dense table holds the flat MLP weights as rows
// of `chunk` floats, keys 0 .. num_chunks - 1), and pushes one gradient per
// unique key and the whole dense gradient (fp32 on the wire).
//
// Thread-safety: as the ParamStore's (ops may run concurrently); the
// buffers of one Prepared step belong to one op at a time.
#ifndef SHARDPS_WORKER_TRAINER_PARAMS_H_
#define SHARDPS_WORKER_TRAINER_PARAMS_H_

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "worker/dense_compression.h"
#include "worker/model/model.h"
#include "worker/param_store.h"
#include "worker/trainer_data.h"

namespace shardps {
namespace trainer_internal {

class StepParams {
 public:
  // `store` and `model` are not owned and must outlive this.
  // `compression_ratio` > 0: the dense gradient is pushed top-k compressed
  // with error feedback (worker/dense_compression.h), as sparse gradients.
  StepParams(ParamStore* store, const Model* model, uint32_t dense_table, uint32_t chunk,
             float compression_ratio = 0.0f);

  uint32_t dense_table() const { return dense_table_; }
  uint32_t chunk() const { return chunk_; }
  uint64_t num_chunks() const { return num_chunks_; }
  const std::vector<uint64_t>& chunk_keys() const { return chunk_keys_; }
  ParamStore* store() const { return store_; }

  // Starts the pull of p's unique rows and of every dense chunk into p's
  // buffers, as of `step`.
  std::unique_ptr<PsClient::Op> StartPull(Prepared* p, PullPurpose purpose, uint64_t step);

  // The model's inputs for p (its pull done). Points into p.
  ModelInputs Inputs(Prepared* p) const;

  // Starts the push of r's gradients for p's unique rows and of the dense
  // gradient, copied (or compressed) into `dense_buf` (whole chunks). p, r
  // and dense_buf must stay untouched until the op's Wait() returns. Pushes
  // are compressed in the order StartPush is called.
  std::unique_ptr<PsClient::Op> StartPush(Prepared* p, uint64_t step, float lr_scale,
                                          const StepResult& r, std::vector<float>* dense_buf);
  // StartPush in two halves: the dense gradient as it will be pushed
  // (copied, or compressed: call in step order), then the send, which may
  // run on another thread.
  void PrepareDense(const StepResult& r, std::vector<float>* dense_buf);
  std::unique_ptr<PsClient::Op> SendPush(Prepared* p, uint64_t step, float lr_scale,
                                         const StepResult& r, const std::vector<float>& dense_buf);

  // Writes `init` (num_chunks() * chunk() floats) as the dense rows where
  // they are missing.
  absl::Status InitDense(const float* init);

 private:
  ParamStore* const store_;
  const Model* const model_;
  const uint32_t dense_table_;
  const uint32_t chunk_;
  const uint64_t num_chunks_;
  std::vector<uint64_t> chunk_keys_;
  std::unique_ptr<DenseCompressor> compressor_;  // Null: pushed in full.
};

}  // namespace trainer_internal
}  // namespace shardps

#endif  // SHARDPS_WORKER_TRAINER_PARAMS_H_

#include "worker/trainer_data.h"

#include <utility>

namespace shardps {
namespace trainer_internal {

void Preparer::Prepare(Prepared* p) {
  const size_t num_tables = spec_.tables.size();
  p->unique_keys.resize(num_tables);
  p->rows.resize(num_tables);
  p->indices.resize(spec_.fields.size());
  for (size_t t = 0; t < num_tables; ++t) {
    size_t total = 0;
    for (size_t f = 0; f < spec_.fields.size(); ++f) {
      if (spec_.fields[f].table == static_cast<int>(t)) total += p->batch.fields[f].keys.size();
    }
    KeyDeduper& d = dedup_[t];
    d.Reset(total);
    for (size_t f = 0; f < spec_.fields.size(); ++f) {
      if (spec_.fields[f].table != static_cast<int>(t)) continue;
      const size_t start = d.inverse().size();
      d.Add(p->batch.fields[f].keys);
      p->indices[f].assign(d.inverse().begin() + start, d.inverse().end());
    }
    p->unique_keys[t] = d.unique_keys();
    p->rows[t].resize(d.unique_keys().size() * spec_.tables[t].dim);
  }
}

DataPipeline::DataPipeline(std::unique_ptr<data::CriteoReader> reader, const ModelSpec& spec,
                           int batch_size, int depth)
    : reader_(std::move(reader)),
      preparer_(spec),
      batch_size_(batch_size),
      num_dense_(static_cast<int>(spec.num_dense)),
      num_fields_(spec.fields.size()) {
  for (int i = 0; i < depth; ++i) free_.push_back(std::make_unique<Prepared>());
  thread_ = std::thread([this] { Loop(); });
}

DataPipeline::~DataPipeline() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
    changed_.SignalAll();
  }
  thread_.join();
}

absl::StatusOr<std::unique_ptr<Prepared>> DataPipeline::Next() {
  MutexLock lock(&mu_);
  while (ready_.empty() && !finished_) changed_.Wait(&mu_);
  if (!ready_.empty()) {
    auto p = std::move(ready_.front());
    ready_.pop_front();
    changed_.SignalAll();
    return p;
  }
  if (!status_.ok()) return status_;
  return std::unique_ptr<Prepared>();
}

void DataPipeline::Recycle(std::unique_ptr<Prepared> p) {
  if (!p) return;
  MutexLock lock(&mu_);
  free_.push_back(std::move(p));
  changed_.SignalAll();
}

void DataPipeline::Loop() {
  while (true) {
    std::unique_ptr<Prepared> p;
    {
      MutexLock lock(&mu_);
      while (free_.empty() && !stop_) changed_.Wait(&mu_);
      if (stop_) return;
      p = std::move(free_.back());
      free_.pop_back();
    }
    p->batch.Reset(num_dense_, num_fields_);
    auto more = reader_->NextBatch(batch_size_, &p->batch);
    if (more.ok() && *more) preparer_.Prepare(p.get());
    MutexLock lock(&mu_);
    if (!more.ok() || !*more) {
      status_ = more.status();
      finished_ = true;
      changed_.SignalAll();
      return;
    }
    ready_.push_back(std::move(p));
    changed_.SignalAll();
  }
}

}  // namespace trainer_internal
}  // namespace shardps

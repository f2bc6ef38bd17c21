#include "server/version_log.h"

#include <algorithm>
#include <cstring>

#include "server/table.h"

namespace shardps {

std::shared_ptr<const VersionPart> MakeVersionPart(const StoreSnapshot& snapshot,
                                                   const TableStore& store, uint64_t clock,
                                                   uint64_t generation, uint64_t base_clock,
                                                   uint64_t base_generation, uint32_t server_index,
                                                   absl::Time cut) {
  auto part = std::make_shared<VersionPart>();
  part->set_clock(clock);
  part->set_generation(generation);
  part->set_full(!snapshot.delta());
  if (snapshot.delta()) {
    part->set_base_clock(base_clock);
    part->set_base_generation(base_generation);
  }
  part->set_server_index(server_index);
  part->set_num_partitions(snapshot.num_partitions());
  for (uint32_t p : snapshot.partitions()) part->add_partitions(p);
  part->set_cut_unix_micros(absl::ToUnixMicros(cut));
  for (size_t t = 0; t < snapshot.table_ids().size(); ++t) {
    const Table* table = store.FindTable(snapshot.table_ids()[t]);
    const size_t dim = table->dim();
    const size_t stride = snapshot.stride(t);
    size_t rows = 0, deleted = 0;
    for (size_t i = 0; i < snapshot.partitions().size(); ++i) {
      rows += snapshot.rows_of(i, t).keys.size();
      deleted += snapshot.rows_of(i, t).deleted.size();
    }
    VersionRows* out = part->add_tables();
    out->set_table_id(snapshot.table_ids()[t]);
    out->set_dim(static_cast<uint32_t>(dim));
    out->mutable_keys()->Reserve(static_cast<int>(rows));
    out->mutable_deleted()->Reserve(static_cast<int>(deleted));
    std::string* weights = out->mutable_weights();
    weights->resize(rows * dim * sizeof(float));
    char* w = weights->data();
    for (size_t i = 0; i < snapshot.partitions().size(); ++i) {
      const StoreSnapshot::Rows& r = snapshot.rows_of(i, t);
      for (uint64_t key : r.deleted) out->add_deleted(key);
      for (size_t k = 0; k < r.keys.size(); ++k) {
        out->add_keys(r.keys[k]);
        // The weights lead each row's payload.
        std::memcpy(w, r.payloads.data() + k * stride, dim * sizeof(float));
        w += dim * sizeof(float);
      }
    }
  }
  return part;
}

bool VersionLog::wanted() const {
  MutexLock lock(&mu_);
  return wanted_;
}

void VersionLog::Publish(std::shared_ptr<const VersionPart> part) {
  const Key key(part->generation(), part->clock());
  const uint64_t size = part->ByteSizeLong();
  {
    MutexLock lock(&mu_);
    // A cut taken again at the same (generation, clock) replaces the part
    // before; one older than the newest (a generation that went back) drops
    // every newer part: they belong to a history the job left.
    while (!parts_.empty() && parts_.back().first >= key) {
      bytes_ -= parts_.back().second->ByteSizeLong();
      parts_.pop_back();
    }
    parts_.emplace_back(key, std::move(part));
    bytes_ += size;
    while (parts_.size() > kMaxParts || (parts_.size() > 1 && bytes_ > max_bytes_)) {
      bytes_ -= parts_.front().second->ByteSizeLong();
      parts_.pop_front();
    }
  }
  published_.SignalAll();
}

std::shared_ptr<const VersionPart> VersionLog::Next(uint64_t after_generation, uint64_t after_clock,
                                                    absl::Time deadline) {
  const Key after(after_generation, after_clock);
  MutexLock lock(&mu_);
  wanted_ = true;
  while (!stopped_) {
    for (const auto& [key, part] : parts_) {
      if (key > after) return part;
    }
    if (absl::Now() >= deadline) break;
    published_.WaitUntil(&mu_, deadline);
  }
  return nullptr;
}

void VersionLog::Stop() {
  {
    MutexLock lock(&mu_);
    stopped_ = true;
  }
  published_.SignalAll();
}

bool VersionLog::stopped() const {
  MutexLock lock(&mu_);
  return stopped_;
}

size_t VersionLog::parts() const {
  MutexLock lock(&mu_);
  return parts_.size();
}

uint64_t VersionLog::bytes() const {
  MutexLock lock(&mu_);
  return bytes_;
}

}  // namespace shardps

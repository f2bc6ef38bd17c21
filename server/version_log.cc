#include "server/version_log.h"

#include <algorithm>
#include <cstring>

#include "common/table_hash.h"
#include "server/table.h"

namespace shardps {

VersionChunks MakeVersionPart(const StoreSnapshot& snapshot, const TableStore& store,
                              uint64_t clock, uint64_t generation, uint64_t base_clock,
                              uint64_t base_generation, uint32_t server_index, absl::Time cut,
                              size_t max_chunk_bytes, std::optional<uint64_t> state_hash,
                              const std::vector<uint32_t>& push_ages) {
  if (max_chunk_bytes == 0) max_chunk_bytes = size_t{32} << 20;  // No limit configured.
  std::vector<std::shared_ptr<VersionPart>> chunks;
  size_t bytes = 0;  // Of the rows and deletions in the last chunk.
  const auto new_chunk = [&] {
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
    if (state_hash) part->set_state_hash(*state_hash);
    chunks.push_back(std::move(part));
    bytes = 0;
  };
  new_chunk();
  chunks.front()->mutable_push_ages_micros()->Add(push_ages.begin(), push_ages.end());
  for (size_t t = 0; t < snapshot.table_ids().size(); ++t) {
    const uint32_t id = snapshot.table_ids()[t];
    const size_t dim = store.FindTable(id)->dim();
    const size_t stride = snapshot.stride(t);
    const size_t row_bytes = sizeof(uint64_t) + dim * sizeof(float);
    VersionRows* out = nullptr;
    // The table's entry in the last chunk, a new chunk first when it is full.
    const auto room = [&](size_t need) -> VersionRows* {
      if (bytes > 0 && bytes + need > max_chunk_bytes) {
        new_chunk();
        out = nullptr;
      }
      if (out == nullptr) {
        out = chunks.back()->add_tables();
        out->set_table_id(id);
        out->set_dim(static_cast<uint32_t>(dim));
      }
      bytes += need;
      return out;
    };
    for (size_t i = 0; i < snapshot.partitions().size(); ++i) {
      const StoreSnapshot::Rows& r = snapshot.rows_of(i, t);
      for (uint64_t key : r.deleted) room(sizeof(uint64_t))->add_deleted(key);
      for (size_t k = 0; k < r.keys.size(); ++k) {
        VersionRows* rows = room(row_bytes);
        rows->add_keys(r.keys[k]);
        // The weights lead each row's payload.
        rows->mutable_weights()->append(
            reinterpret_cast<const char*>(r.payloads.data() + k * stride), dim * sizeof(float));
      }
    }
    if (out == nullptr) room(0);  // Every table named, even without rows.
  }
  VersionChunks result;
  for (size_t c = 0; c < chunks.size(); ++c) {
    chunks[c]->set_chunk(static_cast<uint32_t>(c));
    chunks[c]->set_num_chunks(static_cast<uint32_t>(chunks.size()));
    result.push_back(std::move(chunks[c]));
  }
  return result;
}

uint64_t SnapshotWeightsHash(const StoreSnapshot& snapshot, const TableStore& store) {
  TableHash hash;
  for (size_t t = 0; t < snapshot.table_ids().size(); ++t) {
    const uint32_t id = snapshot.table_ids()[t];
    const size_t dim = store.FindTable(id)->dim();
    const size_t stride = snapshot.stride(t);
    for (size_t i = 0; i < snapshot.partitions().size(); ++i) {
      const StoreSnapshot::Rows& r = snapshot.rows_of(i, t);
      for (size_t k = 0; k < r.keys.size(); ++k) {
        hash.Add(id, r.keys[k], r.payloads.data() + k * stride, dim);
      }
    }
  }
  return hash.value();
}

bool VersionLog::wanted() const { return wanted_.load(std::memory_order_relaxed); }

void ApplyStamps::Record(absl::Time applied) {
  const int64_t micros = absl::ToUnixMicros(applied);
  MutexLock lock(&mu_);
  ++recorded_;
  if (micros_.size() < kMaxSamples) {
    micros_.push_back(micros);
    return;
  }
  // Reservoir: the n-th stamp replaces a kept one with probability
  // kMaxSamples / n (splitmix64 steps; no seed needed for fairness).
  rng_ += 0x9e3779b97f4a7c15ull;
  uint64_t z = rng_;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  z ^= z >> 31;
  const uint64_t slot = z % recorded_;
  if (slot < kMaxSamples) micros_[slot] = micros;
}

std::vector<uint32_t> ApplyStamps::TakeAges(absl::Time cut) {
  const int64_t cut_micros = absl::ToUnixMicros(cut);
  std::vector<int64_t> stamps;
  {
    MutexLock lock(&mu_);
    stamps.swap(micros_);
    recorded_ = 0;
  }
  std::vector<uint32_t> ages;
  ages.reserve(stamps.size());
  for (int64_t t : stamps) {
    const int64_t age = std::clamp<int64_t>(cut_micros - t, 0, UINT32_MAX);
    ages.push_back(static_cast<uint32_t>(age));
  }
  return ages;
}

uint64_t ApplyStamps::recorded() const {
  MutexLock lock(&mu_);
  return recorded_;
}

bool VersionLog::hashes_wanted() const {
  MutexLock lock(&mu_);
  return hashes_wanted_;
}

void VersionLog::WantHashes() {
  MutexLock lock(&mu_);
  hashes_wanted_ = true;
}

void VersionLog::Publish(VersionChunks part) {
  const Key key(part.front()->generation(), part.front()->clock());
  uint64_t size = 0;
  for (const auto& chunk : part) size += chunk->ByteSizeLong();
  {
    MutexLock lock(&mu_);
    // A cut taken again at the same (generation, clock) replaces the part
    // before; one older than the newest (a generation that went back) drops
    // every newer part: they belong to a history the job left.
    while (!parts_.empty() && parts_.back().key >= key) {
      bytes_ -= parts_.back().bytes;
      parts_.pop_back();
    }
    parts_.push_back({key, std::make_shared<const VersionChunks>(std::move(part)), size});
    bytes_ += size;
    while (parts_.size() > kMaxParts || (parts_.size() > 1 && bytes_ > max_bytes_)) {
      bytes_ -= parts_.front().bytes;
      parts_.pop_front();
    }
  }
  published_.SignalAll();
}

std::shared_ptr<const VersionChunks> VersionLog::Next(uint64_t after_generation,
                                                      uint64_t after_clock, absl::Time deadline) {
  const Key after(after_generation, after_clock);
  MutexLock lock(&mu_);
  wanted_ = true;
  while (!stopped_) {
    for (const Kept& kept : parts_) {
      if (kept.key > after) return kept.chunks;
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

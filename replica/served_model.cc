#include "replica/served_model.h"

#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "common/table_hash.h"

namespace shardps {
namespace replica {

namespace {

// The table hash and row count of a model, kept up to date record by
// record: a sum, so a row leaves it by subtracting its RowHash and enters it
// by adding one (common/table_hash.h). A shared row always exists: it
// changes the hash, not the row count.
class RunningHash final : public exporter::RowObserver {
 public:
  RunningHash(uint64_t hash, uint64_t rows) : hash_(hash), rows_(rows) {}

  void Changed(const exporter::RowChange& c) override {
    if (c.before != nullptr) {
      hash_ -= RowHash(c.table_id, c.key, c.before, c.dim);
      if (!c.shared) --rows_;
    }
    if (c.after != nullptr) {
      hash_ += RowHash(c.table_id, c.key, c.after, c.dim);
      if (!c.shared) ++rows_;
    }
  }

  uint64_t hash() const { return hash_; }
  uint64_t rows() const { return rows_; }

 private:
  uint64_t hash_;
  uint64_t rows_;
};

}  // namespace

ServedModel::ServedModel(std::string job_name, uint32_t num_partitions,
                         std::unique_ptr<exporter::LocalModel> model)
    : job_name_(std::move(job_name)), num_partitions_(num_partitions), model_(std::move(model)) {}

ServedModel::~ServedModel() = default;

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Empty(const JobConfig& config) {
  ASSIGN_OR_RETURN(std::unique_ptr<exporter::LocalModel> model,
                   exporter::LocalModel::Create(config));
  return std::unique_ptr<ServedModel>(
      new ServedModel(config.name(), config.cluster().num_partitions(), std::move(model)));
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Load(const JobConfig& config,
                                                               const std::string& root,
                                                               uint64_t clock) {
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Empty(config));
  ASSIGN_OR_RETURN(m->dir_, m->model_->Restore(root, clock));
  m->clock_ = clock;
  m->Index();
  return m;
}

absl::StatusOr<std::vector<ServedModel::Link>> ServedModel::ReadDeltas(
    const checkpoint::ResolvedCheckpoint& next, size_t first, uint64_t* bytes_read) const {
  const size_t n = next.chain.size();
  if (first == 0 || first >= n || next.chain_dirs.size() != n) {
    return absl::InvalidArgumentError(absl::StrCat(next.dir, ": links ", first, ".. of a chain of ",
                                                   n, " do not continue version ", clock_));
  }
  if (next.manifest.job_name() != job_name_) {
    return absl::FailedPreconditionError(absl::StrCat(next.dir, ": checkpoint of job \"",
                                                      next.manifest.job_name(),
                                                      "\", this job is \"", job_name_, "\""));
  }
  for (size_t i = first; i < n; ++i) {
    const uint64_t base = i == first ? clock_ : next.chain[i - 1].clock();
    if (next.chain[i].kind() != checkpoint::CheckpointManifest::DELTA ||
        next.chain[i].base_id() != checkpoint::CheckpointId(base)) {
      return absl::InvalidArgumentError(absl::StrCat(next.chain_dirs[i], ": not a delta on ",
                                                     checkpoint::CheckpointId(base),
                                                     " (version served: ", clock_, ")"));
    }
  }
  return model_->ReadLinks(next, first, bytes_read);
}

absl::Status ServedModel::Advance(const checkpoint::ResolvedCheckpoint& next,
                                  absl::Span<const Link> links) {
  const size_t n = next.chain.size();
  if (links.empty() || links.size() >= n || next.chain[n - links.size() - 1].clock() != clock_) {
    return absl::InvalidArgumentError(
        absl::StrCat(next.dir, ": ", links.size(), " links do not continue version ", clock_));
  }
  RunningHash hash(table_hash_, rows_);
  for (const Link& link : links) model_->Apply(*link, &hash);
  model_->SetClock(next.manifest.clock());
  clock_ = next.manifest.clock();
  dir_ = next.dir;
  table_hash_ = hash.hash();
  rows_ = hash.rows();
  return CheckRunningHash(next.dir);
}

absl::Status ServedModel::CatchUp(absl::Span<const Link> catch_up, const ServedModel& to,
                                  const checkpoint::ResolvedCheckpoint& next,
                                  absl::Span<const Link> links) {
  const size_t n = next.chain.size();
  const size_t behind = catch_up.size() + links.size();
  if (links.empty() || behind >= n || next.chain[n - links.size() - 1].clock() != to.clock_ ||
      next.chain[n - behind - 1].clock() != clock_) {
    return absl::InvalidArgumentError(absl::StrCat(next.dir, ": ", catch_up.size(), " + ",
                                                   links.size(), " links do not lead from version ",
                                                   clock_, " through version ", to.clock_));
  }
  for (const Link& link : catch_up) model_->Apply(*link, nullptr);
  // The tables now equal `to`'s (the same chain): so do hash and rows.
  TakeVersionOf(to);
  return Advance(next, links);
}

void ServedModel::TakeVersionOf(const ServedModel& to) {
  clock_ = to.clock_;
  dir_ = to.dir_;
  table_hash_ = to.table_hash_;
  rows_ = to.rows_;
}

absl::Status ServedModel::CheckRunningHash(absl::string_view what) {
#ifndef NDEBUG
  // Debug builds (tests) check the running sum against a walk of every row.
  const uint64_t hash = table_hash_, rows = rows_;
  Index();
  if (hash != table_hash_ || rows != rows_) {
    return absl::InternalError(absl::StrCat(what, ": incremental table hash ", hash, " (", rows,
                                            " rows) differs from the walk's ", table_hash_, " (",
                                            rows_, " rows)"));
  }
#endif
  return absl::OkStatus();
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::Copy() const {
  ASSIGN_OR_RETURN(std::unique_ptr<exporter::LocalModel> model, model_->Copy());
  model->SetClock(clock_);
  std::unique_ptr<ServedModel> m(new ServedModel(job_name_, num_partitions_, std::move(model)));
  m->TakeVersionOf(*this);
  return m;
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::WithDeltas(
    const checkpoint::ResolvedCheckpoint& next, size_t first, uint64_t* bytes_read) const {
  ASSIGN_OR_RETURN(const std::vector<Link> links, ReadDeltas(next, first, bytes_read));
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Copy());
  RETURN_IF_ERROR(m->Advance(next, links));
  return m;
}

absl::Status ServedModel::CheckStreamPart(const VersionPart& part) const {
  const uint32_t parts = num_partitions_;
  const auto where = [&] {
    return absl::StrCat("version part of clock ", part.clock(), " from server ",
                        part.server_index());
  };
  if (part.num_partitions() != parts) {
    return absl::InvalidArgumentError(
        absl::StrCat(where(), ": ", part.num_partitions(), " partitions, this job has ", parts));
  }
  std::vector<bool> holds(parts, false);
  for (uint32_t p : part.partitions()) {
    if (p >= parts || holds[p]) {
      return absl::InvalidArgumentError(
          absl::StrCat(where(), ": partition ", p, " out of range or named twice"));
    }
    holds[p] = true;
  }
  if (part.push_ages_micros_size() > kMaxPushAges ||
      (part.chunk() != 0 && part.push_ages_micros_size() > 0)) {
    return absl::InvalidArgumentError(absl::StrCat(where(), ": ", part.push_ages_micros_size(),
                                                   " push ages in chunk ", part.chunk(),
                                                   " (at most ", kMaxPushAges, ", in chunk 0)"));
  }
  for (const VersionRows& rows : part.tables()) {
    const uint32_t dim = model_->TableDim(rows.table_id());
    if (dim == 0 || rows.dim() != dim) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": table ", rows.table_id(),
                                                     " of dim ", rows.dim(),
                                                     " is not a table of this job"));
    }
    if (rows.weights().size() != static_cast<size_t>(rows.keys_size()) * rows.dim() * 4) {
      return absl::InvalidArgumentError(absl::StrCat(where(), ": table ", rows.table_id(), " has ",
                                                     rows.keys_size(), " keys and ",
                                                     rows.weights().size(), " bytes of weights"));
    }
    for (const auto* keys : {&rows.keys(), &rows.deleted()}) {
      for (uint64_t key : *keys) {
        if (!holds[PartitionOf(rows.table_id(), key, parts)]) {
          return absl::InvalidArgumentError(
              absl::StrCat(where(), ": table ", rows.table_id(), " key ", key,
                           " is in a partition the part does not hold"));
        }
      }
    }
  }
  return absl::OkStatus();
}

// Per part and table, its deletions, then its rows (the weights, the
// optimizer state zero: a model serves weights only). The parts hold
// disjoint partitions, so their order does not matter.
void ServedModel::ApplyStream(const StreamVersion& version, exporter::RowObserver* observer) {
  for (const auto& part : version.parts) {
    for (const VersionRows& rows : part->tables()) model_->Apply(rows, observer);
  }
}

absl::StatusOr<std::unique_ptr<ServedModel>> ServedModel::FromStream(const JobConfig& config,
                                                                     const StreamVersion& full) {
  ASSIGN_OR_RETURN(std::unique_ptr<ServedModel> m, Empty(config));
  m->ApplyStream(full, nullptr);
  m->model_->SetClock(full.clock);
  m->clock_ = full.clock;
  m->Index();
  return m;
}

absl::Status ServedModel::AdvanceStream(absl::Span<const StreamLink> links) {
  if (links.empty()) return absl::InvalidArgumentError("no stream version to apply");
  RunningHash hash(table_hash_, rows_);
  for (const StreamLink& link : links) ApplyStream(*link, &hash);
  clock_ = links.back()->clock;
  model_->SetClock(clock_);
  dir_.clear();
  table_hash_ = hash.hash();
  rows_ = hash.rows();
  return CheckRunningHash(absl::StrCat("stream version ", clock_));
}

absl::Status ServedModel::CatchUpStream(absl::Span<const StreamLink> catch_up,
                                        const ServedModel& to, absl::Span<const StreamLink> links) {
  if (catch_up.empty() || catch_up.back()->clock != to.clock_) {
    return absl::InvalidArgumentError(
        absl::StrCat("stream versions from ", clock_, " do not lead to version ", to.clock_));
  }
  for (const StreamLink& link : catch_up) ApplyStream(*link, nullptr);
  // The tables now equal `to`'s: so do hash and rows.
  TakeVersionOf(to);
  return AdvanceStream(links);
}

void ServedModel::Index() {
  TableHash hash;
  model_->ForEachRow([&hash](uint32_t id, uint64_t key, const float* weights, uint32_t dim) {
    hash.Add(id, key, weights, dim);
  });
  table_hash_ = hash.value();
  rows_ = hash.rows();
}

}  // namespace replica
}  // namespace shardps

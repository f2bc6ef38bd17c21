// ParameterServerCore's checkpoints and restores (parameter_server_core.h
// has the contract; server/snapshot.h the file layout): the copy of a cut,
// its background write, delta bases, and Restore into a job generation.
#include <algorithm>
#include <functional>
#include <optional>
#include <thread>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "server/parameter_server_core.h"
#include "server/snapshot.h"

namespace shardps {

namespace {

// A root path without trailing '/', so requests name the same root alike.
std::string CanonicalRoot(std::string root) {
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

struct RestoreSource {
  std::string root;
  checkpoint::ResolvedCheckpoint checkpoint;
};

// The checkpoint a RestoreRequest names under `root`, with its delta chain
// resolved, every link's manifest loaded and checked (files present with
// their sizes; LoadOwnedChain checks the CRCs of the files this server
// reads).
absl::StatusOr<RestoreSource> ResolveRestore(const std::string& root,
                                             const RestoreRequest& request) {
  checkpoint::LoadManifestOptions options;
  options.verify_file_crcs = false;
  RestoreSource source;
  source.root = root;
  if (request.has_clock()) {
    ASSIGN_OR_RETURN(source.checkpoint, checkpoint::LoadCheckpoint(root, request.clock(), options));
  } else {
    ASSIGN_OR_RETURN(source.checkpoint, checkpoint::LatestComplete(root, options));
  }
  return source;
}

}  // namespace

void ParameterServerCore::SetCheckpointRoot(const std::string& root) {
  MutexLock lock(&checkpoint_mu_);
  checkpoint_root_ = root;
}

absl::StatusOr<std::string> ParameterServerCore::CheckpointRoot(const char* rpc) const {
  if (checkpoint_root_.empty()) {
    return absl::FailedPreconditionError(
        absl::StrCat(rpc, ": the job config of server ", server_index_,
                     " sets no checkpoint.dir (checkpoints are off)"));
  }
  return CanonicalRoot(checkpoint_root_);
}

std::vector<bool> ParameterServerCore::OwnedPartitions(const PartitionMap& map) const {
  std::vector<bool> owned(map.num_partitions());
  for (uint32_t p = 0; p < map.num_partitions(); ++p) {
    owned[p] = map.OwnerOfPartition(p) == server_index_;
  }
  return owned;
}

absl::Status ParameterServerCore::Checkpoint(const CheckpointRequest& request,
                                             CheckpointResponse* response) {
  if (request.delta() && request.base_clock() >= request.clock()) {
    return absl::InvalidArgumentError(absl::StrCat("Checkpoint: a delta at clock ", request.clock(),
                                                   " on base clock ", request.base_clock(),
                                                   " (the base must be older)"));
  }
  if (!CheckpointRequest::Phase_IsValid(request.phase())) {
    return absl::InvalidArgumentError(
        absl::StrCat("Checkpoint: unknown phase ", static_cast<int>(request.phase())));
  }
  if (config_.name().empty()) {
    return absl::FailedPreconditionError("Checkpoint: the job config has no name");
  }
  MutexLock checkpoint_lock(&checkpoint_mu_);
  ASSIGN_OR_RETURN(const std::string root, CheckpointRoot("Checkpoint"));
  RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
  if (request.phase() == CheckpointRequest::VERSION) return CutVersion(root, request);
  if (request.phase() != CheckpointRequest::COLLECT) {
    RETURN_IF_ERROR(StartCheckpointWrite(root, request, response));
    if (request.phase() == CheckpointRequest::COPY) return absl::OkStatus();
  }
  return CollectCheckpointWrite(request, response);
}

void ParameterServerCore::DropCheckpointWrite() {
  JoinVersionPublish();
  if (write_ == nullptr) return;
  write_->thread.join();
  LOG(WARNING) << "server " << server_index_ << ": checkpoint " << write_->dir
               << " was written but never collected (" << write_->status << ")";
  write_.reset();
}

void ParameterServerCore::JoinVersionPublish() {
  if (version_thread_.joinable()) version_thread_.join();
}

std::function<void()> ParameterServerCore::VersionPublisher(
    std::shared_ptr<const StoreSnapshot> snapshot, std::shared_ptr<const StoreSnapshot> whole,
    const CheckpointRequest& request, uint64_t base_generation, absl::Time cut,
    std::vector<uint32_t> push_ages) {
  return [this, snapshot = std::move(snapshot), whole = std::move(whole), clock = request.clock(),
          generation = request.generation(), base_clock = request.base_clock(), base_generation,
          cut, push_ages = std::move(push_ages)] {
    std::optional<uint64_t> state_hash;
    if (whole != nullptr) state_hash = SnapshotWeightsHash(*whole, *store_);
    versions_.Publish(MakeVersionPart(
        *snapshot, *store_, clock, generation, base_clock, base_generation, server_index_, cut,
        config_.cluster().max_message_bytes() / 2, state_hash, push_ages));
  };
}

absl::Status ParameterServerCore::CutVersion(const std::string& root,
                                             const CheckpointRequest& request) {
  if (!request.delta()) {
    return absl::InvalidArgumentError(
        "Checkpoint VERSION: a version between checkpoints is a delta on the last complete "
        "checkpoint (set delta and base_clock)");
  }
  JoinVersionPublish();  // Versions are published in the order they are cut.
  if (!versions_.wanted()) return absl::OkStatus();  // No replica follows.
  const std::vector<bool> owned = OwnedPartitions(*CurrentMap());
  ASSIGN_OR_RETURN(const CheckpointBase base, DeltaBase(root, request, owned));
  const bool hashes = versions_.hashes_wanted();
  std::shared_ptr<const StoreSnapshot> snapshot, whole;
  const absl::Time cut = absl::Now();
  std::vector<uint32_t> push_ages;
  // The store's generation is not advanced: rows written from now on are
  // still newer than the base, for the next delta on it.
  const auto copy = [&] {
    push_ages = apply_stamps_.TakeAges(cut);
    snapshot = StoreSnapshot::Take(*store_, owned, base.generation);
    if (hashes) whole = StoreSnapshot::Take(*store_, owned, std::nullopt);
  };
  if (bsp_) {
    RETURN_IF_ERROR(bsp_clocks_.AtClock(request.clock(), copy));
  } else {
    copy();
  }
  version_thread_ = std::thread(VersionPublisher(std::move(snapshot), std::move(whole), request,
                                                 base.job_generation, cut, std::move(push_ages)));
  return absl::OkStatus();
}

absl::Status ParameterServerCore::StartCheckpointWrite(const std::string& root,
                                                       const CheckpointRequest& request,
                                                       CheckpointResponse* response) {
  DropCheckpointWrite();
  const std::vector<bool> owned = OwnedPartitions(*CurrentMap());
  std::optional<uint32_t> since;
  uint64_t base_generation = 0;
  if (request.delta()) {
    ASSIGN_OR_RETURN(const CheckpointBase base, DeltaBase(root, request, owned));
    since = base.generation;
    base_generation = base.job_generation;
  }
  ASSIGN_OR_RETURN(const std::string dir, checkpoint::CreateCheckpointDir(root, request.clock()));
  std::shared_ptr<const StoreSnapshot> snapshot, whole;
  uint32_t generation = 0;
  const absl::Time cut = absl::Now();  // The copy's start: a version's cut time.
  // A follower that verifies gets the hash of every owned row; a full copy
  // is that already.
  const bool hashes = versions_.wanted() && versions_.hashes_wanted() && since.has_value();
  std::vector<uint32_t> push_ages;
  const auto copy = [&] {
    push_ages = apply_stamps_.TakeAges(cut);
    generation = store_->AdvanceGeneration();
    snapshot = StoreSnapshot::Take(*store_, owned, since);
    if (hashes) whole = StoreSnapshot::Take(*store_, owned, std::nullopt);
  };
  if (bsp_) {
    // Under the clock lock: no clock can be applied half-way through the copy.
    RETURN_IF_ERROR(bsp_clocks_.AtClock(request.clock(), copy));
  } else {
    copy();
  }
  if (!since && versions_.hashes_wanted()) whole = snapshot;
  // Rows changed from now on are newer than `generation`: a delta on this
  // checkpoint holds them (once the scheduler has made it complete).
  RememberBase({root, request.clock(), generation, owned, request.generation()});
  SnapshotWriteOptions options;
  options.dir = dir;
  options.job_name = config_.name();
  options.clock = request.clock();
  options.base_clock = request.base_clock();
  options.tables = TableSchemas(*store_);
  write_ = std::make_unique<CheckpointWrite>();
  write_->clock = request.clock();
  write_->dir = dir;
  write_->rows = snapshot->rows();
  CheckpointWrite* write = write_.get();
  // The cut is also a version for serving replicas (version_log.h), built
  // here, off the workers' hold, and before the files.
  std::function<void()> publish;
  if (versions_.wanted())
    publish =
        VersionPublisher(snapshot, whole, request, base_generation, cut, std::move(push_ages));
  write_->thread = std::thread([write, snapshot, options, publish = std::move(publish),
                                delay = checkpoint_write_delay_] {
    if (publish) publish();
    if (delay > absl::ZeroDuration()) absl::SleepFor(delay);
    absl::StatusOr<std::vector<checkpoint::WrittenFile>> files = WriteSnapshot(*snapshot, options);
    if (files.ok()) {
      write->files = std::move(*files);
    } else {
      write->status = files.status();
    }
  });
  response->set_checkpoint_dir(dir);
  response->set_rows(write_->rows);
  if (!since) {
    for (size_t i = 0; i < snapshot->partitions().size(); ++i) {
      uint64_t rows = 0, bytes = 0;
      for (size_t t = 0; t < snapshot->table_ids().size(); ++t) {
        const StoreSnapshot::Rows& r = snapshot->rows_of(i, t);
        rows += r.keys.size();
        bytes += r.keys.size() * sizeof(uint64_t) + r.payloads.size() * sizeof(float);
      }
      response->add_partitions(snapshot->partitions()[i]);
      response->add_partition_rows(rows);
      response->add_partition_bytes(bytes);
    }
  }
  return absl::OkStatus();
}

absl::Status ParameterServerCore::CollectCheckpointWrite(const CheckpointRequest& request,
                                                         CheckpointResponse* response) {
  if (write_ == nullptr || write_->clock != request.clock()) {
    return absl::FailedPreconditionError(absl::StrCat("Checkpoint COLLECT: server ", server_index_,
                                                      " has no checkpoint write of clock ",
                                                      request.clock(), " to collect"));
  }
  write_->thread.join();
  const std::unique_ptr<CheckpointWrite> write = std::move(write_);
  RETURN_IF_ERROR(write->status);
  response->set_checkpoint_dir(write->dir);
  response->set_rows(write->rows);
  uint64_t bytes = 0;
  for (const checkpoint::WrittenFile& file : write->files) {
    *response->add_written() = checkpoint::ToManifestEntry(file);
    response->add_files(response->written(response->written_size() - 1).name());
    bytes += file.size;
  }
  response->set_bytes(bytes);
  return absl::OkStatus();
}

absl::Status ParameterServerCore::Restore(const RestoreRequest& request,
                                          RestoreResponse* response) {
  if (request.partitions_size() > 0) return RestorePartitions(request, response);
  if (request.initial()) {
    if (request.has_clock()) {
      return absl::InvalidArgumentError(
          "Restore: an initial restore names no checkpoint (clock unset)");
    }
    MutexLock checkpoint_lock(&checkpoint_mu_);
    DropCheckpointWrite();
    WriterMutexLock state(&state_mu_);
    for (Table* table : store_->tables()) table->Clear();
    bases_.clear();
    ForgetPrecopies();
    apply_stamps_.TakeAges(absl::Now());  // Pushes the restore undid.
    max_clock_.store(0, std::memory_order_relaxed);
    store_->ResetClock(0);
    generation_.store(request.generation(), std::memory_order_release);
    bsp_clocks_.Reset(0, request.generation());
    LOG(INFO) << "server " << server_index_ << " reset every row to its initial value "
              << "(clock 0, job generation " << request.generation() << ")";
    response->set_clock(0);
    return absl::OkStatus();
  }
  MutexLock checkpoint_lock(&checkpoint_mu_);
  ASSIGN_OR_RETURN(const std::string root, CheckpointRoot("Restore"));
  DropCheckpointWrite();
  ASSIGN_OR_RETURN(const RestoreSource source, ResolveRestore(root, request));
  const checkpoint::CheckpointManifest& manifest = source.checkpoint.manifest;
  const std::string& dir = source.checkpoint.dir;
  if (manifest.job_name() != config_.name()) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": checkpoint of job \"",
                                                      manifest.job_name(), "\", this job is \"",
                                                      config_.name(), "\""));
  }
  // The manifest's config fingerprint is not compared: it covers the number
  // of servers, and a checkpoint may be restored onto another server count.
  // Each file's table schemas are checked instead.
  ASSIGN_OR_RETURN(std::shared_ptr<const PartitionMap> map, RestoreMap(request));
  const std::vector<bool> owned = OwnedPartitions(*map);
  ASSIGN_OR_RETURN(const std::vector<LoadedFiles> chain,
                   LoadOwnedChain(source.checkpoint, owned, TableSchemas(*store_)));
  const uint64_t clock = manifest.clock();
  uint64_t rows;
  size_t files_read = 0;
  uint64_t bytes_read = 0;
  for (const LoadedFiles& link : chain) {
    files_read += link.files.size();
    bytes_read += link.bytes;
  }
  {
    WriterMutexLock state(&state_mu_);
    {
      MutexLock lock(&map_mu_);
      if (map_->version() <= map->version()) map_ = std::move(map);
    }
    rows = ApplyChain(chain, owned, store_.get());
    ForgetPrecopies();
    apply_stamps_.TakeAges(absl::Now());  // Pushes the restore undid.
    // The tables now equal the checkpoint: the only base for the next delta
    // (deltas on earlier bases would miss the deletions Clear() forgot).
    bases_.clear();
    RememberBase({source.root, clock, store_->AdvanceGeneration(), owned,
                  source.checkpoint.manifest.generation()});
    max_clock_.store(clock, std::memory_order_relaxed);
    store_->ResetClock(clock);
    generation_.store(request.generation(), std::memory_order_release);
    bsp_clocks_.Reset(clock, request.generation());
  }
  LOG(INFO) << "server " << server_index_ << " restored " << rows << " rows from " << files_read
            << " files of " << dir << " (clock " << clock << ", a chain of " << chain.size()
            << " checkpoints, job generation " << request.generation() << ")";
  response->set_rows(rows);
  response->set_clock(clock);
  response->set_checkpoint_dir(dir);
  response->set_files_read(files_read);
  response->set_bytes_read(bytes_read);
  return absl::OkStatus();
}

absl::StatusOr<std::shared_ptr<const PartitionMap>> ParameterServerCore::RestoreMap(
    const RestoreRequest& request) const {
  std::shared_ptr<const PartitionMap> current = CurrentMap();
  if (request.partition_owner_size() == 0) return current;
  const uint32_t parts = config_.cluster().num_partitions();
  if (static_cast<uint32_t>(request.partition_owner_size()) != parts) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Restore: map has ", request.partition_owner_size(), " partitions, the job ", parts));
  }
  if (request.map_version() < current->version()) {
    LOG(WARNING) << "Restore: map version " << request.map_version()
                 << " is older than this server's " << current->version() << "; keeping it";
    return current;
  }
  std::vector<uint32_t> owners(request.partition_owner().begin(), request.partition_owner().end());
  const uint32_t servers = std::max(config_.cluster().num_servers(),
                                    *std::max_element(owners.begin(), owners.end()) + 1);
  ASSIGN_OR_RETURN(PartitionMap map,
                   PartitionMap::FromOwners(request.map_version(), std::move(owners), servers));
  return std::make_shared<const PartitionMap>(std::move(map));
}

absl::Status ParameterServerCore::RestorePartitions(const RestoreRequest& request,
                                                    RestoreResponse* response) {
  if (request.initial()) {
    return absl::InvalidArgumentError(
        "Restore: an initial restore names no partitions (it resets the whole server)");
  }
  const bool catch_up = request.has_catch_up_from();
  if (catch_up && request.precopy()) {
    return absl::InvalidArgumentError("Restore: precopy and catch_up_from are two steps, not one");
  }
  if (catch_up && (!request.has_clock() || request.catch_up_from() >= request.clock())) {
    return absl::InvalidArgumentError(absl::StrCat(
        "Restore: a catch-up from clock ", request.catch_up_from(),
        " needs a checkpoint clock after it (clock ",
        request.has_clock() ? absl::StrCat(request.clock()) : std::string("unset"), ")"));
  }
  const std::shared_ptr<const PartitionMap> map = CurrentMap();
  ASSIGN_OR_RETURN(const std::vector<bool> adding,
                   UnownedPartitionMask(request.partitions(), "Restore", *map));
  MutexLock checkpoint_lock(&checkpoint_mu_);
  ASSIGN_OR_RETURN(const std::string root, CheckpointRoot("Restore"));
  RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
  if (catch_up) {
    MutexLock lock(&precopy_mu_);
    for (uint32_t p : request.partitions()) {
      auto it = precopied_.find(p);
      if (it == precopied_.end() || it->second != request.catch_up_from()) {
        return absl::AbortedError(absl::StrCat(
            "Restore: server ", server_index_, " did not pre-copy partition ", p, " from clock ",
            request.catch_up_from(),
            it == precopied_.end() ? std::string(" (no pre-copy of it: restarted, or dropped)")
                                   : absl::StrCat(" (it did from clock ", it->second, ")"),
            "; pre-copy again"));
      }
    }
  }
  ASSIGN_OR_RETURN(RestoreSource source, ResolveRestore(root, request));
  checkpoint::ResolvedCheckpoint& resolved = source.checkpoint;
  const checkpoint::CheckpointManifest& manifest = resolved.manifest;
  const std::string& dir = resolved.dir;
  if (manifest.job_name() != config_.name()) {
    return absl::FailedPreconditionError(absl::StrCat(dir, ": checkpoint of job \"",
                                                      manifest.job_name(), "\", this job is \"",
                                                      config_.name(), "\""));
  }
  if (catch_up) {
    // Only the links after the pre-copy's checkpoint.
    size_t after = resolved.chain.size();
    for (size_t i = 0; i < resolved.chain.size(); ++i) {
      if (resolved.chain[i].clock() == request.catch_up_from()) after = i + 1;
    }
    if (after >= resolved.chain.size()) {
      return absl::AbortedError(absl::StrCat(dir, ": its chain holds no checkpoint at clock ",
                                             request.catch_up_from(),
                                             " to catch up from; pre-copy again"));
    }
    resolved.chain.erase(resolved.chain.begin(), resolved.chain.begin() + after);
    resolved.chain_dirs.erase(resolved.chain_dirs.begin(), resolved.chain_dirs.begin() + after);
  }
  // The pre-copy goes on while the workers train: at the configured pace.
  RestorePace pace(request.precopy() ? uint64_t{config_.cluster().move_mb_per_s()} * 1000000 : 0);
  ASSIGN_OR_RETURN(const std::vector<LoadedFiles> chain,
                   LoadOwnedChain(resolved, adding, TableSchemas(*store_), &pace));
  size_t files_read = 0;
  uint64_t bytes_read = 0;
  for (const LoadedFiles& link : chain) {
    files_read += link.files.size();
    bytes_read += link.bytes;
  }
  uint64_t rows = 0;
  const uint64_t clock = manifest.clock();
  // A joining spare (owns nothing) takes the catch-up's clock.
  const std::vector<bool> owned = OwnedPartitions(*map);
  const bool spare = std::find(owned.begin(), owned.end(), true) == owned.end();
  if (catch_up && spare) {
    WriterMutexLock state(&state_mu_);
    RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
    rows = CatchUpPartitions(chain, adding, store_.get());
    max_clock_.store(clock, std::memory_order_relaxed);
    store_->ResetClock(clock);
    bsp_clocks_.Reset(clock, request.generation());
  } else {
    // Shared: requests go on (none may reach these partitions: the server
    // does not own them); a full Restore or a generation change waits.
    ReaderMutexLock state(&state_mu_);
    RETURN_IF_ERROR(CheckJobGeneration(request.generation()));
    auto add = [&] {
      rows = catch_up ? CatchUpPartitions(chain, adding, store_.get())
                      : AddPartitionsFromChain(chain, adding, store_.get(), &pace);
    };
    if (bsp_ && !request.precopy()) {
      // The rows must be of the clock this server is at: exactly the
      // checkpoint's clocks applied, and none applied during the copy.
      RETURN_IF_ERROR(bsp_clocks_.AtClock(clock, add));
    } else {
      add();
    }
  }
  {
    MutexLock lock(&precopy_mu_);
    for (uint32_t p : request.partitions()) {
      if (request.precopy()) {
        precopied_[p] = clock;
      } else {
        precopied_.erase(p);
      }
    }
  }
  MaybeStall(catch_up ? "caught_up" : "partitions_added");
  std::string step;
  if (request.precopy()) {
    step = pace.slept() > absl::ZeroDuration()
               ? absl::StrCat(" (a pre-copy, paced to ", config_.cluster().move_mb_per_s(),
                              " MB/s: slept ", absl::FormatDuration(pace.slept()), ")")
               : " (a pre-copy)";
  } else if (catch_up) {
    step = absl::StrCat(" after clock ", request.catch_up_from());
  }
  LOG(INFO) << "server " << server_index_ << (catch_up ? " caught up " : " added ")
            << request.partitions_size() << " partitions (" << rows << " rows) from " << files_read
            << " files of " << dir << step;
  response->set_paced_ms(absl::ToInt64Milliseconds(pace.slept()));
  response->set_rows(rows);
  response->set_clock(clock);
  response->set_checkpoint_dir(dir);
  response->set_files_read(files_read);
  response->set_bytes_read(bytes_read);
  return absl::OkStatus();
}

absl::StatusOr<ParameterServerCore::CheckpointBase> ParameterServerCore::DeltaBase(
    const std::string& root, const CheckpointRequest& request,
    const std::vector<bool>& owned) const {
  for (const CheckpointBase& base : bases_) {
    if (base.root != root || base.clock != request.base_clock()) continue;
    if (base.owned != owned) {
      return absl::FailedPreconditionError(
          absl::StrCat("delta checkpoint at clock ", request.clock(), ": server ", server_index_,
                       " owned other partitions at its base ",
                       checkpoint::CheckpointId(request.base_clock()), "; take a full checkpoint"));
    }
    return base;
  }
  return absl::FailedPreconditionError(absl::StrCat(
      "delta checkpoint at clock ", request.clock(), ": server ", server_index_,
      " has no record of its base ", checkpoint::CheckpointId(request.base_clock()), " in ", root,
      " (not copied or restored by this process); take a full checkpoint"));
}

void ParameterServerCore::RememberBase(CheckpointBase base) {
  bases_.erase(std::remove_if(bases_.begin(), bases_.end(),
                              [&](const CheckpointBase& b) {
                                return b.root == base.root && b.clock == base.clock;
                              }),
               bases_.end());
  bases_.push_back(std::move(base));
  if (bases_.size() > kRememberedBases) bases_.erase(bases_.begin());
  uint32_t oldest = bases_.front().generation;
  for (const CheckpointBase& b : bases_) oldest = std::min(oldest, b.generation);
  store_->TrimDeletions(oldest);
}

}  // namespace shardps

#include "replica/replica.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <sstream>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/checkpoint/checkpoint_dir.h"
#include "common/checkpoint/manifest.h"
#include "common/metrics.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace replica {

absl::StatusOr<std::unique_ptr<Replica>> Replica::Create(ReplicaOptions options) {
  if (options.checkpoint_dir.empty()) options.checkpoint_dir = options.config.checkpoint().dir();
  if (options.checkpoint_dir.empty()) {
    return absl::InvalidArgumentError(
        "replica: no checkpoint directory (give --checkpoint_dir or checkpoint.dir in the config)");
  }
  if (options.poll_interval <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("replica: poll interval must be > 0");
  }
  if (options.build_nice < -20 || options.build_nice > 19) {
    return absl::InvalidArgumentError(
        absl::StrCat("replica: build nice value ", options.build_nice, " is outside -20..19"));
  }
  return std::unique_ptr<Replica>(new Replica(std::move(options)));
}

Replica::Replica(ReplicaOptions options)
    : options_(std::move(options)), root_(options_.checkpoint_dir) {}

Replica::~Replica() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.SignalAll();
  if (follower_.joinable()) follower_.join();
}

void Replica::Start() {
  PollOnce();
  follower_ = std::thread([this] {
    if (options_.build_nice != 0) {
      // Linux: a thread's own nice value, inherited by the threads it starts
      // (the stream's readers).
      const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
      if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), options_.build_nice) != 0) {
        LOG(WARNING) << "replica: cannot set the builds' nice value to " << options_.build_nice
                     << ": " << std::strerror(errno);
      }
    }
    if (options_.scheduler.empty()) {
      Follow();
    } else {
      FollowStream();
    }
  });
}

bool Replica::stopping() const {
  MutexLock lock(&mu_);
  return stop_;
}

void Replica::Follow() {
  while (true) {
    {
      MutexLock lock(&mu_);
      const absl::Time next = absl::Now() + options_.poll_interval;
      while (!stop_ && absl::Now() < next) changed_.WaitUntil(&mu_, next);
      if (stop_) return;
    }
    PollOnce();
  }
}

namespace {

namespace ckpt = ::shardps::checkpoint;

struct Metrics {
  prometheus::Gauge& version = metrics::GetGauge(
      "shardps_replica_version", "Clock of the checkpoint the replica serves (0: none yet).");
  prometheus::Gauge& newest = metrics::GetGauge(
      "shardps_replica_newest_checkpoint",
      "Newest checkpoint clock with a MANIFEST in the directory at the last poll.");
  prometheus::Gauge& lag = metrics::GetGauge(
      "shardps_replica_version_lag",
      "Newest checkpoint clock on disk minus the version served (clocks; 0 when current).");
  prometheus::Counter& applied = metrics::GetCounter("shardps_replica_versions_applied_total",
                                                     "Versions made current since the start.");
  prometheus::Counter& incremental = metrics::GetCounter(
      "shardps_replica_versions_incremental_total",
      "Versions built from the version served plus the deltas after it (the rest are "
      "rebuilt from their whole chain).");
  prometheus::Counter& in_place = metrics::GetCounter(
      "shardps_replica_versions_in_place_total",
      "Incremental versions built in place on the idle model (the rest on a copy of the served "
      "one).");
  prometheus::Counter& rollbacks = metrics::GetCounter(
      "shardps_replica_rollbacks_total",
      "Moves to an older or rewritten checkpoint after the served one left the disk (a "
      "rollback).");
  prometheus::Gauge& rows = metrics::GetGauge("shardps_replica_version_rows",
                                              "Rows (every table) of the version served.");
  prometheus::Gauge& bytes = metrics::GetGauge(
      "shardps_replica_version_bytes",
      "Bytes of the served checkpoint's own files (a delta's increment, or a full one).");
  prometheus::Counter& bytes_read = metrics::GetCounter(
      "shardps_replica_bytes_read_total",
      "Checkpoint file bytes read to build versions (the deltas after the version served, or a "
      "whole chain).");
  prometheus::Histogram& build = metrics::GetHistogram(
      "shardps_replica_build_seconds",
      "Time to build one version (the deltas after the served one, in place or on a copy, or "
      "its whole chain).",
      metrics::LatencyBuckets());
  prometheus::Counter& stream_versions =
      metrics::GetCounter("shardps_replica_stream_versions_total",
                          "Versions applied from the servers' delta stream (of versions_applied).");
  prometheus::Counter& stream_bytes =
      metrics::GetCounter("shardps_replica_stream_bytes_total",
                          "Bytes of the stream's version parts received and applied (wire size).");
  prometheus::Counter& resyncs = metrics::GetCounter(
      "shardps_replica_resyncs_total",
      "Loads of a checkpoint to follow the stream from again (a rollback, parts the servers "
      "no longer keep).");
  prometheus::Histogram& train_to_serve = metrics::GetHistogram(
      "shardps_replica_train_to_serve_seconds",
      "From the cut's time in the manifest (cut_unix_micros, else created_unix_micros) to "
      "the version being served.",
      metrics::LatencyBuckets());
  prometheus::Histogram& push_to_serve = metrics::GetHistogram(
      "shardps_replica_push_to_serve_seconds",
      "Stream versions: from each push's apply on its server to the first version served that "
      "holds it (the server's age of the push at its cut plus the cut's time to the swap).",
      metrics::LatencyBuckets());
};

Metrics& M() {
  static Metrics* m = new Metrics();
  return *m;
}

// The checkpoint's manifest as on disk now (no file checks), or an error.
absl::StatusOr<ckpt::CheckpointManifest> ReadManifest(const std::string& dir) {
  const std::string path = absl::StrCat(dir, "/", ckpt::kManifestFileName);
  std::ifstream in(path, std::ios::binary);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": cannot open"));
  std::stringstream text;
  text << in.rdbuf();
  return ckpt::ParseManifest(text.str(), path);
}

// The manifest's created_unix_micros, -1 if it does not parse, nullopt if
// there is no MANIFEST.
std::optional<int64_t> CreatedMicros(const std::string& dir) {
  std::error_code ec;
  if (!std::filesystem::exists(absl::StrCat(dir, "/", ckpt::kManifestFileName), ec)) {
    return std::nullopt;
  }
  absl::StatusOr<ckpt::CheckpointManifest> m = ReadManifest(dir);
  if (!m.ok()) return absl::IsNotFound(m.status()) ? std::nullopt : std::optional<int64_t>(-1);
  return m->created_unix_micros();
}

int64_t CutMicros(const ckpt::CheckpointManifest& m) {
  return m.cut_unix_micros() > 0 ? m.cut_unix_micros() : m.created_unix_micros();
}

uint64_t FileBytes(const ckpt::CheckpointManifest& m) {
  uint64_t bytes = 0;
  for (const ckpt::CheckpointFile& f : m.files()) bytes += f.size();
  return bytes;
}

}  // namespace

bool Replica::Extends(const checkpoint::ResolvedCheckpoint& next) const {
  if (next.manifest.kind() != checkpoint::CheckpointManifest::DELTA || current_chain_.empty() ||
      next.chain.size() <= current_chain_.size()) {
    return false;
  }
  for (size_t i = 0; i < current_chain_.size(); ++i) {
    if (current_chain_[i] != Identity(next.chain[i].clock(), next.chain[i].created_unix_micros())) {
      return false;
    }
  }
  return true;
}

absl::StatusOr<Replica::Built> Replica::BuildIncremental(const checkpoint::CheckpointEntry& entry,
                                                         int64_t created,
                                                         checkpoint::ResolvedCheckpoint resolved) {
  const ServedModel* served = models_.served();
  Built built;
  ASSIGN_OR_RETURN(built.links,
                   served->ReadDeltas(resolved, current_chain_.size(), &built.bytes_read));
  if (CreatedMicros(entry.dir) != created) {
    return absl::AbortedError(absl::StrCat(entry.dir, " was written again while loading"));
  }
  built.incremental = true;
  // The other model, a version or more behind, catches up in place: the
  // links it lacks (kept from the version before: written without reading,
  // it then equals the served one) and the ones just read (their old rows
  // read for the running hash).
  absl::StatusOr<ServedModel*> idle = models_.Idle(absl::Now() + options_.reader_wait);
  if (!idle.ok()) {
    LOG(INFO) << "replica: version " << entry.clock << " on a copy of version " << served->clock()
              << ": " << idle.status().message();
  } else if (*idle != nullptr) {
    const absl::Status st = (*idle)->CatchUp(idle_lacks_, *served, resolved, built.links);
    if (st.ok()) {
      built.in_place = true;
      built.resolved = std::move(resolved);
      return built;
    }
    LOG(WARNING) << "replica: version " << entry.clock << " in place failed (" << st
                 << "); on a copy of version " << served->clock();
    models_.DropIdle();
  }
  ASSIGN_OR_RETURN(built.model, served->Copy());
  RETURN_IF_ERROR(built.model->Advance(resolved, built.links));
  built.resolved = std::move(resolved);
  return built;
}

absl::StatusOr<Replica::Built> Replica::Build(const checkpoint::CheckpointEntry& entry,
                                              int64_t created, bool serving) {
  // The chain's manifests (sizes only: the files a build reads are checked
  // in full), and the checkpoint still the one listed (not rewritten).
  checkpoint::LoadManifestOptions sizes;
  sizes.verify_file_crcs = false;
  if (serving) {
    absl::StatusOr<checkpoint::ResolvedCheckpoint> resolved =
        checkpoint::LoadCheckpoint(root_, entry.clock, sizes);
    if (resolved.ok() && resolved->manifest.created_unix_micros() == created &&
        Extends(*resolved)) {
      absl::StatusOr<Built> built = BuildIncremental(entry, created, *std::move(resolved));
      if (built.ok() || absl::IsAborted(built.status())) return built;
      // The chain rebuild below refuses the checkpoint, or shows why the
      // deltas did not do.
      LOG(WARNING) << "replica: " << entry.dir << ": incremental build failed (" << built.status()
                   << "); rebuilding from its chain";
    }
  }
  Built built;
  ASSIGN_OR_RETURN(built.model, ServedModel::Load(options_.config, root_, entry.clock));
  ASSIGN_OR_RETURN(built.resolved, checkpoint::LoadCheckpoint(root_, entry.clock, sizes));
  if (built.resolved.manifest.created_unix_micros() != created) {
    return absl::AbortedError(absl::StrCat(entry.dir, " was written again while loading"));
  }
  for (const checkpoint::CheckpointManifest& link : built.resolved.chain) {
    built.bytes_read += FileBytes(link);
  }
  return built;
}

bool Replica::PollOnce() { return Poll(PollMode::kFiles); }

bool Replica::Poll(PollMode mode) {
  const bool resync = mode == PollMode::kResync;
  MutexLock poll(&poll_mu_);
  absl::StatusOr<std::vector<checkpoint::CheckpointEntry>> entries =
      checkpoint::ListCheckpoints(root_);
  if (!entries.ok()) return false;  // NOT_FOUND: the job has not written one yet.
  std::shared_ptr<ServedModel> current;
  Identity served;
  {
    MutexLock lock(&mu_);
    current = current_;
    served = current_id_;
  }
  // Is the checkpoint served still on disk as it was loaded? If not (set
  // aside, or written again after a rollback), any complete checkpoint,
  // older ones included, replaces it. (A version from the stream: only
  // newer ones, unless resyncing.)
  const bool served_on_disk =
      current != nullptr &&
      (mode == PollMode::kNewer ||
       (mode == PollMode::kFiles &&
        CreatedMicros(checkpoint::CheckpointPath(root_, served.first)) == served.second));
  uint64_t newest = 0;
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    const std::optional<int64_t> created = CreatedMicros(it->dir);
    if (!created.has_value()) continue;  // Being written.
    if (newest == 0) newest = it->clock;
    if (served_on_disk && it->clock <= served.first) break;
  }
  {
    MutexLock lock(&mu_);
    newest_on_disk_ = newest;
    M().newest.Set(static_cast<double>(newest));
    M().lag.Set(current == nullptr || newest <= served.first
                    ? 0.0
                    : static_cast<double>(newest - served.first));
  }
  // Newest first: the first one that loads becomes the version.
  for (auto it = entries->rbegin(); it != entries->rend(); ++it) {
    if (served_on_disk && it->clock <= served.first) break;
    const std::optional<int64_t> created = CreatedMicros(it->dir);
    if (!created.has_value()) continue;  // Being written.
    const Identity id(it->clock, *created);
    if (refused_.contains(id)) continue;
    const absl::Time start = absl::Now();
    absl::StatusOr<Built> built = Build(*it, *created, current != nullptr);
    if (absl::IsAborted(built.status())) {
      LOG(INFO) << "replica: " << built.status().message() << "; next poll";
      return false;
    }
    if (!built.ok()) {
      LOG(WARNING) << "replica: skipping " << it->dir << ": " << built.status();
      refused_.insert(id);
      MutexLock lock(&mu_);
      last_error_ = absl::StrCat(it->dir, ": ", built.status().ToString());
      continue;
    }
    // The version built becomes the served one; the one served so far
    // becomes the other model (its readers finish with it first), lacking
    // the links just read, unless this version was built from its chain
    // (then it is dropped: nothing to catch up from).
    std::shared_ptr<ServedModel> next =
        models_.Serve(std::move(built->model), /*keep_previous=*/built->incremental);
    idle_lacks_ = std::move(built->links);
    idle_lacks_stream_.clear();
    const absl::Time done = absl::Now();
    const checkpoint::CheckpointManifest& manifest = built->resolved.manifest;
    const uint64_t own_bytes = FileBytes(manifest);
    const bool rollback = current != nullptr && !served_on_disk && it->clock <= served.first;
    const uint64_t rows = next->rows();
    const uint64_t hash = next->table_hash();
    const size_t links_read =
        built->resolved.chain.size() - (built->incremental ? current_chain_.size() : 0);
    current_chain_.clear();
    for (const checkpoint::CheckpointManifest& link : built->resolved.chain) {
      current_chain_.emplace_back(link.clock(), link.created_unix_micros());
    }
    ServedVersion served_version;
    served_version.id = id;
    served_version.bytes = own_bytes;
    served_version.generation = manifest.generation();
    served_version.cut = absl::FromUnixMicros(CutMicros(manifest));
    served_version.build = done - start;
    served_version.incremental = built->incremental;
    served_version.in_place = built->in_place;
    served_version.rollback = rollback;
    served_version.resync = resync;
    served_version.bytes_read = built->bytes_read;
    served_version.newest = newest;
    const absl::Duration cut_to_serve = MakeCurrent(&next, served_version);
    LOG(INFO) << "replica: serving version " << it->clock << " (" << rows << " rows, table hash "
              << absl::StrCat(absl::Hex(hash, absl::kZeroPad16)) << ") from " << it->dir
              << ", generation " << manifest.generation() << ", built in " << (done - start)
              << (built->incremental
                      ? absl::StrCat(" (incremental: version ", served.first, " plus ", links_read,
                                     links_read == 1 ? " delta, " : " deltas, ",
                                     built->in_place ? "in place)" : "on a copy)")
                      : absl::StrCat(" (from its chain of ", links_read, ")"))
              << " from " << built->bytes_read << " bytes (own files " << own_bytes
              << "); cut to serve " << cut_to_serve
              << (rollback ? absl::StrCat("; ROLLBACK: version ", served.first,
                                          " is no longer on disk as it was served")
                           : std::string());
    // `next` (the old version) is released here, outside the lock; readers
    // still holding it keep it alive.
    return true;
  }
  if (current != nullptr && !served_on_disk && !resync) {
    MutexLock lock(&mu_);
    last_error_ = absl::StrCat("version ", served.first,
                               " is no longer on disk as it was loaded and no other complete "
                               "checkpoint loads; still serving it");
  }
  return false;
}

absl::Duration Replica::MakeCurrent(std::shared_ptr<ServedModel>* next, const ServedVersion& v) {
  const uint64_t clock = v.id.first;
  const uint64_t rows = (*next)->rows();
  absl::Duration cut_to_serve;
  {
    // The metrics change in the same critical section as the served
    // version, so a scrape after a Status that shows a version also counts
    // it.
    MutexLock lock(&mu_);
    current_.swap(*next);
    current_id_ = v.id;
    current_bytes_ = v.bytes;
    current_generation_ = v.generation;
    ++versions_applied_;
    if (v.rollback) ++rollbacks_;
    if (v.resync) ++resyncs_;
    if (v.stream) {
      ++stream_versions_;
      stream_bytes_ += v.bytes;
    }
    cut_to_serve = absl::Now() - v.cut;
    M().version.Set(static_cast<double>(clock));
    if (v.newest) M().lag.Set(*v.newest > clock ? static_cast<double>(*v.newest - clock) : 0.0);
    M().applied.Increment();
    if (v.incremental) M().incremental.Increment();
    if (v.in_place) M().in_place.Increment();
    if (v.rollback) M().rollbacks.Increment();
    if (v.resync) M().resyncs.Increment();
    if (v.stream) {
      M().stream_versions.Increment();
      M().stream_bytes.Increment(static_cast<double>(v.bytes));
    }
    M().rows.Set(static_cast<double>(rows));
    M().bytes.Set(static_cast<double>(v.bytes));
    M().bytes_read.Increment(static_cast<double>(v.bytes_read));
    M().build.Observe(absl::ToDoubleSeconds(v.build));
    M().train_to_serve.Observe(absl::ToDoubleSeconds(cut_to_serve));
  }
  changed_.SignalAll();
  return cut_to_serve;
}

Replica::PushTimes Replica::TimePushes(const ServedModel::StreamVersion& version,
                                       absl::Time served_at) {
  LatencySketch this_version;
  MutexLock lock(&mu_);
  for (const auto& part : version.parts) {
    if (part->chunk() != 0) continue;
    const absl::Duration cut_to_serve = served_at - absl::FromUnixMicros(part->cut_unix_micros());
    for (const uint32_t age : part->push_ages_micros()) {
      const absl::Duration d = cut_to_serve + absl::Microseconds(age);
      push_to_serve_.Add(d);
      this_version.Add(d);
      M().push_to_serve.Observe(absl::ToDoubleSeconds(d));
    }
  }
  return {this_version.count(),   this_version.Quantile(0.5),   this_version.max(),
          push_to_serve_.count(), push_to_serve_.Quantile(0.5), push_to_serve_.Quantile(0.99),
          push_to_serve_.max()};
}

absl::Status Replica::VerifyStreamVersion(const ServedModel::StreamVersion& version,
                                          const ServedModel* built) {
  uint64_t servers = 0;
  for (const auto& part : version.parts) {
    if (!part->has_state_hash()) return absl::OkStatus();   // Cut before anyone asked.
    if (part->chunk() == 0) servers += part->state_hash();  // Each chunk carries it.
  }
  MutexLock lock(&mu_);
  if (built->table_hash() == servers) {
    ++verified_versions_;
    return absl::OkStatus();
  }
  ++hash_mismatches_;
  return absl::DataLossError(absl::StrCat(
      "version ", version.clock, " built from the stream has table hash ",
      absl::Hex(built->table_hash(), absl::kZeroPad16), ", the servers' rows at the cut hash to ",
      absl::Hex(servers, absl::kZeroPad16), "; not served"));
}

absl::StatusOr<bool> Replica::ApplyStreamVersion(ServedModel::StreamLink version,
                                                 uint64_t generation, int64_t cut_micros,
                                                 uint64_t bytes) {
  MutexLock poll(&poll_mu_);
  const absl::Time start = absl::Now();
  const ServedModel* served = models_.served();
  uint64_t served_generation;
  {
    MutexLock lock(&mu_);
    served_generation = current_generation_;
  }
  const VersionPart& first = *version->parts.front();
  const bool full = first.full();
  if (!full) {
    if (served == nullptr) return false;
    // Every part a delta on the same base the version served can take.
    for (const auto& part : version->parts) {
      const bool same_history =
          part->generation() == served_generation && part->base_clock() <= served->clock();
      const bool on_base =
          part->base_generation() == served_generation && part->base_clock() == served->clock();
      if (part->full() || !(same_history || on_base)) return false;
    }
  } else {
    for (const auto& part : version->parts) {
      if (!part->full()) return false;  // Mixed: not one cut's parts.
    }
  }
  std::unique_ptr<ServedModel> model;
  bool in_place = false;
  const ServedModel* built = nullptr;  // The version, before it is served.
  if (full) {
    ASSIGN_OR_RETURN(model, ServedModel::FromStream(options_.config, *version));
    built = model.get();
  } else {
    absl::StatusOr<ServedModel*> idle = models_.Idle(absl::Now() + options_.reader_wait);
    if (idle.ok() && *idle != nullptr && idle_lacks_.empty() && !idle_lacks_stream_.empty()) {
      const absl::Status st = (*idle)->CatchUpStream(idle_lacks_stream_, *served, {version});
      if (st.ok()) {
        in_place = true;
        built = *idle;
      } else {
        LOG(WARNING) << "replica: stream version " << version->clock << " in place failed (" << st
                     << "); on a copy of version " << served->clock();
        models_.DropIdle();
      }
    } else if (idle.ok() && *idle != nullptr) {
      models_.DropIdle();  // Behind by file links: not caught up from the stream.
    }
    if (!in_place) {
      ASSIGN_OR_RETURN(model, served->Copy());
      RETURN_IF_ERROR(model->AdvanceStream({version}));
      built = model.get();
    }
  }
  if (absl::Status st = VerifyStreamVersion(*version, built); !st.ok()) {
    if (in_place) models_.DropIdle();  // It holds the version that differs.
    return st;
  }
  const uint64_t from = served == nullptr ? 0 : served->clock();
  std::shared_ptr<ServedModel> next = models_.Serve(std::move(model), /*keep_previous=*/!full);
  idle_lacks_.clear();
  idle_lacks_stream_.clear();
  if (!full) idle_lacks_stream_.push_back(version);
  current_chain_.clear();  // Not a checkpoint's chain: a later poll loads one whole.
  const absl::Time done = absl::Now();
  const uint64_t rows = next->rows();
  const uint64_t hash = next->table_hash();
  ServedVersion served_version;
  served_version.id = Identity(version->clock, kStreamVersion);
  served_version.bytes = bytes;
  served_version.generation = generation;
  served_version.cut = absl::FromUnixMicros(cut_micros);
  served_version.build = done - start;
  served_version.incremental = !full;
  served_version.in_place = in_place;
  served_version.stream = true;
  const absl::Duration cut_to_serve = MakeCurrent(&next, served_version);
  const PushTimes pushes = TimePushes(*version, served_version.cut + cut_to_serve);
  std::string pushes_line;
  if (pushes.pushes > 0) {
    const auto sec = [](absl::Duration d) {
      return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d));
    };
    pushes_line = absl::StrCat("; push to serve p50 ", sec(pushes.p50), " max ", sec(pushes.max),
                               " (", pushes.pushes, " pushes; all ", pushes.all_pushes, ": p50 ",
                               sec(pushes.all_p50), " p99 ", sec(pushes.all_p99), " max ",
                               sec(pushes.all_max), ")");
  }
  LOG(INFO) << "replica: serving version " << version->clock << " (" << rows << " rows, table hash "
            << absl::StrCat(absl::Hex(hash, absl::kZeroPad16)) << ") from the stream, generation "
            << generation << ", built in " << (done - start)
            << (full ? std::string(" (full)")
                     : absl::StrCat(" (version ", from, " plus a delta on ", first.base_clock(),
                                    in_place ? ", in place)" : ", on a copy)"))
            << " from " << bytes << " bytes; cut to serve " << cut_to_serve << pushes_line;
  return true;
}

std::shared_ptr<ServedModel> Replica::Current() const {
  MutexLock lock(&mu_);
  return current_;
}

ReplicaStatus Replica::Status() const {
  ReplicaStatus s;
  std::shared_ptr<ServedModel> current;
  {
    MutexLock lock(&mu_);
    current = current_;
    s.versions_applied = versions_applied_;
    s.rollbacks = rollbacks_;
    s.newest_on_disk = newest_on_disk_;
    s.version_bytes = current_bytes_;
    s.generation = current_generation_;
    s.created_unix_micros = current_id_.second;
    s.last_error = last_error_;
    s.streaming = !options_.scheduler.empty();
    s.stream_error = stream_error_;
    s.stream_versions = stream_versions_;
    s.stream_bytes = stream_bytes_;
    s.resyncs = resyncs_;
    s.verified_versions = verified_versions_;
    s.hash_mismatches = hash_mismatches_;
    s.pushes_timed = push_to_serve_.count();
    s.push_to_serve_p50 = push_to_serve_.Quantile(0.5);
    s.push_to_serve_p99 = push_to_serve_.Quantile(0.99);
    s.push_to_serve_max = push_to_serve_.max();
  }
  if (current != nullptr) {
    s.loaded = true;
    s.version = current->clock();
    s.table_hash = current->table_hash();
    s.rows = current->rows();
    s.checkpoint_dir = current->dir();
  }
  return s;
}

absl::Status Replica::WaitForVersion(uint64_t version, absl::Time deadline) const {
  MutexLock lock(&mu_);
  while (current_ == nullptr || current_->clock() < version) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(
          "replica: waited for version >= ", version, " of ", root_, "; serving ",
          current_ == nullptr ? std::string("none") : absl::StrCat(current_->clock())));
    }
    changed_.WaitUntil(&mu_, deadline);
  }
  return absl::OkStatus();
}

}  // namespace replica
}  // namespace shardps

#include "replica/replica.h"

#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/status_macros.h"
#include "glog/logging.h"
#include "replica/replica_metrics.h"
#include "replica/stream_session.h"

namespace shardps {
namespace replica {

class Replica::PollerHost final : public FilePoller::Host {
 public:
  explicit PollerHost(Replica* replica) : replica_(replica) {}
  std::optional<VersionId> Served() const override { return replica_->ServedId(); }
  absl::Status ServeCheckpoint(const checkpoint::CheckpointEntry& entry, int64_t created,
                               const FilePoller::Move& move) override {
    return replica_->ServeCheckpoint(entry, created, move);
  }
  void RecordError(const std::string& error) override { replica_->RecordError(error); }

 private:
  Replica* const replica_;
};

class Replica::FollowerHost final : public StreamFollower::Host {
 public:
  explicit FollowerHost(Replica* replica) : replica_(replica) {}
  std::optional<std::pair<uint64_t, uint64_t>> Served() const override {
    return replica_->ServedKey();
  }
  absl::Status CheckPart(const VersionPart& part) const override {
    const std::shared_ptr<ServedModel> model = replica_->Current();
    if (model == nullptr) return absl::FailedPreconditionError("no version served");
    return model->CheckStreamPart(part);
  }
  absl::StatusOr<std::optional<StreamFollower::Applied>> Apply(
      const VersionAssembler::Complete& version,
      absl::FunctionRef<absl::Status(uint64_t table_hash)> check) override {
    return replica_->ServeStreamVersion(version, check);
  }
  bool LoadCheckpoint(Load load) override {
    switch (load) {
      case Load::kFirst:
        return replica_->poller_.Poll(FilePoller::Mode::kFiles);
      case Load::kResync:
        return replica_->poller_.Poll(FilePoller::Mode::kResync);
      case Load::kNewer:
        return replica_->poller_.Poll(FilePoller::Mode::kNewer);
    }
    return false;
  }
  void RecordError(const std::string& error) override { replica_->RecordError(error); }

 private:
  Replica* const replica_;
};

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
    : options_(std::move(options)),
      root_(options_.checkpoint_dir),
      pair_(options_.config, root_, options_.reader_wait),
      poller_host_(std::make_unique<PollerHost>(this)),
      poller_(root_, poller_host_.get()) {
  if (options_.scheduler.empty()) return;
  follower_host_ = std::make_unique<FollowerHost>(this);
  connector_ = std::make_unique<GrpcConnector>(options_.scheduler, options_.verify_stream);
  StreamFollower::Options follow;
  follow.num_partitions = options_.config.cluster().num_partitions();
  follow.poll_interval = options_.poll_interval;
  follower_ = std::make_unique<StreamFollower>(follow, follower_host_.get(), connector_.get());
}

Replica::~Replica() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  changed_.SignalAll();
  if (follower_ != nullptr) follower_->Stop();
  if (thread_.joinable()) thread_.join();
}

void Replica::Start() {
  PollOnce();
  thread_ = std::thread([this] {
    if (options_.build_nice != 0) {
      // Linux: a thread's own nice value, inherited by the threads it starts
      // (the stream's readers).
      const pid_t tid = static_cast<pid_t>(syscall(SYS_gettid));
      if (setpriority(PRIO_PROCESS, static_cast<id_t>(tid), options_.build_nice) != 0) {
        LOG(WARNING) << "replica: cannot set the builds' nice value to " << options_.build_nice
                     << ": " << std::strerror(errno);
      }
    }
    if (follower_ != nullptr) {
      follower_->Run();
    } else {
      FollowFiles();
    }
  });
}

void Replica::FollowFiles() {
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

bool Replica::PollOnce() { return poller_.Poll(FilePoller::Mode::kFiles); }

std::optional<VersionId> Replica::ServedId() const {
  MutexLock lock(&mu_);
  if (current_ == nullptr) return std::nullopt;
  return current_id_;
}

std::optional<std::pair<uint64_t, uint64_t>> Replica::ServedKey() const {
  MutexLock lock(&mu_);
  if (current_ == nullptr) return std::nullopt;
  return std::make_pair(current_generation_, current_->clock());
}

void Replica::RecordError(const std::string& error) {
  MutexLock lock(&mu_);
  last_error_ = error;
}

absl::Status Replica::ServeCheckpoint(const checkpoint::CheckpointEntry& entry, int64_t created,
                                      const FilePoller::Move& move) {
  MutexLock build(&build_mu_);
  if (ServedId() != move.from) {
    return absl::AbortedError(
        absl::StrCat("the version served changed while ", entry.dir, " was considered"));
  }
  const absl::Time start = absl::Now();
  ASSIGN_OR_RETURN(ModelPair::Built built, pair_.BuildCheckpoint(entry, created));
  // The version built becomes the served one; the one served so far becomes
  // the other model (its readers finish with it first), lacking the links
  // just read, unless this version was built from its chain (then it is
  // dropped: nothing to catch up from).
  const checkpoint::CheckpointManifest manifest = built.resolved.manifest;
  ServedVersion v;
  v.id = VersionId(entry.clock, created);
  v.bytes = FileBytes(manifest);
  v.generation = manifest.generation();
  v.cut = absl::FromUnixMicros(CutMicros(manifest));
  v.incremental = built.incremental;
  v.in_place = built.in_place;
  v.rollback = move.rollback;
  v.resync = move.resync;
  v.bytes_read = built.bytes_read;
  v.newest = move.newest;
  const size_t links_read = built.links_read;
  std::shared_ptr<ServedModel> next = pair_.Serve(std::move(built));
  v.build = absl::Now() - start;
  const uint64_t rows = next->rows();
  const uint64_t hash = next->table_hash();
  const uint64_t from = move.from.has_value() ? move.from->first : 0;
  const absl::Duration cut_to_serve = MakeCurrent(&next, v);
  LOG(INFO) << "replica: serving version " << entry.clock << " (" << rows << " rows, table hash "
            << absl::StrCat(absl::Hex(hash, absl::kZeroPad16)) << ") from " << entry.dir
            << ", generation " << manifest.generation() << ", built in " << v.build
            << (v.incremental ? absl::StrCat(" (incremental: version ", from, " plus ", links_read,
                                             links_read == 1 ? " delta, " : " deltas, ",
                                             v.in_place ? "in place)" : "on a copy)")
                              : absl::StrCat(" (from its chain of ", links_read, ")"))
            << " from " << v.bytes_read << " bytes (own files " << v.bytes << "); cut to serve "
            << cut_to_serve
            << (v.rollback ? absl::StrCat("; ROLLBACK: version ", from,
                                          " is no longer on disk as it was served")
                           : std::string());
  // `next` (the old version) is released here, outside the lock; readers
  // still holding it keep it alive.
  return absl::OkStatus();
}

absl::StatusOr<std::optional<StreamFollower::Applied>> Replica::ServeStreamVersion(
    const VersionAssembler::Complete& version,
    absl::FunctionRef<absl::Status(uint64_t table_hash)> check) {
  MutexLock build(&build_mu_);
  const absl::Time start = absl::Now();
  const std::optional<std::pair<uint64_t, uint64_t>> served = ServedKey();
  ASSIGN_OR_RETURN(std::optional<ModelPair::Built> built,
                   pair_.BuildStream(version.version, served.has_value() ? served->first : 0));
  if (!built.has_value()) return std::nullopt;
  if (absl::Status st = check(built->version->table_hash()); !st.ok()) {
    pair_.Discard(*built);
    return st;
  }
  ServedVersion v;
  v.id = VersionId(version.version->clock, kStreamVersion);
  v.bytes = version.bytes;
  v.generation = version.generation;
  v.cut = absl::FromUnixMicros(version.cut_micros);
  v.incremental = !built->full;
  v.in_place = built->in_place;
  v.stream = true;
  std::shared_ptr<ServedModel> next = pair_.Serve(*std::move(built));
  v.build = absl::Now() - start;
  StreamFollower::Applied s;
  s.rows = next->rows();
  s.table_hash = next->table_hash();
  s.from = served.has_value() ? served->second : 0;
  s.in_place = v.in_place;
  s.build = v.build;
  s.cut_to_serve = MakeCurrent(&next, v);
  return s;
}

absl::Duration Replica::MakeCurrent(std::shared_ptr<ServedModel>* next, const ServedVersion& v) {
  const uint64_t clock = v.id.first;
  const uint64_t rows = (*next)->rows();
  ReplicaMetrics& m = Metrics();
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
    m.version.Set(static_cast<double>(clock));
    if (v.newest) m.lag.Set(*v.newest > clock ? static_cast<double>(*v.newest - clock) : 0.0);
    m.applied.Increment();
    if (v.incremental) m.incremental.Increment();
    if (v.in_place) m.in_place.Increment();
    if (v.rollback) m.rollbacks.Increment();
    if (v.resync) m.resyncs.Increment();
    if (v.stream) {
      m.stream_versions.Increment();
      m.stream_bytes.Increment(static_cast<double>(v.bytes));
    }
    m.rows.Set(static_cast<double>(rows));
    m.bytes.Set(static_cast<double>(v.bytes));
    m.bytes_read.Increment(static_cast<double>(v.bytes_read));
    m.build.Observe(absl::ToDoubleSeconds(v.build));
    m.train_to_serve.Observe(absl::ToDoubleSeconds(cut_to_serve));
  }
  changed_.SignalAll();
  return cut_to_serve;
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
    s.version_bytes = current_bytes_;
    s.generation = current_generation_;
    s.created_unix_micros = current_id_.second;
    s.last_error = last_error_;
    s.stream_versions = stream_versions_;
    s.stream_bytes = stream_bytes_;
    s.resyncs = resyncs_;
  }
  s.newest_on_disk = poller_.newest_on_disk();
  s.streaming = follower_ != nullptr;
  if (follower_ != nullptr) {
    const StreamFollower::StreamStatus stream = follower_->GetStatus();
    s.stream_error = stream.lost_reason;
    s.verified_versions = stream.verified_versions;
    s.hash_mismatches = stream.hash_mismatches;
    s.pushes_timed = stream.pushes_timed;
    s.push_to_serve_p50 = stream.push_to_serve_p50;
    s.push_to_serve_p99 = stream.push_to_serve_p99;
    s.push_to_serve_max = stream.push_to_serve_max;
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

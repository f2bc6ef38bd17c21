#include "replica/stream_follower.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "glog/logging.h"
#include "replica/replica_metrics.h"

namespace shardps {
namespace replica {
namespace {

std::string Seconds(absl::Duration d) { return absl::StrFormat("%.3fs", absl::ToDoubleSeconds(d)); }

}  // namespace

StreamFollower::StreamFollower(Options options, Host* host, Connector* connector)
    : options_(options), host_(host), connector_(connector) {}

void StreamFollower::Stop() {
  {
    MutexLock lock(&mu_);
    stop_ = true;
  }
  stopped_.SignalAll();
}

bool StreamFollower::stopping() const {
  MutexLock lock(&mu_);
  return stop_;
}

void StreamFollower::Wait(absl::Duration d) {
  MutexLock lock(&mu_);
  const absl::Time until = absl::Now() + d;
  while (!stop_ && absl::Now() < until) stopped_.WaitUntil(&mu_, until);
}

StreamFollower::State StreamFollower::state() const {
  MutexLock lock(&mu_);
  return state_;
}

void StreamFollower::SetState(State state, const std::string& lost_reason) {
  MutexLock lock(&mu_);
  state_ = state;
  lost_reason_ = lost_reason;
}

StreamFollower::StreamStatus StreamFollower::GetStatus() const {
  MutexLock lock(&mu_);
  StreamStatus s;
  s.state = state_;
  s.lost_reason = lost_reason_;
  s.verified_versions = verified_versions_;
  s.hash_mismatches = hash_mismatches_;
  s.pushes_timed = push_to_serve_.count();
  s.push_to_serve_p50 = push_to_serve_.Quantile(0.5);
  s.push_to_serve_p99 = push_to_serve_.Quantile(0.99);
  s.push_to_serve_max = push_to_serve_.max();
  return s;
}

void StreamFollower::Run() {
  bool resync = false;
  while (!stopping()) {
    if (!host_->Served().has_value()) {
      // Nothing to follow from yet: a checkpoint first.
      SetState(State::kBootstrapping);
      Wait(options_.poll_interval);
      host_->LoadCheckpoint(Host::Load::kFirst);
    } else if (resync) {
      Bootstrap();
      resync = false;
    } else {
      resync = !FollowSession();
    }
  }
}

void StreamFollower::Bootstrap() {
  // The session has ended: nothing is read while the checkpoint loads.
  SetState(State::kBootstrapping);
  const uint64_t before = host_->Served()->second;
  host_->LoadCheckpoint(Host::Load::kResync);
  if (host_->Served()->second == before) Wait(options_.poll_interval);
}

void StreamFollower::Lose(const std::string& why) {
  bool new_reason;
  {
    MutexLock lock(&mu_);
    // Each reason once while it lasts (the follower retries every
    // kReconnectWait).
    new_reason = lost_reason_ != why;
    state_ = State::kLost;
    lost_reason_ = why;
  }
  if (new_reason) LOG(WARNING) << "replica: " << why;
  // Meanwhile a newer complete checkpoint from the files (a job that
  // ended, servers the replica cannot reach).
  host_->LoadCheckpoint(Host::Load::kNewer);
}

bool StreamFollower::FollowSession() {
  const std::pair<uint64_t, uint64_t> from = *host_->Served();
  absl::StatusOr<std::unique_ptr<PartSource>> source = connector_->Open(from.first, from.second);
  if (!source.ok()) {
    Lose(std::string(source.status().message()));
    Wait(kReconnectWait);
    return true;
  }
  if (state() == State::kBootstrapping) SetState(State::kFollowing);
  VersionAssembler assembler(options_.num_partitions);
  while (!stopping()) {
    std::string broken;
    std::shared_ptr<const VersionPart> part =
        (*source)->Next(absl::Now() + options_.poll_interval, &broken);
    if (part == nullptr) {
      if (broken.empty()) continue;
      Lose(broken);
      Wait(kReconnectWait);
      return true;  // Ask for the servers again, reopen every stream.
    }
    SetState(State::kFollowing);
    if (!TakePart(std::move(part), &assembler)) return false;
  }
  return true;
}

bool StreamFollower::TakePart(std::shared_ptr<const VersionPart> part,
                              VersionAssembler* assembler) {
  const std::pair<uint64_t, uint64_t> served = *host_->Served();
  if (std::make_pair(part->generation(), part->clock()) <= served) return true;  // Had it.
  if (absl::Status st = host_->CheckPart(*part); !st.ok()) {
    Record(absl::StrCat("refused ", st.ToString()));
    return true;
  }
  absl::StatusOr<std::optional<VersionAssembler::Complete>> complete =
      assembler->Add(std::move(part));
  if (!complete.ok()) {
    // Not one cut's parts (a map that moved between them, a faulty server).
    Record(std::string(complete.status().message()));
    return true;
  }
  if (!complete->has_value()) return true;
  return ApplyVersion(**complete, served);
}

void StreamFollower::Record(const std::string& error) {
  LOG_EVERY_N(WARNING, 10) << "replica: " << error;
  host_->RecordError(error);
}

bool StreamFollower::ApplyVersion(const VersionAssembler::Complete& complete,
                                  const std::pair<uint64_t, uint64_t>& served) {
  const ServedModel::StreamVersion& version = *complete.version;
  absl::StatusOr<std::optional<Applied>> applied =
      host_->Apply(complete, [&](uint64_t table_hash) { return Verify(version, table_hash); });
  if (!applied.ok()) {
    Record(absl::StrCat("stream version ", version.clock, ": ", applied.status().ToString()));
    return false;
  }
  if (!applied->has_value()) {
    LOG(INFO) << "replica: stream version " << version.clock << " of generation "
              << complete.generation << " does not continue version " << served.second
              << " of generation " << served.first << "; loading the newest complete checkpoint";
    return false;
  }
  const Applied& s = **applied;
  const VersionPart& first = *version.parts.front();
  const std::string pushes =
      TimePushes(version, absl::FromUnixMicros(complete.cut_micros) + s.cut_to_serve);
  LOG(INFO) << "replica: serving version " << version.clock << " (" << s.rows
            << " rows, table hash " << absl::StrCat(absl::Hex(s.table_hash, absl::kZeroPad16))
            << ") from the stream, generation " << complete.generation << ", built in " << s.build
            << (first.full()
                    ? std::string(" (full)")
                    : absl::StrCat(" (version ", s.from, " plus a delta on ", first.base_clock(),
                                   s.in_place ? ", in place)" : ", on a copy)"))
            << " from " << complete.bytes << " bytes; cut to serve " << s.cut_to_serve << pushes;
  return true;
}

absl::Status StreamFollower::Verify(const ServedModel::StreamVersion& version,
                                    uint64_t table_hash) {
  uint64_t servers = 0;
  for (const auto& part : version.parts) {
    if (!part->has_state_hash()) return absl::OkStatus();   // Cut before anyone asked.
    if (part->chunk() == 0) servers += part->state_hash();  // Each chunk carries it.
  }
  MutexLock lock(&mu_);
  if (table_hash == servers) {
    ++verified_versions_;
    return absl::OkStatus();
  }
  ++hash_mismatches_;
  return absl::DataLossError(absl::StrCat(
      "version ", version.clock, " built from the stream has table hash ",
      absl::Hex(table_hash, absl::kZeroPad16), ", the servers' rows at the cut hash to ",
      absl::Hex(servers, absl::kZeroPad16), "; not served"));
}

std::string StreamFollower::TimePushes(const ServedModel::StreamVersion& version,
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
      Metrics().push_to_serve.Observe(absl::ToDoubleSeconds(d));
    }
  }
  if (this_version.count() == 0) return "";
  return absl::StrCat("; push to serve p50 ", Seconds(this_version.Quantile(0.5)), " max ",
                      Seconds(this_version.max()), " (", this_version.count(), " pushes; all ",
                      push_to_serve_.count(), ": p50 ", Seconds(push_to_serve_.Quantile(0.5)),
                      " p99 ", Seconds(push_to_serve_.Quantile(0.99)), " max ",
                      Seconds(push_to_serve_.max()), ")");
}

}  // namespace replica
}  // namespace shardps

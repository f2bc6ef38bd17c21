// Replica: following the servers' delta stream (replica.h, "Following the
// servers' delta stream").
#include <algorithm>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/client/ps_channel.h"
#include "common/grpc_status.h"
#include "common/job_secret.h"
#include "common/mutex.h"
#include "common/status_macros.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "proto/scheduler.grpc.pb.h"
#include "replica/replica.h"

namespace shardps {
namespace replica {
namespace {

// How long a call to the scheduler may take, and the wait before a lost
// stream is opened again.
constexpr absl::Duration kSchedulerTimeout = absl::Seconds(5);
constexpr absl::Duration kReconnectWait = absl::Milliseconds(500);
// A server sends a message at least every 2 s (an idle one between cuts:
// PsService::kFollowIdle); one silent this long is cut off or stopped.
constexpr absl::Duration kSilentServer = absl::Seconds(15);
// Parts received and not yet taken, per session: a reader stops reading
// beyond it (the server's sending thread then waits, not training).
constexpr size_t kMaxQueuedParts = 64;
// Versions begun and not complete: the oldest is dropped beyond it.
constexpr size_t kMaxPendingVersions = 16;

// One FollowVersions call per server, from one version on, their parts in
// one queue.
class Session {
 public:
  Session(const std::vector<std::string>& addresses, uint64_t after_generation,
          uint64_t after_clock, bool verify) {
    FollowVersionsRequest request;
    request.set_after_generation(after_generation);
    request.set_after_clock(after_clock);
    request.set_verify(verify);
    for (const std::string& address : addresses) {
      auto stream = std::make_unique<Stream>();
      stream->address = address;
      Stream* s = stream.get();
      streams_.push_back(std::move(stream));
      s->thread = std::thread([this, s, request] { Read(s, request); });
    }
  }

  ~Session() {
    {
      MutexLock lock(&mu_);
      closed_ = true;
    }
    changed_.SignalAll();
    for (auto& s : streams_) s->context.TryCancel();
    for (auto& s : streams_) s->thread.join();
  }

  // The next part, nullptr at `deadline`; `broken` gets why a stream ended
  // or is silent (then the session is done).
  std::shared_ptr<const VersionPart> Next(absl::Time deadline, std::string* broken) {
    MutexLock lock(&mu_);
    while (queue_.empty() && broken_.empty() && absl::Now() < deadline) {
      changed_.WaitUntil(&mu_, deadline);
    }
    for (const auto& s : streams_) {
      if (broken_.empty() && queue_.empty() && absl::Now() - s->heard > kSilentServer) {
        broken_ = absl::StrCat("the server at ", s->address, " sent nothing for ",
                               absl::FormatDuration(kSilentServer),
                               " (it sends a message every 2 s: cut off or stopped)");
      }
    }
    *broken = broken_;
    if (queue_.empty()) return nullptr;
    std::shared_ptr<const VersionPart> part = std::move(queue_.front());
    queue_.pop_front();
    changed_.SignalAll();
    return part;
  }

 private:
  struct Stream {
    std::string address;
    grpc::ClientContext context;
    std::thread thread;
    absl::Time heard = absl::Now();  // The last message (mu_).
  };

  void Read(Stream* s, const FollowVersionsRequest& request) {
    std::string why;
    absl::StatusOr<std::unique_ptr<ParameterServer::Stub>> stub =
        NewParameterServerStub(s->address, /*max_message_bytes=*/INT32_MAX);
    if (!stub.ok()) {
      why = stub.status().ToString();
    } else {
      std::unique_ptr<grpc::ClientReader<VersionPart>> reader =
          (*stub)->FollowVersions(&s->context, request);
      while (true) {
        auto part = std::make_shared<VersionPart>();
        if (!reader->Read(part.get())) break;
        MutexLock lock(&mu_);
        s->heard = absl::Now();
        if (part->idle()) continue;
        while (queue_.size() >= kMaxQueuedParts && !closed_) changed_.Wait(&mu_);
        if (closed_) break;
        queue_.push_back(std::move(part));
        changed_.SignalAll();
      }
      why = FromGrpcStatus(reader->Finish()).ToString();
    }
    MutexLock lock(&mu_);
    if (broken_.empty() && !closed_) {
      broken_ = absl::StrCat("the stream of the server at ", s->address, " ended: ", why);
      changed_.SignalAll();
    }
  }

  std::vector<std::unique_ptr<Stream>> streams_;
  Mutex mu_;
  CondVar changed_;
  std::deque<std::shared_ptr<const VersionPart>> queue_ ABSL_GUARDED_BY(mu_);
  std::string broken_ ABSL_GUARDED_BY(mu_);
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
};

// The job's partition map (its servers' addresses) from the scheduler at
// `address`, one call (a member's: the job secret and TLS flags).
absl::StatusOr<PartitionMapProto> ServerAddresses(const std::string& address,
                                                  std::unique_ptr<Scheduler::Stub>* stub) {
  if (*stub == nullptr) {
    absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> credentials =
        ChannelCredentialsFromFlags();
    if (!credentials.ok()) return credentials.status();
    grpc::ChannelArguments args;
    ConfigureChannel(&args);
    *stub = Scheduler::NewStub(CreateJobChannel(address, *credentials, args));
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + kSchedulerTimeout));
  GetPartitionMapRequest request;
  PartitionMapProto map;
  RETURN_IF_ERROR(FromGrpcStatus((*stub)->GetPartitionMap(&ctx, request, &map)));
  return map;
}

// The parts of one version received so far (each server's part in one or
// more chunks).
struct Pending {
  std::shared_ptr<ServedModel::StreamVersion> version;
  std::vector<bool> held;  // By partition.
  uint32_t partitions = 0;
  // By server index: the chunks received, and the partitions its first
  // chunk named (every chunk of a part names the same).
  std::map<uint32_t, std::vector<bool>> chunks;
  std::map<uint32_t, std::vector<uint32_t>> partitions_of;
  uint64_t chunks_missing = 0;
  uint64_t bytes = 0;
  int64_t cut_micros = 0;  // The earliest server's copy.
};

}  // namespace

void Replica::FollowStream() {
  std::unique_ptr<Scheduler::Stub> scheduler;
  const uint32_t num_partitions = options_.config.cluster().num_partitions();
  // A part refused: the version's error.
  const auto record = [this](const std::string& error) {
    LOG_EVERY_N(WARNING, 10) << "replica: " << error;
    MutexLock lock(&mu_);
    last_error_ = error;
  };
  // The stream lost: the replica keeps its version, takes a newer complete
  // checkpoint from the files if there is one meanwhile (a job that ended,
  // servers it cannot reach), and tries again.
  const auto lost = [this](const std::string& why) {
    bool new_reason;
    {
      MutexLock lock(&mu_);
      new_reason = stream_error_ != why;
      stream_error_ = why;
    }
    // Each reason once while it lasts (the replica retries every poll).
    if (new_reason) LOG(WARNING) << "replica: " << why;
    Poll(PollMode::kNewer);
  };
  const auto following = [this] {
    MutexLock lock(&mu_);
    stream_error_.clear();
  };
  const auto wait = [this](absl::Duration d) {
    MutexLock lock(&mu_);
    const absl::Time until = absl::Now() + d;
    while (!stop_ && absl::Now() < until) changed_.WaitUntil(&mu_, until);
  };
  while (!stopping()) {
    // A version to follow from: a checkpoint first.
    std::shared_ptr<ServedModel> current = Current();
    if (current == nullptr) {
      wait(options_.poll_interval);
      PollOnce();
      continue;
    }
    absl::StatusOr<PartitionMapProto> map = ServerAddresses(options_.scheduler, &scheduler);
    if (!map.ok()) {
      lost(absl::StrCat("cannot get the servers from the scheduler at ", options_.scheduler, ": ",
                        map.status().ToString()));
      wait(kReconnectWait);
      continue;
    }
    uint64_t generation;
    {
      MutexLock lock(&mu_);
      generation = current_generation_;
    }
    const uint64_t clock = current->clock();
    current.reset();
    std::vector<std::string> addresses(map->server_addresses().begin(),
                                       map->server_addresses().end());
    addresses.erase(std::remove(addresses.begin(), addresses.end(), std::string()),
                    addresses.end());
    // Set when a version did not continue the one served: follow again
    // from a checkpoint.
    bool resync = false;
    {
      Session session(addresses, generation, clock, options_.verify_stream);
      std::map<std::pair<uint64_t, uint64_t>, Pending> pending;
      while (!stopping() && !resync) {
        std::string broken;
        std::shared_ptr<const VersionPart> part =
            session.Next(absl::Now() + options_.poll_interval, &broken);
        if (part == nullptr) {
          if (broken.empty()) continue;
          lost(broken);
          wait(kReconnectWait);
          break;  // Ask the scheduler again, reopen every stream.
        }
        following();
        std::shared_ptr<ServedModel> served = Current();
        uint64_t served_generation;
        {
          MutexLock lock(&mu_);
          served_generation = current_generation_;
        }
        const std::pair<uint64_t, uint64_t> key(part->generation(), part->clock());
        if (key <= std::make_pair(served_generation, served->clock())) continue;  // Had it.
        if (absl::Status st = served->CheckStreamPart(*part); !st.ok()) {
          record(absl::StrCat("refused ", st.ToString()));
          continue;
        }
        Pending& p = pending[key];
        if (p.version == nullptr) {
          p.version = std::make_shared<ServedModel::StreamVersion>();
          p.version->clock = part->clock();
          p.held.assign(num_partitions, false);
          p.cut_micros = part->cut_unix_micros();
        }
        const uint32_t server = part->server_index();
        const uint32_t num_chunks = std::max<uint32_t>(1, part->num_chunks());
        const std::vector<uint32_t> partitions(part->partitions().begin(),
                                               part->partitions().end());
        auto [received, first_chunk] = p.chunks.try_emplace(server, num_chunks, false);
        std::string refused;
        if (first_chunk) {
          for (uint32_t q : partitions) {
            if (p.held[q]) refused = "holds a partition another server's part holds";
          }
        } else if (received->second.size() != num_chunks || partitions != p.partitions_of[server]) {
          refused = "does not name the chunks and partitions of its first chunk";
        }
        if (refused.empty() && (part->chunk() >= num_chunks || received->second[part->chunk()])) {
          refused = absl::StrCat("chunk ", part->chunk(), " of ", num_chunks,
                                 " is out of range or came twice");
        }
        if (!refused.empty()) {
          // Not one cut's parts (a map that moved between them, a faulty
          // server): drop the version.
          record(absl::StrCat("version ", part->clock(), ": server ", server, "'s part ", refused,
                              "; dropped"));
          pending.erase(key);
          continue;
        }
        if (first_chunk) {
          for (uint32_t q : partitions) p.held[q] = true;
          p.partitions += partitions.size();
          p.partitions_of[server] = partitions;
          p.chunks_missing += num_chunks;
        }
        received->second[part->chunk()] = true;
        --p.chunks_missing;
        p.bytes += part->ByteSizeLong();
        p.cut_micros = std::min(p.cut_micros, part->cut_unix_micros());
        p.version->parts.push_back(part);
        if (p.partitions < num_partitions || p.chunks_missing > 0) {
          if (pending.size() > kMaxPendingVersions) pending.erase(pending.begin());
          continue;
        }
        Pending complete = std::move(p);
        pending.erase(pending.begin(), pending.upper_bound(key));
        absl::StatusOr<bool> applied =
            ApplyStreamVersion(complete.version, key.first, complete.cut_micros, complete.bytes);
        if (!applied.ok()) {
          record(absl::StrCat("stream version ", key.second, ": ", applied.status().ToString()));
          resync = true;
        } else if (!*applied) {
          LOG(INFO) << "replica: stream version " << key.second << " of generation " << key.first
                    << " does not continue version " << served->clock() << " of generation "
                    << served_generation << "; loading the newest complete checkpoint";
          resync = true;
        }
      }
    }
    if (resync) {
      // The session has ended: nothing is read while the checkpoint loads.
      const uint64_t before = Current()->clock();
      Poll(PollMode::kResync);
      if (Current()->clock() == before) wait(options_.poll_interval);
    }
  }
}

}  // namespace replica
}  // namespace shardps

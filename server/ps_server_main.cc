// ps_server: one parameter-server shard.
//
//   ps_server --config=job.pbtxt [--listen=127.0.0.1:0] [--index=0]
//             [--threads=N] [--port_file=path] [--control_token_file=path]
//
// Prints exactly one line to stdout once it listens,
//   PS_SERVER_LISTENING <host:port>
// (the launcher and tests parse it), and runs until SIGTERM or SIGINT. Without
// a scheduler it serves the contiguous partition map of the config's
// num_servers / num_partitions at version 1.
//
// With a scheduler, restart it with the same flags when it dies: it
// registers as a new process for its index and the scheduler restores its
// partitions (and rolls the job back, with recovery EXACT). Exit status: 0
// when the job ended (or on SIGTERM without a scheduler; 128 + signal on a
// signal before the job's end), 1 on a serving error, 2 on bad flags
// or when the scheduler refused it, 3 when the scheduler gave it up (another
// process took its index, or it was unreachable for 3 x dead_after_ms).
#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <utility>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/client/scheduler_client.h"
#include "common/config.h"
#include "common/init.h"
#include "common/job_secret.h"
#include "common/metrics.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "common/testing_stall.h"
#include "common/tls.h"
#include "glog/logging.h"
#include "server/helper_pool.h"
#include "server/ps_server.h"
#include "server/table.h"
#include "server/table_store.h"

ABSL_FLAG(std::string, config, shardps::EnvOr("SHARDPS_CONFIG", ""),
          "Job config (text-format shardps.JobConfig). Env: SHARDPS_CONFIG.");
ABSL_FLAG(std::string, listen, shardps::EnvOr("SHARDPS_LISTEN", "127.0.0.1:0"),
          "host:port to listen on; port 0 picks a free port. Env: SHARDPS_LISTEN.");
ABSL_FLAG(uint32_t, index, std::stoul(shardps::EnvOr("SHARDPS_INDEX", "0")),
          "This server's index (0-based). Env: SHARDPS_INDEX.");
ABSL_FLAG(std::string, scheduler, shardps::EnvOr("SHARDPS_SCHEDULER", ""),
          "Scheduler host:port: register there, take its partition map, "
          "heartbeat, and exit when the job ends. Env: SHARDPS_SCHEDULER.");
ABSL_FLAG(std::string, advertise, shardps::EnvOr("SHARDPS_ADVERTISE", ""),
          "host:port other processes reach this server at (default: the "
          "listening address; set it when listening on 0.0.0.0). Env: "
          "SHARDPS_ADVERTISE.");
ABSL_FLAG(int, threads, 0,
          "Max threads of gRPC's synchronous server, which serves the control "
          "RPCs (0 = gRPC's default). Pull and Push: --data_threads.");
ABSL_FLAG(int, data_threads, 0,
          "Threads serving Pull and Push, each on its own completion queue "
          "(0: one per core).");
ABSL_FLAG(int, table_helpers, -1,
          "Threads that help one large pull or push at a time with its "
          "stripes (-1: cores - 1, at most 3; 0: none).");
ABSL_FLAG(int, testing_checkpoint_write_delay_ms, 0,
          "Testing: each background checkpoint write sleeps this long first "
          "(fault tests kill a server during a write).");
ABSL_FLAG(std::string, testing_stall_at, "",
          "Testing: POINT:MARKER[,POINT:MARKER...]: the server stalls once at each "
          "named point of a partition move until killed (partitions_added, caught_up, "
          "switching_map; server/parameter_server_core.h CoreOptions::testing_stalls).");
ABSL_FLAG(std::string, control_token_file, shardps::EnvOr("SHARDPS_CONTROL_TOKEN_FILE", ""),
          "Only for a server without --scheduler (tools, tests): a file holding the "
          "token (a decimal number, not 0) its Checkpoint, Restore and Control "
          "callers must send; others may neither read nor write it (chmod 600). "
          "With a scheduler the token comes from the scheduler. Without it those "
          "RPCs are refused. Env: SHARDPS_CONTROL_TOKEN_FILE.");
ABSL_FLAG(uint64_t, control_token, std::stoull(shardps::EnvOr("SHARDPS_CONTROL_TOKEN", "0")),
          "Deprecated (a flag's value shows in the process list): "
          "--control_token_file. The token as a number. Env: SHARDPS_CONTROL_TOKEN.");
ABSL_FLAG(std::string, port_file, "",
          "If set, the chosen port is written to this file once listening.");

namespace shardps {
namespace {

// Registers with the scheduler, adopts its partition map and heartbeats; the
// heartbeat thread raises SIGTERM when the job ends (or the scheduler gives
// this server up), which the main thread's sigwait turns into a clean exit.
absl::StatusOr<std::unique_ptr<SchedulerClient>> JoinScheduler(const JobConfig& config,
                                                               const std::string& address,
                                                               PsServer* server) {
  ParameterServerCore* core = server->core();
  auto client = std::make_unique<SchedulerClient>(absl::GetFlag(FLAGS_scheduler));
  RegisterRequest request;
  request.set_role(SERVER);
  request.set_address(absl::GetFlag(FLAGS_advertise).empty() ? address
                                                             : absl::GetFlag(FLAGS_advertise));
  request.set_requested_index(absl::GetFlag(FLAGS_index));
  request.set_config_fingerprint(ConfigFingerprint(config));
  // The scheduler may send its first Control before Register's answer (with
  // the token) has been read here: it waits for the token, not refused.
  server->await_control_token(absl::Seconds(300));
  auto reg = client->Register(request, absl::Seconds(300));
  if (!reg.ok()) return reg.status();
  server->set_control_token(reg->control_token());
  if (reg->map().version() > 0) {
    ControlRequest control;
    control.set_map_version(reg->map().version());
    for (uint32_t owner : reg->map().owner()) control.add_partition_owner(owner);
    ControlResponse unused;
    absl::Status st = core->Control(control, &unused);
    if (!st.ok()) LOG(WARNING) << "adopting the scheduler's map: " << st;
  }
  LOG(INFO) << "server " << reg->index() << " joined the job at " << absl::GetFlag(FLAGS_scheduler);
  request.set_requested_index(reg->index());
  client->EnableRejoin(
      request, [core] { return core->map_version(); }, [core] { return core->generation(); },
      [server](const RegisterResponse& r) { server->set_control_token(r.control_token()); },
      [core](Rejoin* r) {  // A restarted scheduler learns the owners a move left.
        const std::shared_ptr<const PartitionMap> map = core->map();
        r->set_owner_map_version(map->version());
        for (uint32_t owner : map->owners()) r->add_partition_owner(owner);
      });
  client->StartHeartbeats(SERVER, reg->index(), reg->job_id(),
                          absl::Milliseconds(config.cluster().heartbeat_ms()),
                          absl::Milliseconds(config.cluster().dead_after_ms() * 3),
                          [](bool job_ended, const std::string& why) {
                            if (job_ended) {
                              LOG(INFO) << "stopping: " << why;
                              kill(getpid(), SIGTERM);  // Exit 0: the job is over.
                              return;
                            }
                            // Not the job's end: a supervisor must see a failure (and may start
                            // this server again; it then registers as a new process).
                            LOG(ERROR) << "stopping: " << why;
                            std::fflush(nullptr);
                            std::_Exit(3);
                          });
  return client;
}

// The control token of a server without a scheduler: --control_token_file,
// checked as a job secret file is (common/job_secret.h: a regular file
// others may neither read nor write and its group may not write), or the
// deprecated --control_token. 0 when neither is given. INVALID_ARGUMENT
// naming the file or the flags.
absl::StatusOr<uint64_t> ControlTokenFromFlags() {
  const std::string path = absl::GetFlag(FLAGS_control_token_file);
  const uint64_t flag = absl::GetFlag(FLAGS_control_token);
  if (!path.empty() && flag != 0) {
    return absl::InvalidArgumentError("give --control_token_file or --control_token, not both");
  }
  if (flag != 0) {
    const char* env = std::getenv("SHARDPS_CONTROL_TOKEN");
    if (env == nullptr || std::to_string(flag) != env) {
      LOG(WARNING) << "--control_token is deprecated: its value shows in the process "
                      "list (ps); give --control_token_file";
    }
    return flag;
  }
  if (path.empty()) return 0;
  ASSIGN_OR_RETURN(const std::string text, ReadPrivateFile(path, "control token file"));
  uint64_t token = 0;
  if (!absl::SimpleAtoi(text, &token) || token == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the control token file ", path, " does not hold a number other than 0"));
  }
  return token;
}

bool HasEvictionByClocks(const JobConfig& config) {
  for (const TableConfig& t : config.tables()) {
    if (t.eviction().ttl_clocks() > 0) return true;
  }
  return false;
}

// Per-table Prometheus series, refreshed from Table::Counters() snapshots by
// a Poller (the counters' deltas feed Prometheus counters).
class TableMetrics {
 public:
  explicit TableMetrics(TableStore* store) {
    for (Table* t : store->tables()) {
      const metrics::Labels l = {{"table", t->config().name()}};
      series_.push_back(
          {t, metrics::GetGauge("shardps_table_rows", "Live rows.", l),
           metrics::GetGauge("shardps_table_pending_rows", "Keys seen, not yet admitted.", l),
           metrics::GetGauge("shardps_table_bytes", "Memory of rows and index (estimate).", l),
           metrics::GetCounter("shardps_table_rows_admitted_total", "Rows created.", l),
           metrics::GetCounter("shardps_table_rows_evicted_total", "Rows dropped by eviction.",
                               l)});
    }
  }
  void Refresh() {
    for (Series& s : series_) {
      const TableCounters c = s.table->Counters();
      s.rows.Set(static_cast<double>(c.live_rows));
      s.pending.Set(static_cast<double>(c.pending_rows));
      s.bytes.Set(static_cast<double>(c.bytes));
      s.admitted.Increment(static_cast<double>(c.admitted_rows - s.last_admitted));
      s.evicted.Increment(static_cast<double>(c.evicted_rows - s.last_evicted));
      s.last_admitted = c.admitted_rows;
      s.last_evicted = c.evicted_rows;
    }
  }

 private:
  struct Series {
    Table* table;
    prometheus::Gauge& rows;
    prometheus::Gauge& pending;
    prometheus::Gauge& bytes;
    prometheus::Counter& admitted;
    prometheus::Counter& evicted;
    uint64_t last_admitted = 0, last_evicted = 0;
  };
  std::vector<Series> series_;
};

// Prints "PS_SERVER_RESULT index=I rows=N weights_checksum=H updates=U": H
// is the XOR over this server's rows of a hash of (table, key, weight bits),
// so the XOR of every server's H fingerprints the job's weights whatever the
// sharding (tests compare jobs with it; optimizer state is not included). U
// counts the optimizer steps this process's pushes applied to rows: summed
// over the servers, every row of every push applied once, wherever it was.
void PrintWeightsChecksum(uint32_t index, TableStore* store) {
  uint64_t h = 0, rows = 0, updates = 0;
  for (const Table* table : store->tables()) {
    updates += table->Counters().rows_updated;
    const uint32_t dim = table->dim();
    const uint64_t salt = Mix64(uint64_t{table->id()} + 0x51ed270b27af1d3bULL);
    table->ForEachRow([&](uint64_t key, const float* payload) {
      uint64_t r = Mix64(salt ^ key);
      for (uint32_t i = 0; i < dim; ++i) {
        uint32_t bits;
        std::memcpy(&bits, payload + i, sizeof bits);
        r = Mix64(r ^ bits);
      }
      h ^= r;
      ++rows;
    });
  }
  std::printf("PS_SERVER_RESULT index=%u rows=%llu weights_checksum=%016llx updates=%llu\n", index,
              static_cast<unsigned long long>(rows), static_cast<unsigned long long>(h),
              static_cast<unsigned long long>(updates));
  std::fflush(stdout);
}

// The server's options from its flags and the job config.
PsServerOptions OptionsFromFlags(const JobConfig& config) {
  PsServerOptions options;
  options.config = config;
  options.server_index = absl::GetFlag(FLAGS_index);
  options.listen = absl::GetFlag(FLAGS_listen);
  options.threads = absl::GetFlag(FLAGS_threads);
  options.data_threads = absl::GetFlag(FLAGS_data_threads);
  options.checkpoint_write_delay =
      absl::Milliseconds(absl::GetFlag(FLAGS_testing_checkpoint_write_delay_ms));
  return options;
}

// With eviction by clocks: polls the scheduler's clock every heartbeat_ms and
// grants it to the core (nullptr without eviction by clocks).
std::unique_ptr<metrics::Poller> FollowClockGrants(const JobConfig& config,
                                                   ParameterServerCore* core,
                                                   SchedulerClient* client) {
  if (!HasEvictionByClocks(config)) return nullptr;
  return std::make_unique<metrics::Poller>(
      absl::Milliseconds(config.cluster().heartbeat_ms()), [core, client] {
        absl::StatusOr<JobStatusResponse> status = client->JobStatus();
        if (status.ok()) core->GrantClock(status->max_clock());
      });
}

int Run() {
  const std::string config_path = absl::GetFlag(FLAGS_config);
  if (config_path.empty()) {
    LOG(ERROR) << "--config is required";
    return 2;
  }
  auto config = LoadJobConfig(config_path);
  if (!config.ok()) {
    LOG(ERROR) << config.status().message();
    return 2;
  }
  const absl::StatusOr<uint64_t> control_token = ControlTokenFromFlags();
  if (!control_token.ok()) {
    LOG(ERROR) << control_token.status().message();
    return 2;
  }
  // Block the stop signals in every thread (gRPC's threads inherit the
  // mask); the main thread takes them with sigwait.
  sigset_t stop;
  sigemptyset(&stop);
  sigaddset(&stop, SIGTERM);
  sigaddset(&stop, SIGINT);
  pthread_sigmask(SIG_BLOCK, &stop, nullptr);

  PsServerOptions options = OptionsFromFlags(*config);
  absl::StatusOr<std::vector<TestingStall>> stalls =
      ParseTestingStalls("--testing_stall_at", absl::GetFlag(FLAGS_testing_stall_at), kStallPoints);
  if (!stalls.ok()) {
    LOG(ERROR) << stalls.status().message();
    return 2;
  }
  options.testing_stalls = *std::move(stalls);
  auto server = PsServer::Start(options);
  if (!server.ok()) {
    LOG(ERROR) << server.status();
    return 1;
  }
  if (absl::Status st = metrics::StartExposerFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  (*server)->set_control_token(*control_token);
  TableMetrics table_metrics((*server)->core()->store());
  metrics::Poller table_poller(absl::Seconds(2), [&] { table_metrics.Refresh(); });
  std::printf("PS_SERVER_LISTENING %s\n", (*server)->address().c_str());
  std::fflush(stdout);
  if (absl::Status st = WritePortFile(absl::GetFlag(FLAGS_port_file), (*server)->port());
      !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  std::unique_ptr<SchedulerClient> scheduler;
  // Eviction by clocks follows the scheduler's word on the job's clock, not
  // the clocks pushes claim (parameter_server_core.h): none until it speaks.
  std::unique_ptr<metrics::Poller> clock_grants;
  if (!absl::GetFlag(FLAGS_scheduler).empty()) {
    (*server)->core()->GrantClock(0);
    auto joined = JoinScheduler(*config, (*server)->address(), server->get());
    if (!joined.ok()) {
      LOG(ERROR) << "cannot join the job: " << joined.status();
      (*server)->Shutdown();
      (*server)->Wait();
      return 2;
    }
    scheduler = *std::move(joined);
    clock_grants = FollowClockGrants(*config, (*server)->core(), scheduler.get());
  }
  int sig = 0;
  sigwait(&stop, &sig);
  // Exit 0 means "the job ended" to every supervisor (deploy/): a server
  // stopped by a signal while its job runs exits 128 + signal instead, so a
  // supervisor treats it as a failure and starts it again.
  const bool job_ended = scheduler == nullptr || scheduler->job_ended();
  LOG(INFO) << "signal " << sig << ": shutting down"
            << (job_ended ? "" : " before the job's end (exit status 128 + signal)");
  clock_grants.reset();
  (*server)->Shutdown();
  (*server)->Wait();
  PrintWeightsChecksum(absl::GetFlag(FLAGS_index), (*server)->core()->store());
  return job_ended ? 0 : 128 + sig;
}

}  // namespace
}  // namespace shardps

int main(int argc, char** argv) {
  shardps::TuneMallocForLargeMessages();
  shardps::InitProcess(argc, argv,
                       "ps_server --config=job.pbtxt [--listen=host:port] "
                       "[--index=N] [--threads=N] [--port_file=path]");
  if (absl::Status st = shardps::InitTlsFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  if (absl::Status st = shardps::InitJobSecretFromFlags(); !st.ok()) {
    LOG(ERROR) << st;
    return 2;
  }
  shardps::HelperPool::SetSharedHelpers(absl::GetFlag(FLAGS_table_helpers));
  return shardps::Run();
}

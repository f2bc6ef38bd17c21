// Fuzz target: arbitrary serialized requests into the parameter server's
// core (server/parameter_server_core.h): Pull, Push, InitRows, Control,
// TableInfo, Checkpoint, Restore and the scheduler's clock grants, in
// sequence, on a fresh core per input.
//
// Input: the first byte picks the consistency mode (mod 3: SSP(2), BSP,
// ASP); the rest is a sequence of up to kMaxRequests records
//   [kind byte (mod 8)][length, 2 bytes little-endian][length bytes]
// whose bytes are parsed as the request of that kind (0 Pull, 1 Push,
// 2 InitRows, 3 Control, 4 TableInfo, 5 Checkpoint, 6 Restore; 7 GrantClock,
// its first up to 8 bytes a little-endian clock); bytes that do not parse
// are skipped. Checkpoints go to the config's checkpoint.dir, a
// directory of this process emptied before each input (requests name no
// path: whatever they hold, nothing is written elsewhere).
// The core is server 0 of 2, 2 workers, batch size 4, 16 partitions, tables:
// sparse "emb" (dim 4, Adam, admission after 2 pushes, unadmitted keys on the
// shared row, REJECT non-finite; 104 keys a request, the 26 Criteo fields),
// sparse "skip" (dim 3, Adagrad, SKIP_AND_COUNT with max_gradient_abs 100,
// ttl_clocks 3; 4 keys a request), dense "mlp" (60 elements in chunks of 8,
// SGD) and dense "wide" (no dense_size and no model: as many chunks as one
// 64 KiB message). Messages are capped at 64 KiB. BSP pulls get a deadline
// that has already passed, so a pull that would block answers
// DEADLINE_EXCEEDED.
//
// Checked: every status is one of the codes the header documents; an
// accepted pull answers every table in order with keys * dim values of the
// requested encoding; an accepted pull, push or InitRows carries at most
// max_keys_per_request keys of a sparse table (a training pull, a push and
// an InitRows) and only chunk indexes below the dense table's chunks; the
// eviction clock never passes the last grant; every row's weights and
// optimizer state stay finite (gradients are bounded); TableInfo and Evict
// always work; an accepted checkpoint is written under the config's
// checkpoint.dir.
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "common/checkpoint/file_io.h"
#include "common/codec.h"
#include "common/config.h"
#include "common/partition.h"
#include "google/protobuf/message.h"
#include "proto/ps.pb.h"
#include "server/parameter_server_core.h"
#include "tests/fuzz/fuzz_target.h"

namespace shardps {
namespace fuzz {
namespace {

constexpr int kMaxRequests = 32;
constexpr uint32_t kPartitions = 16;
enum Kind {
  kPull = 0,
  kPush,
  kInitRows,
  kControl,
  kTableInfo,
  kCheckpoint,
  kRestore,
  kGrant,
  kNumKinds
};

// This process's checkpoint root.
const std::string& Root() {
  static const std::string root =
      absl::StrCat(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp",
                   "/server_core_fuzz_ckpt_", getpid());
  return root;
}

JobConfig MakeConfig(int mode) {
  static const char* const kModes[] = {"SSP staleness: 2", "BSP", "ASP"};
  const std::string text = std::string(R"pb(
name: "fuzz"
tables {
  id: 1 name: "emb" dim: 4 seed: 5
  init { kind: UNIFORM scale: 0.1 }
  optimizer { adam { learning_rate: 0.01 } }
  admission { min_count: 2 }
}
tables {
  id: 2 name: "skip" dim: 3 seed: 6 non_finite: SKIP_AND_COUNT
  max_gradient_abs: 100 eviction { ttl_clocks: 3 }
  optimizer { adagrad { learning_rate: 0.1 } }
}
tables {
  id: 3 name: "mlp" kind: DENSE dense_size: 60 seed: 7
  init { kind: UNIFORM scale: 0.1 }
  optimizer { sgd { learning_rate: 0.1 } }
}
tables {
  id: 4 name: "wide" kind: DENSE seed: 8
  init { kind: ZEROS }
  optimizer { sgd { learning_rate: 0.1 } }
}
data { train_files: "train.tsv" }
training { batch_size: 4 }
checkpoint { dir: ")pb") + Root() +
                           R"pb(" }
cluster {
  num_servers: 2 num_workers: 2 num_partitions: 16
  max_message_bytes: 65536 dense_chunk_size: 8 mode: )pb" +
                           kModes[mode] + "}";
  auto config = ParseJobConfig(text, "server_core_fuzz");
  FuzzCheck(config.ok(), "the fuzz config is valid");
  return *config;
}

bool Documented(const absl::Status& s) {
  switch (s.code()) {
    case absl::StatusCode::kOk:
    case absl::StatusCode::kInvalidArgument:
    case absl::StatusCode::kAborted:
    case absl::StatusCode::kResourceExhausted:
    case absl::StatusCode::kFailedPrecondition:
    case absl::StatusCode::kAlreadyExists:
    case absl::StatusCode::kDeadlineExceeded:
    case absl::StatusCode::kUnavailable:
    case absl::StatusCode::kNotFound:  // Checkpoint and Restore only.
    case absl::StatusCode::kDataLoss:
      return true;
    default:
      return false;
  }
}

void CheckPull(ParameterServerCore* core, const PullRequest& request,
               const PullResponse& response) {
  FuzzCheck(response.tables_size() == request.tables_size(), "pull answers every table");
  const size_t width = BytesPerValue(static_cast<Encoding>(request.encoding()));
  for (int i = 0; i < request.tables_size(); ++i) {
    const TableKeys& tk = request.tables(i);
    const TableValues& tv = response.tables(i);
    FuzzCheck(tv.table_id() == tk.table_id(), "pull answers in order");
    const TableConfig* t = nullptr;
    for (const TableConfig& c : core->config().tables()) {
      if (c.id() == tk.table_id()) t = &c;
    }
    FuzzCheck(t != nullptr, "pull of a known table");
    FuzzCheck(tv.values().size() == tk.keys_size() * size_t{tv.dim()} * width, "pull values size");
  }
}

// The keys of one table of an accepted request are within its limits
// (server/request_limits.h): `bounded` if the request creates rows.
void CheckKeys(ParameterServerCore* core, uint32_t table_id, const uint64_t* keys, size_t n,
               bool bounded) {
  const Table* table = core->store()->FindTable(table_id);
  FuzzCheck(table != nullptr, "an accepted request names known tables");
  if (table->dense()) {
    FuzzCheck(table->num_chunks() > 0, "a dense table is always sized");
    for (size_t i = 0; i < n; ++i) {
      FuzzCheck(keys[i] < table->num_chunks(), "accepted chunk indexes are in range");
    }
  } else if (bounded) {
    FuzzCheck(n <= table->config().max_keys_per_request(),
              "an accepted request carries at most max_keys_per_request keys");
  }
}

// GrantClock's last clock, if any (per input).
struct Grants {
  bool any = false;
  uint64_t last = 0;
};

// Runs one request; true if it was accepted.
bool RunOne(ParameterServerCore* core, int kind, const uint8_t* data, size_t size, Grants* grants) {
  absl::Status status;
  if (kind == kGrant) {
    uint64_t clock = 0;
    for (size_t i = 0; i < std::min<size_t>(size, 8); ++i) clock |= uint64_t{data[i]} << (8 * i);
    core->GrantClock(clock);
    *grants = {true, clock};
    return false;
  }
  if (kind == kPull) {
    PullRequest request;
    PullResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    status = core->Pull(request, absl::Now(), &response);
    if (status.ok()) {
      CheckPull(core, request, response);
      for (const TableKeys& tk : request.tables()) {
        CheckKeys(core, tk.table_id(), tk.keys().data(), tk.keys_size(),
                  request.purpose() == TRAIN);
      }
    }
  } else if (kind == kPush) {
    PushRequest request;
    PushResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    status = core->Push(request, &response);
    if (status.ok()) {
      for (const TableGradients& tg : request.tables()) {
        CheckKeys(core, tg.table_id(), tg.keys().data(), tg.keys_size(), true);
      }
    }
  } else if (kind == kInitRows) {
    InitRowsRequest request;
    InitRowsResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    status = core->InitRows(request, &response);
    if (status.ok()) {
      CheckKeys(core, request.table_id(), request.keys().data(), request.keys_size(), true);
    }
  } else if (kind == kControl) {
    ControlRequest request;
    ControlResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    status = core->Control(request, &response);
  } else if (kind == kCheckpoint) {
    CheckpointRequest request;
    CheckpointResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    status = core->Checkpoint(request, &response);
    if (status.ok() && !response.checkpoint_dir().empty()) {
      FuzzCheck(response.checkpoint_dir().rfind(Root() + "/", 0) == 0,
                "a checkpoint is written under the config's checkpoint.dir");
    }
  } else if (kind == kRestore) {
    RestoreRequest request;
    RestoreResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    status = core->Restore(request, &response);
  } else {
    TableInfoRequest request;
    TableInfoResponse response;
    if (!request.ParseFromArray(data, static_cast<int>(size))) return false;
    FuzzCheck(core->TableInfo(request, &response).ok(), "TableInfo works");
    return false;
  }
  if (Verbose() && !status.ok()) {
    std::fprintf(stderr, "kind %d: %s\n", kind, status.ToString().c_str());
  }
  FuzzCheck(Documented(status), "status code is documented");
  FuzzCheck(status.ok() || !status.message().empty(), "refusal has a message");
  return status.ok();
}

// --- Seeds ---------------------------------------------------------------

void AddRecord(int kind, const google::protobuf::Message& m, std::string* out) {
  const std::string bytes = m.SerializeAsString();
  out->push_back(static_cast<char>(kind));
  out->push_back(static_cast<char>(bytes.size() & 0xff));
  out->push_back(static_cast<char>(bytes.size() >> 8));
  *out += bytes;
}

// The first `n` keys of `table` below `limit` that server 0 owns.
std::vector<uint64_t> Owned(uint32_t table, size_t n, uint64_t limit = 1000) {
  auto map = PartitionMap::Contiguous(1, kPartitions, 2);
  FuzzCheck(map.ok(), "contiguous map");
  std::vector<uint64_t> keys;
  for (uint64_t k = 0; k < limit && keys.size() < n; ++k) {
    if (map->ServerOf(table, k) == 0) keys.push_back(k);
  }
  return keys;
}

std::string Floats(size_t n, float value, Encoding encoding) {
  std::vector<float> v(n, value);
  std::string out;
  if (n > 0) EncodeValues(v.data(), n, encoding, &out);
  return out;
}

PullRequest Pull(uint64_t clock, ValueEncoding encoding) {
  PullRequest p;
  p.set_map_version(1);
  p.set_encoding(encoding);
  p.set_clock(clock);
  for (uint32_t t = 1; t <= 3; ++t) {
    TableKeys* tk = p.add_tables();
    tk->set_table_id(t);
    for (uint64_t k : Owned(t, t == 3 ? 2 : 3, t == 3 ? 7 : 1000)) {
      tk->add_keys(k);
    }
  }
  return p;
}

PushRequest Push(uint32_t rank, uint64_t clock, ValueEncoding encoding, float grad) {
  PushRequest p;
  p.set_map_version(1);
  p.set_encoding(encoding);
  p.set_worker_rank(rank);
  p.set_clock(clock);
  const uint32_t dims[] = {0, 4, 3, 8};
  for (uint32_t t = 1; t <= 3; ++t) {
    TableGradients* tg = p.add_tables();
    tg->set_table_id(t);
    const std::vector<uint64_t> keys = Owned(t, 2, t == 3 ? 7 : 1000);
    for (uint64_t k : keys) tg->add_keys(k);
    tg->set_gradients(Floats(keys.size() * dims[t], grad, static_cast<Encoding>(encoding)));
  }
  return p;
}

}  // namespace

std::vector<std::string> FuzzSeeds() {
  std::string async(1, '\0');
  AddRecord(kPull, Pull(0, FP32), &async);
  AddRecord(kPush, Push(0, 0, FP32, 0.5f), &async);
  AddRecord(kPull, Pull(1, BF16), &async);
  PushRequest lr = Push(1, 1, FP16, -0.25f);
  lr.set_lr_scale(0.5f);
  AddRecord(kPush, lr, &async);
  InitRowsRequest init;
  init.set_map_version(1);
  init.set_table_id(1);
  for (uint64_t k : Owned(1, 2)) init.add_keys(k);
  init.set_values(Floats(8, 0.125f, Encoding::kFp32));
  AddRecord(kInitRows, init, &async);
  ControlRequest control;
  control.set_map_version(2);
  for (uint32_t p = 0; p < kPartitions; ++p) control.add_partition_owner(p % 2);
  control.add_active_workers(0);
  control.add_active_workers(1);
  AddRecord(kControl, control, &async);
  AddRecord(kTableInfo, TableInfoRequest(), &async);
  CheckpointRequest checkpoint;
  checkpoint.set_clock(1);
  AddRecord(kCheckpoint, checkpoint, &async);
  RestoreRequest restore;
  restore.set_clock(1);
  restore.set_generation(3);
  AddRecord(kRestore, restore, &async);
  restore.Clear();
  restore.set_initial(true);
  AddRecord(kRestore, restore, &async);
  std::string grant_clock(8, '\0');
  grant_clock[0] = 1;
  async.push_back(static_cast<char>(kGrant));
  async.push_back(8);
  async.push_back(0);
  async += grant_clock;
  AddRecord(kPush, Push(0, ~uint64_t{0}, FP32, 0.5f), &async);
  std::string asp = async;
  asp[0] = 2;

  std::string bsp(1, '\1');
  AddRecord(kPush, Push(0, 0, FP32, 1.0f), &bsp);
  AddRecord(kPush, Push(1, 0, FP16, 2.0f), &bsp);
  AddRecord(kPull, Pull(1, FP32), &bsp);
  AddRecord(kPush, Push(0, 1, FP32, 1.0f), &bsp);
  AddRecord(kPull, Pull(2, FP16), &bsp);           // Blocks: clock 1 is open.
  AddRecord(kPush, Push(0, 1, FP32, 1.0f), &bsp);  // ALREADY_EXISTS.
  AddRecord(kControl, control, &bsp);
  checkpoint.set_clock(1);
  checkpoint.set_phase(CheckpointRequest::COPY);
  AddRecord(kCheckpoint, checkpoint, &bsp);
  checkpoint.set_phase(CheckpointRequest::COLLECT);
  AddRecord(kCheckpoint, checkpoint, &bsp);
  AddRecord(kTableInfo, TableInfoRequest(), &bsp);
  return {async, asp, bsp};
}

}  // namespace fuzz
}  // namespace shardps

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shardps;        // NOLINT
  using namespace shardps::fuzz;  // NOLINT
  if (size == 0) return 0;
  // Each fresh table carves its rows from 2 MiB chunks advised as huge
  // pages; zeroing those dominates a short input. 4 KiB pages here.
  static const int no_thp = prctl(PR_SET_THP_DISABLE, 1, 0, 0, 0);
  (void)no_thp;
  FuzzCheck(checkpoint::RemoveAll(Root()).ok(), "the checkpoint root is emptied");
  CoreOptions options;
  static const JobConfig configs[3] = {MakeConfig(0), MakeConfig(1), MakeConfig(2)};
  options.config = configs[data[0] % 3];
  auto core = ParameterServerCore::Create(options);
  FuzzCheck(core.ok(), "the fuzz core builds");
  bool accepted = false;
  Grants grants;
  size_t pos = 1;
  for (int i = 0; i < kMaxRequests && pos + 3 <= size; ++i) {
    const int kind = data[pos] % kNumKinds;
    const size_t len = std::min<size_t>(data[pos + 1] | (data[pos + 2] << 8), size - pos - 3);
    accepted |= RunOne(core->get(), kind, data + pos + 3, len, &grants);
    pos += 3 + len;
    FuzzCheck(!grants.any || (*core)->eviction_clock() <= grants.last,
              "the eviction clock never passes the last grant");
  }
  (void)(*core)->Evict();
  for (const Table* table : (*core)->store()->tables()) {
    const size_t floats = table->dim() + table->state_size();
    table->ForEachRow([&](uint64_t, const float* payload) {
      FuzzCheck(AllFinite(payload, floats), "rows and their optimizer state stay finite");
    });
  }
  TableInfoResponse info;
  FuzzCheck((*core)->TableInfo(TableInfoRequest(), &info).ok(), "TableInfo works");
  CountOutcome(accepted);
  return 0;
}

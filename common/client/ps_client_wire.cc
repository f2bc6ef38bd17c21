#include "common/client/ps_client_wire.h"

#include <string>

#include "absl/strings/str_cat.h"

namespace shardps {
namespace ps_client_internal {
namespace {

// Fills tg's keys and sparse form from `positions` of `ref`, unless the full
// rows are no bigger (false: tg left untouched). An element sent costs its
// value and an index gap of 1-5 bytes (2 assumed), against the full form's
// zeros.
bool AddSparse(const TableRef& ref, const std::vector<uint32_t>& positions, Encoding encoding,
               TableGradients* tg) {
  size_t nonzero = 0;
  for (uint32_t pos : positions) {
    const float* g = ref.grads + size_t{pos} * ref.dim;
    for (uint32_t j = 0; j < ref.dim; ++j) nonzero += g[j] != 0.0f;
  }
  const size_t width = BytesPerValue(encoding);
  if (nonzero * (width + 2) >= positions.size() * ref.dim * width) return false;
  SparseGradients* sp = tg->mutable_sparse();
  std::vector<uint32_t> gaps;
  gaps.reserve(nonzero);
  sp->mutable_values()->reserve(nonzero * width);
  uint32_t last = 0;
  for (size_t k = 0; k < positions.size(); ++k) {
    tg->mutable_keys()->AddAlreadyReserved(ref.keys[positions[k]]);
    AppendNonZeros(ref.grads + size_t{positions[k]} * ref.dim, ref.dim,
                   static_cast<uint32_t>(k * ref.dim), encoding, &gaps, &last,
                   sp->mutable_values());
  }
  sp->mutable_index_gaps()->Add(gaps.begin(), gaps.end());
  return true;
}

// Calls fn(k, first, count) for each maximal run of consecutive positions:
// positions[k + r] == first + r for r < count. A single-server op's
// positions are one run (0..n-1), so its rows move in one encode or decode.
template <typename Fn>
void ForEachRun(const std::vector<uint32_t>& positions, Fn fn) {
  size_t k = 0;
  while (k < positions.size()) {
    size_t count = 1;
    while (k + count < positions.size() && positions[k + count] == positions[k] + count) {
      ++count;
    }
    fn(k, positions[k], count);
    k += count;
  }
}

}  // namespace

void AddPullTable(const TableRef& ref, const std::vector<uint32_t>& positions,
                  PullRequest* request) {
  TableKeys* tk = request->add_tables();
  tk->set_table_id(ref.table_id);
  tk->set_with_state(ref.with_state);
  auto* keys = tk->mutable_keys();
  keys->Reserve(positions.size());
  ForEachRun(positions, [&](size_t, uint32_t first, size_t count) {
    keys->Add(ref.keys + first, ref.keys + first + count);
  });
}

void AddPushTable(const TableRef& ref, const std::vector<uint32_t>& positions, Encoding encoding,
                  PushRequest* request) {
  TableGradients* tg = request->add_tables();
  tg->set_table_id(ref.table_id);
  auto* keys = tg->mutable_keys();
  keys->Reserve(positions.size());
  if (ref.sparse && AddSparse(ref, positions, encoding, tg)) return;
  const size_t row_bytes = size_t{ref.dim} * BytesPerValue(encoding);
  std::string* bytes = tg->mutable_gradients();
  bytes->resize(positions.size() * row_bytes);
  ForEachRun(positions, [&](size_t k, uint32_t first, size_t count) {
    keys->Add(ref.keys + first, ref.keys + first + count);
    EncodeValuesTo(ref.grads + size_t{first} * ref.dim, count * ref.dim, encoding,
                   bytes->data() + k * row_bytes);
  });
}

absl::Status ScatterPull(const std::vector<TableRef>& tables, const Part& part,
                         const PullResponse& answer, Encoding encoding) {
  if (answer.tables_size() != static_cast<int>(part.items.size())) {
    return absl::DataLossError("pull answer has the wrong number of tables");
  }
  for (size_t i = 0; i < part.items.size(); ++i) {
    const auto& [t, positions] = part.items[i];
    const TableRef& ref = tables[t];
    if (answer.tables(i).dim() != ref.dim) {
      return absl::DataLossError(absl::StrCat(
          "pull answer for table ", ref.table_id, " has rows of ", answer.tables(i).dim(),
          " values, expected ", ref.dim, ref.with_state ? " (weights and optimizer state)" : ""));
    }
    const std::string& values = answer.tables(i).values();
    const size_t row_bytes = size_t{ref.dim} * BytesPerValue(encoding);
    if (values.size() != positions.size() * row_bytes) {
      return absl::DataLossError(absl::StrCat("pull answer for table ", ref.table_id, " has ",
                                              values.size(), " bytes, expected ",
                                              positions.size() * row_bytes));
    }
    absl::Status st;
    ForEachRun(positions, [&](size_t k, uint32_t first, size_t count) {
      if (!st.ok()) return;
      st = DecodeValues(absl::string_view(values).substr(k * row_bytes, count * row_bytes),
                        encoding, count * ref.dim, ref.out + size_t{first} * ref.dim);
    });
    if (!st.ok()) return st;
  }
  return absl::OkStatus();
}

}  // namespace ps_client_internal
}  // namespace shardps

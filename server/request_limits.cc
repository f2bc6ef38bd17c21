#include "server/request_limits.h"

#if defined(__SSE2__)
#include <emmintrin.h>
#endif

#include <algorithm>
#include <cmath>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/config.h"

namespace shardps {
namespace {

// As worker/data/fields.h: with no `fields`, 26 Criteo columns feed the
// first SPARSE table other than model.wide_table, and the wide table too;
// num_dense 0 means 13.
constexpr uint64_t kCriteoNumCategorical = 26;
constexpr uint64_t kCriteoNumDense = 13;

bool IsSparse(const TableConfig& t) {
  return t.kind() == TableConfig::SPARSE || t.kind() == TableConfig::KIND_UNSPECIFIED;
}

const TableConfig* FirstSparseTable(const JobConfig& config) {
  for (const TableConfig& t : config.tables()) {
    if (IsSparse(t) && t.name() != config.model().wide_table()) return &t;
  }
  return nullptr;
}

// The fields that feed `table` (a SPARSE table of `config`).
uint64_t FieldsFeeding(const JobConfig& config, const TableConfig& table) {
  if (config.fields_size() == 0) {
    const TableConfig* first = FirstSparseTable(config);
    const bool fed = (first != nullptr && first->id() == table.id()) ||
                     table.name() == config.model().wide_table();
    return fed ? kCriteoNumCategorical : 0;
  }
  uint64_t n = 0;
  for (const FieldConfig& f : config.fields()) n += f.table() == table.name();
  return n;
}

// Parameters of an MLP from `in` through `sizes` (weights and biases).
uint64_t MlpParams(uint64_t in, const std::vector<uint64_t>& sizes) {
  uint64_t n = 0;
  for (uint64_t out : sizes) {
    n += in * out + out;
    in = out;
  }
  return n;
}

}  // namespace

uint64_t ModelDenseParams(const JobConfig& config) {
  const ModelConfig& m = config.model();
  if (m.kind() != ModelConfig::KIND_UNSPECIFIED && m.kind() != ModelConfig::DLRM) return 0;
  if (m.bottom_mlp_size() == 0) return 0;
  // Fields of the wide table (model.wide_table) are not interaction vectors.
  uint64_t fields = 0;
  for (const FieldConfig& f : config.fields()) fields += f.table() != m.wide_table();
  if (config.fields_size() == 0) {
    if (FirstSparseTable(config) == nullptr) return 0;
    fields = kCriteoNumCategorical;
  }
  const uint64_t num_dense =
      config.data().num_dense() == 0 ? kCriteoNumDense : config.data().num_dense();
  const std::vector<uint64_t> bottom(m.bottom_mlp().begin(), m.bottom_mlp().end());
  std::vector<uint64_t> top(m.top_mlp().begin(), m.top_mlp().end());
  top.push_back(1);
  const uint64_t vectors = 1 + fields;
  const uint64_t pairs = vectors * (vectors - 1) / 2;
  return MlpParams(num_dense, bottom) + MlpParams(bottom.back() + pairs, top);
}

absl::StatusOr<TableConfig> ResolveLimits(const JobConfig& config, const TableConfig& table) {
  TableConfig t = table;
  if (!std::isfinite(t.max_gradient_abs()) || t.max_gradient_abs() < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("table ", t.name(), ": max_gradient_abs ", t.max_gradient_abs(),
                     " must be finite and >= 0 (0 = ", kDefaultMaxGradientAbs, ")"));
  }
  if (t.max_gradient_abs() == 0) t.set_max_gradient_abs(kDefaultMaxGradientAbs);
  if (t.kind() == TableConfig::DENSE) {
    if (t.dense_size() == 0) {
      const uint64_t model =
          config.model().dense_table() == t.name() ? ModelDenseParams(config) : 0;
      t.set_dense_size(model > 0 ? model : UnsizedDenseTableSize(config));
    }
  } else if (t.max_keys_per_request() == 0) {
    const uint64_t batch =
        config.training().batch_size() > 0 ? config.training().batch_size() : 256;
    const uint64_t fields = std::max<uint64_t>(1, FieldsFeeding(config, t));
    const uint64_t bag =
        config.data().format() == DataConfig::TSV_MULTIHOT ? kMultiHotKeysPerField : 1;
    t.set_max_keys_per_request(batch * fields * bag);
  }
  return t;
}

size_t FirstBeyond(const float* v, size_t n, uint32_t bound_bits) {
  // Masked magnitudes are at most 0x7fffffff: nothing is above that bound,
  // and below it the compare may be signed (SSE2 has no unsigned one).
  if (bound_bits >= 0x7fffffffu) return n;
  size_t start = 0;
#if defined(__SSE2__)
  // 16 values a round, one branch a round; the first bad round is searched
  // value by value below. (GCC's -O2 left the plain loop scalar: ~1 ns a
  // value, 5% of a dim-16 server's cycles on W.)
  const __m128i magnitude = _mm_set1_epi32(0x7fffffff);
  const __m128i bound = _mm_set1_epi32(static_cast<int32_t>(bound_bits));
  for (; start + 16 <= n; start += 16) {
    const __m128i* p = reinterpret_cast<const __m128i*>(v + start);
    const __m128i a = _mm_cmpgt_epi32(_mm_and_si128(_mm_loadu_si128(p), magnitude), bound);
    const __m128i b = _mm_cmpgt_epi32(_mm_and_si128(_mm_loadu_si128(p + 1), magnitude), bound);
    const __m128i c = _mm_cmpgt_epi32(_mm_and_si128(_mm_loadu_si128(p + 2), magnitude), bound);
    const __m128i d = _mm_cmpgt_epi32(_mm_and_si128(_mm_loadu_si128(p + 3), magnitude), bound);
    if (_mm_movemask_epi8(_mm_or_si128(_mm_or_si128(a, b), _mm_or_si128(c, d))) != 0) break;
  }
#endif
  for (size_t i = start; i < n; ++i) {
    if ((FloatBits(v[i]) & 0x7fffffffu) > bound_bits) return i;
  }
  return n;
}

}  // namespace shardps

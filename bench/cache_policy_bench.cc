// Which eviction policy for the worker's embedding cache (worker/
// embedding_cache.h): the hit rate of LRU, LFU, frequency-admitted LRU
// (TinyLFU), read order (FIFO by read, a refresh moves the row to the
// back), and the frequency-admitted ones that drop a stale victim without
// the admission test, on workload W's draws (each step 4096 Zipf(1.0) ids
// over 1e6, deduplicated: bench/server_zipf.h) or on the README job's keys
// (--workload=readme), looked up in a cache of C rows.
//
// A cached row serves a step only while it is fresh: read at step r, it
// serves steps r + 1 .. r + w (w: the reuse window; under SSP(s) a row read
// when the job's minimum clock was m serves steps <= m + s, and m is one or
// two behind the step the row was read for, so w is s - 1 or s - 2). A
// stale or missing row is pulled and (re)inserted, subject to the policy's
// admission. Hit rate = hits / unique ids looked up, over the steps after a
// warm-up; "bound" is an unbounded cache (every fresh row kept).
//
// The last rows run the real EmbeddingCache on the same draws, as a check
// that it reaches its simulated policy's hit rate, as it runs in the
// trainer ("1st sighting cold": a key the sketch has not seen is pulled
// without its optimizer state and not cached), with the share of misses
// pulled with their state; then what the real cache's calls cost per key.
//
//   bazel run -c opt //bench:cache_policy_bench -- [--workload=w|readme] [--steps=1500]
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <list>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/container/flat_hash_set.h"
#include "absl/flags/flag.h"
#include "absl/flags/parse.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "bench/server_zipf.h"
#include "server/optimizer.h"
#include "worker/embedding_cache.h"

ABSL_FLAG(int, steps, 1500, "Measured steps per case.");
ABSL_FLAG(int, warmup, 300, "Steps before measuring.");
ABSL_FLAG(int, draws, 4096, "Zipf draws per step (before dedup).");
ABSL_FLAG(uint64_t, ids, 1000000, "Id space.");
ABSL_FLAG(double, zipf, 1.0, "Zipf exponent.");
ABSL_FLAG(std::string, workload, "w",
          "w: workload W's draws; readme: the README job's generated data, one worker's "
          "batch of 256 lines x 26 fields, field f a Zipf(1.05 + 0.01 ((7 f) mod 21)) over "
          "round(10^(1 + 5 f / 25)) ids (worker/data/synthetic.h)");
ABSL_FLAG(std::string, windows, "1,2,4", "Reuse windows w (steps).");
ABSL_FLAG(std::string, capacities, "1000,2000,4000,8000,16000,64000", "Cache sizes in rows.");

namespace shardps {
namespace bench {
namespace {

// A simulated policy: keys only (no values).
class Policy {
 public:
  virtual ~Policy() = default;
  virtual const char* name() const = 0;
  // `key` looked up at `step`: true on a hit (present, read at step >=
  // step - w); else the key was pulled and is (re)inserted if admitted.
  virtual bool Access(uint64_t key, int64_t step, int64_t w) = 0;
};

// Recency list + map, shared by LRU, read order and TinyLFU's main part.
class Ordered {
 public:
  struct Entry {
    int64_t read = 0;
    std::list<uint64_t>::iterator it;
  };
  Entry* Find(uint64_t key) {
    auto it = map_.find(key);
    return it == map_.end() ? nullptr : &it->second;
  }
  void ToBack(Entry* e) { order_.splice(order_.end(), order_, e->it); }
  void Insert(uint64_t key, int64_t read) {
    order_.push_back(key);
    map_[key] = Entry{read, std::prev(order_.end())};
  }
  uint64_t Front() const { return order_.front(); }
  void PopFront() {
    map_.erase(order_.front());
    order_.pop_front();
  }
  size_t size() const { return map_.size(); }

 private:
  std::list<uint64_t> order_;
  absl::flat_hash_map<uint64_t, Entry> map_;
};

// Evicts the least recently used (hit or read).
class Lru final : public Policy {
 public:
  Lru(size_t cap, bool by_read) : cap_(cap), by_read_(by_read) {}
  const char* name() const override { return by_read_ ? "read order" : "LRU"; }
  bool Access(uint64_t key, int64_t step, int64_t w) override {
    Ordered::Entry* e = c_.Find(key);
    if (e != nullptr && e->read >= step - w) {
      if (!by_read_) c_.ToBack(e);
      return true;
    }
    if (e != nullptr) {
      e->read = step;
      c_.ToBack(e);
      return false;
    }
    if (c_.size() >= cap_) c_.PopFront();
    c_.Insert(key, step);
    return false;
  }

 private:
  const size_t cap_;
  const bool by_read_;
  Ordered c_;
};

// Evicts the fewest uses since insertion (ties: least recent).
class Lfu final : public Policy {
 public:
  explicit Lfu(size_t cap) : cap_(cap) {}
  const char* name() const override { return "LFU"; }
  bool Access(uint64_t key, int64_t step, int64_t w) override {
    ++tick_;
    auto it = map_.find(key);
    if (it != map_.end()) {
      E& e = it->second;
      order_.erase({e.freq, e.tick, key});
      ++e.freq;
      e.tick = tick_;
      order_.insert({e.freq, e.tick, key});
      const bool fresh = e.read >= step - w;
      if (!fresh) e.read = step;
      return fresh;
    }
    if (map_.size() >= cap_) {
      auto victim = order_.begin();
      map_.erase(std::get<2>(*victim));
      order_.erase(victim);
    }
    map_[key] = E{1, tick_, step};
    order_.insert({1, tick_, key});
    return false;
  }

 private:
  struct E {
    uint64_t freq, tick;
    int64_t read;
  };
  const size_t cap_;
  uint64_t tick_ = 0;
  absl::flat_hash_map<uint64_t, E> map_;
  std::set<std::tuple<uint64_t, uint64_t, uint64_t>> order_;
};

// TinyLFU (Einziger et al.): a count-min sketch of every key's recent
// accesses (4 rows of 4-bit-like counters, halved every 10 x capacity
// accesses); a new key enters only if its estimate beats the victim's.
class TinyLfu final : public Policy {
 public:
  // `expired_first`: a full cache drops its victim (least recently used or
  // oldest read) with no admission test when that row is stale (it can
  // never hit again).
  TinyLfu(size_t cap, bool by_read, bool expired_first = false)
      : cap_(cap),
        by_read_(by_read),
        expired_first_(expired_first),
        width_(NextPow2(cap * 4)),
        counts_(4 * width_, 0),
        sample_(10 * cap) {}
  const char* name() const override {
    if (expired_first_) return by_read_ ? "freq-adm. read, stale 1st" : "freq-adm. LRU, stale 1st";
    return by_read_ ? "freq-admitted read order" : "freq-admitted LRU";
  }
  bool Access(uint64_t key, int64_t step, int64_t w) override {
    Count(key);
    Ordered::Entry* e = c_.Find(key);
    if (e != nullptr && e->read >= step - w) {
      if (!by_read_) c_.ToBack(e);
      return true;
    }
    if (e != nullptr) {
      e->read = step;
      c_.ToBack(e);
      return false;
    }
    if (c_.size() >= cap_) {
      const bool stale = expired_first_ && c_.Find(c_.Front())->read < step - w;
      if (!stale && Estimate(key) <= Estimate(c_.Front())) return false;  // Not admitted.
      c_.PopFront();
    }
    c_.Insert(key, step);
    return false;
  }

 private:
  static size_t NextPow2(size_t n) {
    size_t p = 1;
    while (p < n) p <<= 1;
    return p;
  }
  size_t Slot(uint64_t key, int row) const {
    return row * width_ + (Mix64(key + 0x9e3779b97f4a7c15ULL * (row + 1)) & (width_ - 1));
  }
  void Count(uint64_t key) {
    for (int r = 0; r < 4; ++r) {
      uint8_t& c = counts_[Slot(key, r)];
      if (c < 15) ++c;
    }
    if (++seen_ >= sample_) {
      for (uint8_t& c : counts_) c >>= 1;
      seen_ = 0;
    }
  }
  int Estimate(uint64_t key) const {
    int m = 15;
    for (int r = 0; r < 4; ++r) m = std::min<int>(m, counts_[Slot(key, r)]);
    return m;
  }
  const size_t cap_;
  const bool by_read_;
  const bool expired_first_;
  const size_t width_;
  std::vector<uint8_t> counts_;
  const size_t sample_;
  size_t seen_ = 0;
  Ordered c_;
};

// Unbounded: every fresh row hits.
class Bound final : public Policy {
 public:
  const char* name() const override { return "bound (unbounded cache)"; }
  bool Access(uint64_t key, int64_t step, int64_t w) override {
    auto [it, inserted] = read_.try_emplace(key, step);
    if (!inserted && it->second >= step - w) return true;
    it->second = step;
    return false;
  }

 private:
  absl::flat_hash_map<uint64_t, int64_t> read_;
};

// The README job's categorical keys for one worker's steps: per field its
// own Zipf over its own vocabulary, keyed per field, deduplicated per step.
std::vector<std::vector<uint64_t>> ReadmeDraws(int steps) {
  constexpr int kFields = 26, kBatch = 256;
  std::vector<ZipfSampler> fields;
  for (int f = 0; f < kFields; ++f) {
    fields.emplace_back(static_cast<uint64_t>(std::llround(std::pow(10.0, 1 + 5.0 * f / 25))),
                        1.05 + 0.01 * ((7 * f) % 21));
  }
  std::mt19937_64 rng(42);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  std::vector<std::vector<uint64_t>> out(steps);
  absl::flat_hash_set<uint64_t> in_step;
  for (int t = 0; t < steps; ++t) {
    in_step.clear();
    for (int f = 0; f < kFields; ++f) {
      for (int i = 0; i < kBatch; ++i) {
        const uint64_t id = fields[f].Sample([&] { return unit(rng); });
        const uint64_t key = Mix64(Mix64(f + 0x9e3779b97f4a7c15ULL) ^ id);
        if (in_step.insert(key).second) out[t].push_back(key);
      }
    }
  }
  return out;
}

// The same draws for every case: a fixed seed.
std::vector<std::vector<uint64_t>> Draws(int steps) {
  if (absl::GetFlag(FLAGS_workload) == "readme") return ReadmeDraws(steps);
  ZipfBatches z(absl::GetFlag(FLAGS_ids), absl::GetFlag(FLAGS_zipf), 42);
  std::vector<std::vector<uint64_t>> out(steps);
  std::vector<uint64_t> ranks;
  for (auto& keys : out) z.Next(absl::GetFlag(FLAGS_draws), &ranks, &keys);
  return out;
}

double Run(Policy* p, const std::vector<std::vector<uint64_t>>& draws, int64_t w, int warmup) {
  uint64_t hits = 0, lookups = 0;
  for (size_t t = 0; t < draws.size(); ++t) {
    for (uint64_t key : draws[t]) {
      const bool hit = p->Access(key, static_cast<int64_t>(t), w);
      if (static_cast<int>(t) >= warmup) {
        ++lookups;
        hits += hit;
      }
    }
  }
  return lookups ? static_cast<double>(hits) / lookups : 0.0;
}

// The real cache, one table of dim 16 + 1 state float, tagged so that a row
// read at step r serves steps <= r + w: min clock r, staleness w.
// `first_sightings_cold`: a key the sketch has not seen is pulled without
// state and not cached (what the trainer does); `*with_state` gets the
// share of the misses pulled with their state.
double RunReal(size_t cap, const std::vector<std::vector<uint64_t>>& draws, int64_t w, int warmup,
               bool first_sightings_cold, double* with_state) {
  EmbeddingCache::Options o;
  o.max_rows = cap;
  o.staleness = static_cast<uint32_t>(w);
  std::vector<EmbeddingCache::Table> tables(1);
  tables[0].dim = 16;
  tables[0].state = 1;
  EmbeddingCache cache(o, std::move(tables));
  std::vector<float> rows;
  std::vector<uint64_t> miss_keys;
  std::vector<std::vector<uint32_t>> hit, miss, cold;
  uint64_t hits = 0, lookups = 0, stated = 0, misses = 0;
  for (size_t t = 0; t < draws.size(); ++t) {
    const std::vector<uint64_t>& keys = draws[t];
    hit.assign(1, {});
    miss.assign(1, {});
    cold.assign(1, {});
    cache.PlanStep(t, std::nullopt, {keys}, &hit, &miss, first_sightings_cold ? &cold : nullptr);
    if (static_cast<int>(t) >= warmup) {
      stated += miss[0].size();
      misses += miss[0].size() + cold[0].size();
    }
    miss_keys.clear();
    for (uint32_t i : miss[0]) miss_keys.push_back(keys[i]);
    rows.assign(miss_keys.size() * 17, 0.5f);
    cache.Insert(0, miss_keys.data(), miss_keys.size(), rows.data(), t);
    if (static_cast<int>(t) >= warmup) {
      lookups += keys.size();
      hits += hit[0].size();
    }
    cache.Release(t);
  }
  *with_state = misses ? static_cast<double>(stated) / misses : 0.0;
  return lookups ? static_cast<double>(hits) / lookups : 0.0;
}

// What the real cache costs the worker per key, on `draws` with reuse
// window w and an ample cache (dim 16, row-wise Adagrad as the default
// job): ns per key of each call a step makes.
void CostReal(const std::vector<std::vector<uint64_t>>& draws, int64_t w) {
  EmbeddingCache::Options o;
  o.staleness = static_cast<uint32_t>(w);
  std::vector<EmbeddingCache::Table> tables(1);
  tables[0].dim = 16;
  OptimizerConfig oc;
  oc.mutable_rowwise_adagrad()->set_learning_rate(0.1f);
  tables[0].optimizer = *Optimizer::Create(oc, 16);
  tables[0].state = static_cast<uint32_t>(tables[0].optimizer->StateSize());
  EmbeddingCache cache(o, std::move(tables));
  std::vector<std::vector<uint32_t>> hit, miss, cold;
  std::vector<std::vector<float>> out(1);
  std::vector<uint64_t> keys_in;
  std::vector<float> rows, grads;
  double plan = 0, insert = 0, fill = 0, apply = 0;
  uint64_t keys = 0;
  auto since = [](absl::Time t0) { return absl::ToDoubleNanoseconds(absl::Now() - t0); };
  for (size_t t = 0; t < draws.size(); ++t) {
    const std::vector<uint64_t>& k = draws[t];
    keys += k.size();
    absl::Time t0 = absl::Now();
    cache.PlanStep(t, t, {k}, &hit, &miss, &cold);
    plan += since(t0);
    keys_in.clear();
    for (uint32_t i : miss[0]) keys_in.push_back(k[i]);
    rows.assign(keys_in.size() * 17, 0.01f);
    t0 = absl::Now();
    cache.Insert(0, keys_in.data(), keys_in.size(), rows.data(), t);
    insert += since(t0);
    out[0].resize(k.size() * 16);
    t0 = absl::Now();
    if (!cache.Fill(t, {k}, hit, &out).ok()) std::abort();
    cache.Release(t);
    fill += since(t0);
    grads.assign(k.size() * 16, 0.001f);
    t0 = absl::Now();
    cache.ApplyPush(0, k.data(), k.size(), grads.data(), 1.0f);
    apply += since(t0);
    for (auto* v : {&hit, &miss, &cold}) v->clear();
  }
  std::printf(
      "\nthe real cache's cost (w = %lld, ample, dim 16, row-wise Adagrad), ns a key of "
      "the step: PlanStep %.0f, Insert %.0f, Fill %.0f, ApplyPush %.0f; total %.0f "
      "(%.2f ms a step of %.0f keys)\n",
      (long long)w, plan / keys, insert / keys, fill / keys, apply / keys,
      (plan + insert + fill + apply) / keys, (plan + insert + fill + apply) / draws.size() / 1e6,
      static_cast<double>(keys) / draws.size());
}

int Main() {
  const int warmup = absl::GetFlag(FLAGS_warmup);
  const auto draws = Draws(warmup + absl::GetFlag(FLAGS_steps));
  uint64_t unique = 0;
  for (const auto& d : draws) unique += d.size();
  if (absl::GetFlag(FLAGS_workload) == "readme") {
    std::printf("the README job's keys: 256 lines x 26 fields a step, %.0f unique a step; ",
                static_cast<double>(unique) / draws.size());
  } else {
    std::printf("workload W draws: %d a step over %llu ids, Zipf(%.2f), %.0f unique a step; ",
                absl::GetFlag(FLAGS_draws), (unsigned long long)absl::GetFlag(FLAGS_ids),
                absl::GetFlag(FLAGS_zipf), static_cast<double>(unique) / draws.size());
  }
  std::printf("%d steps after %d of warm-up\n", absl::GetFlag(FLAGS_steps), warmup);
  std::vector<int64_t> windows;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_windows), ',')) {
    windows.push_back(std::stoll(std::string(s)));
  }
  std::vector<size_t> caps;
  for (absl::string_view s : absl::StrSplit(absl::GetFlag(FLAGS_capacities), ',')) {
    caps.push_back(std::stoull(std::string(s)));
  }
  for (int64_t w : windows) {
    Bound bound;
    std::printf("\nreuse window w = %lld step(s): hit rate (bound %.4f)\n", (long long)w,
                Run(&bound, draws, w, warmup));
    std::printf("%-26s", "rows");
    for (size_t c : caps) std::printf(" %8zu", c);
    std::printf("\n");
    for (int kind = 0; kind < 9; ++kind) {
      std::string name;
      std::vector<double> rates, stated;
      for (size_t c : caps) {
        std::unique_ptr<Policy> p;
        if (kind == 0) p = std::make_unique<Lru>(c, false);
        if (kind == 1) p = std::make_unique<Lru>(c, true);
        if (kind == 2) p = std::make_unique<Lfu>(c);
        if (kind == 3) p = std::make_unique<TinyLfu>(c, false);
        if (kind == 4) p = std::make_unique<TinyLfu>(c, true);
        if (kind == 5) p = std::make_unique<TinyLfu>(c, true, true);
        if (kind == 6) p = std::make_unique<TinyLfu>(c, false, true);
        if (kind >= 7) {
          const bool cold = kind == 8;
          name = cold ? "real, 1st sighting cold" : "EmbeddingCache (real)";
          double s = 0;
          rates.push_back(RunReal(c, draws, w, warmup, cold, &s));
          stated.push_back(s);
          continue;
        }
        name = p->name();
        rates.push_back(Run(p.get(), draws, w, warmup));
      }
      std::printf("%-26s", name.c_str());
      for (double r : rates) std::printf(" %8.4f", r);
      std::printf("\n");
      if (!stated.empty()) {
        std::printf("%-26s", "  misses pulled with state");
        for (double s : stated) std::printf(" %8.4f", s);
        std::printf("\n");
      }
    }
  }
  CostReal(draws, windows.front());
  return 0;
}

}  // namespace
}  // namespace bench
}  // namespace shardps

int main(int argc, char** argv) {
  absl::ParseCommandLine(argc, argv);
  return shardps::bench::Main();
}

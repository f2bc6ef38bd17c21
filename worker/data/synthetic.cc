#include "worker/data/synthetic.h"

#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "common/zipf.h"
#include "worker/data/eval_metrics.h"

namespace shardps {
namespace data {
namespace {

constexpr int kRank = 4;
constexpr double kTwoPi = 6.283185307179586;

// Stream tags, so the parts of the model and the splits never share draws.
constexpr uint64_t kTagBeta = 1, kTagEffect = 2, kTagFactor = 3, kTagIdMap = 4, kTagTrain = 5,
                   kTagEval = 6, kTagEffectDrift = 7, kTagCross = 8;

uint64_t Hash(uint64_t a, uint64_t b, uint64_t c = 0, uint64_t d = 0) {
  return Mix64(Mix64(Mix64(Mix64(a) ^ b) ^ c) ^ d);
}

double ToUnit(uint64_t r) { return (r >> 11) * 0x1p-53; }

uint64_t NextRandom(uint64_t* state) {
  *state += 0x9e3779b97f4a7c15ULL;
  return Mix64(*state);
}

double Uniform(uint64_t* state) { return ToUnit(NextRandom(state)); }

// Box-Muller from two 64-bit values; returns two independent N(0, 1).
void NormalPair(uint64_t r1, uint64_t r2, double* z0, double* z1) {
  const double u1 = ToUnit(r1) + 0x1p-54;  // (0, 1): log is finite.
  const double radius = std::sqrt(-2 * std::log(u1));
  const double angle = kTwoPi * ToUnit(r2);
  *z0 = radius * std::cos(angle);
  if (z1 != nullptr) *z1 = radius * std::sin(angle);
}

double HashNormal(uint64_t h) {
  double z;
  NormalPair(h, Mix64(h ^ 0x632be59bd9b4e019ULL), &z, nullptr);
  return z;
}

double StreamNormal(uint64_t* state) {
  const uint64_t r1 = NextRandom(state);
  double z;
  NormalPair(r1, NextRandom(state), &z, nullptr);
  return z;
}

double ZipfExponent(int f) { return 1.05 + 0.01 * ((7 * f) % 21); }
double CatMissing(int f) { return 0.05 * ((5 * f) % 9); }
double IntMissing(int j) { return 0.04 * ((3 * j) % 11); }
double IntMu(int j) { return 0.5 + 0.3 * (j % 7); }
double IntSigma(int j) { return 1.0 + 0.1 * (j % 4); }

// Rank -> 32-bit id: a bijection (odd multipliers and xor are invertible).
uint32_t RankToId(uint64_t seed, int f, uint32_t rank) {
  const uint32_t salt = static_cast<uint32_t>(Hash(seed, kTagIdMap, f));
  return ((rank * 0x9e3779b1u) ^ salt) * 0x85ebca6bu;
}

void AppendHex8(uint32_t v, std::string* out) {
  static const char kDigits[] = "0123456789abcdef";
  char buf[8];
  for (int i = 7; i >= 0; --i) {
    buf[i] = kDigits[v & 15];
    v >>= 4;
  }
  out->append(buf, 8);
}

}  // namespace

SyntheticModel::SyntheticModel(uint64_t seed, const SyntheticFamily& family)
    : seed_(seed), family_(family) {
  for (int j = 0; j < kCriteoNumDense; ++j) {
    beta_[j] = family_.beta_std * HashNormal(Hash(seed, kTagBeta, j));
  }
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    samplers_[f] = ZipfSampler(family_.vocab[f], ZipfExponent(f));
  }
}

SyntheticModel::SyntheticModel(uint64_t seed)
    : SyntheticModel(seed, *FindSyntheticFamily("default")) {}

double SyntheticModel::CrossEffect(int pair, uint64_t a, uint64_t b) const {
  const uint64_t h = Hash(seed_, kTagCross, Mix64(pair) ^ a, b);
  if (ToUnit(h) >= family_.cross_density) return 0;
  return family_.cross_std * HashNormal(Mix64(h ^ 0x5bd1e9955bd1e995ULL));
}

double SyntheticModel::CategoricalLogit(const SyntheticExample& e, double position) const {
  // A missing value is its own id: 2^32, outside the 32-bit ids.
  auto id_of = [&](int f) { return e.cat_missing[f] ? (uint64_t{1} << 32) : uint64_t{e.cats[f]}; };
  const double angle = family_.drift * position;
  double sum = 0;
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    double effect = HashNormal(Hash(seed_, kTagEffect, f, id_of(f)));
    if (angle != 0) {
      effect = std::cos(angle) * effect +
               std::sin(angle) * HashNormal(Hash(seed_, kTagEffectDrift, f, id_of(f)));
    }
    sum += family_.effect_std * effect;
  }
  for (int p = 0; p < static_cast<int>(family_.pairs.size()); ++p) {
    const int sides[2] = {family_.pairs[p].first, family_.pairs[p].second};
    double u[2][kRank];
    for (int side = 0; side < 2; ++side) {
      const uint64_t h = Hash(seed_, kTagFactor, p * 2 + side, id_of(sides[side]));
      for (int k = 0; k < kRank; k += 2) {
        NormalPair(Mix64(h + k), Mix64(h + k + 1), &u[side][k], &u[side][k + 1]);
      }
    }
    double dot = 0;
    for (int k = 0; k < kRank; ++k) dot += u[0][k] * u[1][k];
    sum += family_.tau * dot / std::sqrt(static_cast<double>(kRank));
  }
  for (int p = 0; p < static_cast<int>(family_.cross_pairs.size()); ++p) {
    sum +=
        CrossEffect(p, id_of(family_.cross_pairs[p].first), id_of(family_.cross_pairs[p].second));
  }
  return sum;
}

double SyntheticModel::Logit(const SyntheticExample& e, double position) const {
  return family_.bias + e.dense_logit + CategoricalLogit(e, position);
}

void SyntheticModel::Sample(uint64_t* state, SyntheticExample* e, double position) const {
  e->dense_logit = 0;
  for (int j = 0; j < kCriteoNumDense; ++j) {
    e->int_missing[j] = Uniform(state) < IntMissing(j);
    e->ints[j] = 0;
    if (e->int_missing[j]) continue;
    if (j == 1 && Uniform(state) < 0.1) {
      e->ints[j] = -1 - static_cast<int64_t>(NextRandom(state) % 3);
    } else {
      const double x = std::floor(std::exp(IntMu(j) + IntSigma(j) * StreamNormal(state)));
      e->ints[j] = std::max<int64_t>(0, static_cast<int64_t>(std::min(x, 1e15)) - 1);
    }
    e->dense_logit += beta_[j] * DenseTransform(e->ints[j]);
  }
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    e->cat_missing[f] = Uniform(state) < CatMissing(f);
    e->cats[f] = e->cat_missing[f]
                     ? 0
                     : RankToId(seed_, f, static_cast<uint32_t>(samplers_[f].Sample([state] {
                                  return Uniform(state);
                                })));
  }
  e->logit = Logit(*e, position);
  // Label noise: a flipped label is a draw from p' = q + (1 - 2q) p.
  const double q = family_.label_noise;
  e->prob = q + (1 - 2 * q) / (1 + std::exp(-e->logit));
  e->label = Uniform(state) < e->prob ? 1.0f : 0.0f;
}

void SyntheticModel::AppendLine(const SyntheticExample& e, std::string* out) {
  out->push_back(e.label > 0.5f ? '1' : '0');
  for (int j = 0; j < kCriteoNumDense; ++j) {
    out->push_back('\t');
    if (!e.int_missing[j]) absl::StrAppend(out, e.ints[j]);
  }
  for (int f = 0; f < kCriteoNumCategorical; ++f) {
    out->push_back('\t');
    if (!e.cat_missing[f]) AppendHex8(e.cats[f], out);
  }
  out->push_back('\n');
}

namespace {

// A temporary name next to `path`, private to this process, so that several
// processes generating the same data set at once do not clobber each other
// (they write identical bytes; the renames are atomic).
std::string TempName(const std::string& path) { return absl::StrCat(path, ".tmp.", getpid()); }

// Writes one output file under TempName(path), renamed by Close().
class FileWriter {
 public:
  static absl::StatusOr<std::unique_ptr<FileWriter>> Open(const std::string& path, bool gzip) {
    const std::string tmp = TempName(path);
    // "T": zlib writes plain (transparent) output.
    gzFile gz = gzopen(tmp.c_str(), gzip ? "wb1" : "wbT");
    if (gz == nullptr) {
      return absl::FailedPreconditionError(
          absl::StrCat(tmp, ": cannot create: ", std::strerror(errno)));
    }
    return std::unique_ptr<FileWriter>(new FileWriter(path, gz));
  }
  ~FileWriter() {
    if (gz_ != nullptr) gzclose(gz_);
  }
  // Writes `buf` out once it holds at least `threshold` bytes, and clears it.
  absl::Status Write(std::string* buf, size_t threshold = 1 << 20) {
    if (buf->size() < threshold || buf->empty()) return absl::OkStatus();
    const int n = gzwrite(gz_, buf->data(), static_cast<unsigned>(buf->size()));
    if (n != static_cast<int>(buf->size())) {
      return absl::DataLossError(absl::StrCat(TempName(path_), ": write failed"));
    }
    buf->clear();
    return absl::OkStatus();
  }
  absl::Status Close(std::string* buf) {
    RETURN_IF_ERROR(Write(buf, 0));
    const int rc = gzclose(gz_);
    gz_ = nullptr;
    if (rc != Z_OK) {
      return absl::DataLossError(absl::StrCat(TempName(path_), ": close failed"));
    }
    if (std::rename(TempName(path_).c_str(), path_.c_str()) != 0) {
      return absl::DataLossError(absl::StrCat(path_, ": rename failed: ", std::strerror(errno)));
    }
    return absl::OkStatus();
  }

 private:
  FileWriter(std::string path, gzFile gz) : path_(std::move(path)), gz_(gz) {}
  const std::string path_;
  gzFile gz_;
};

struct SplitStats {
  std::vector<float> labels, probs, dense_logits;  // Filled if wanted.
  uint64_t positives = 0;
};

// Draws `lines` examples from stream `stream` into the files `paths`
// (contiguous, near-equal line ranges). Training lines are at positions
// 0 .. 1 in file order (drift), the eval split (`keep`) at 1.
absl::Status WriteSplit(const SyntheticModel& model, uint64_t stream, uint64_t lines,
                        const std::vector<std::string>& paths, bool gzip, bool keep,
                        SplitStats* stats) {
  uint64_t state = stream;
  SyntheticExample e;
  std::string buf;
  for (size_t s = 0; s < paths.size(); ++s) {
    ASSIGN_OR_RETURN(auto writer, FileWriter::Open(paths[s], gzip));
    const uint64_t end = lines * (s + 1) / paths.size();
    for (uint64_t i = lines * s / paths.size(); i < end; ++i) {
      const double position = keep || lines < 2 ? 1.0 : static_cast<double>(i) / (lines - 1);
      model.Sample(&state, &e, position);
      stats->positives += e.label > 0.5f;
      if (keep) {
        stats->labels.push_back(e.label);
        stats->probs.push_back(static_cast<float>(e.prob));
        stats->dense_logits.push_back(static_cast<float>(e.dense_logit));
      }
      SyntheticModel::AppendLine(e, &buf);
      RETURN_IF_ERROR(writer->Write(&buf));
    }
    RETURN_IF_ERROR(writer->Close(&buf));
  }
  return absl::OkStatus();
}

std::string FileName(absl::string_view split, uint32_t shard, uint32_t shards, bool gzip) {
  std::string name(split);
  if (shards > 1) absl::StrAppend(&name, absl::StrFormat("-%05d-of-%05d", shard, shards));
  return absl::StrCat(name, ".tsv", gzip ? ".gz" : "");
}

absl::Status WriteText(const std::string& path, const std::string& text) {
  std::ofstream out(TempName(path), std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out || std::rename(TempName(path).c_str(), path.c_str()) != 0) {
    return absl::DataLossError(absl::StrCat(path, ": cannot write"));
  }
  return absl::OkStatus();
}

std::string SummaryText(const SyntheticSummary& s, bool json) {
  std::vector<std::pair<std::string, std::string>> kv = {
      {"family", json ? absl::StrCat("\"", s.family, "\"") : s.family},
      {"seed", absl::StrCat(s.seed)},
      {"train_lines", absl::StrCat(s.train_lines)},
      {"eval_lines", absl::StrCat(s.eval_lines)},
      {"train_positive_rate", absl::StrFormat("%.6f", s.train_positive_rate)},
      {"eval_positive_rate", absl::StrFormat("%.6f", s.eval_positive_rate)},
      {"best_auc", absl::StrFormat("%.6f", s.best_auc)},
      {"best_logloss", absl::StrFormat("%.6f", s.best_logloss)},
      {"dense_only_auc", absl::StrFormat("%.6f", s.dense_only_auc)},
      {"constant_logloss", absl::StrFormat("%.6f", s.constant_logloss)},
  };
  std::string out = json ? "{\n" : "";
  for (const auto& [key, value] : kv) {
    absl::StrAppend(&out, json ? absl::StrCat("  \"", key, "\": ", value, ",\n")
                               : absl::StrCat(key, " ", value, "\n"));
  }
  auto files = [&](const char* key, const std::vector<std::string>& list) {
    if (json) {
      absl::StrAppend(&out, "  \"", key, "s\": [");
      for (size_t i = 0; i < list.size(); ++i) {
        absl::StrAppend(&out, i ? ", " : "", "\"", list[i], "\"");
      }
      absl::StrAppend(&out, "]");
    } else {
      for (const std::string& f : list) absl::StrAppend(&out, key, " ", f, "\n");
    }
  };
  files("train_file", s.train_files);
  if (json) out += ",\n";
  files("eval_file", s.eval_files);
  if (json) out += "\n}\n";
  return out;
}

// Base names, for best.txt/best.json (the data set can be moved).
SyntheticSummary WithBaseNames(SyntheticSummary s) {
  for (auto* list : {&s.train_files, &s.eval_files}) {
    for (std::string& f : *list) f = f.substr(f.rfind('/') + 1);
  }
  return s;
}

}  // namespace

absl::StatusOr<SyntheticSummary> GenerateSynthetic(const SyntheticOptions& o) {
  if (o.out_dir.empty()) return absl::InvalidArgumentError("synthetic: no out_dir");
  if (o.train_shards == 0) {
    return absl::InvalidArgumentError("synthetic: train_shards must be > 0");
  }
  const SyntheticFamily* family = FindSyntheticFamily(o.family);
  if (family == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat("synthetic: no family \"", o.family, "\" (",
                                                   absl::StrJoin(SyntheticFamilyNames(), ", "),
                                                   ")"));
  }
  // Create out_dir and its missing parents (like mkdir -p).
  for (size_t slash = o.out_dir.find('/', 1);; slash = o.out_dir.find('/', slash + 1)) {
    const std::string prefix = o.out_dir.substr(0, slash);
    if (mkdir(prefix.c_str(), 0755) != 0 && errno != EEXIST) {
      return absl::FailedPreconditionError(
          absl::StrCat(prefix, ": cannot create: ", std::strerror(errno)));
    }
    if (slash == std::string::npos) break;
  }
  SyntheticSummary s;
  s.family = o.family;
  s.seed = o.seed;
  s.train_lines = o.train_lines;
  s.eval_lines = o.eval_lines;
  for (uint32_t i = 0; i < o.train_shards; ++i) {
    s.train_files.push_back(
        absl::StrCat(o.out_dir, "/", FileName("train", i, o.train_shards, o.gzip)));
  }
  s.eval_files.push_back(absl::StrCat(o.out_dir, "/", FileName("eval", 0, 1, o.gzip)));
  const SyntheticModel model(o.seed, *family);
  SplitStats train, eval;
  RETURN_IF_ERROR(WriteSplit(model, Hash(o.seed, kTagTrain), o.train_lines, s.train_files, o.gzip,
                             false, &train));
  RETURN_IF_ERROR(
      WriteSplit(model, Hash(o.seed, kTagEval), o.eval_lines, s.eval_files, o.gzip, true, &eval));
  s.train_positive_rate = o.train_lines ? static_cast<double>(train.positives) / o.train_lines : 0;
  s.eval_positive_rate = o.eval_lines ? static_cast<double>(eval.positives) / o.eval_lines : 0;
  s.best_auc = Auc(eval.labels, eval.probs);
  s.best_logloss = LogLoss(eval.labels, eval.probs);
  s.dense_only_auc = Auc(eval.labels, eval.dense_logits);
  s.constant_logloss = 0;
  for (float label : eval.labels) s.constant_logloss += LogLossOne(label, s.eval_positive_rate);
  if (!eval.labels.empty()) s.constant_logloss /= eval.labels.size();
  const SyntheticSummary named = WithBaseNames(s);
  RETURN_IF_ERROR(WriteText(o.out_dir + "/best.json", SummaryText(named, true)));
  RETURN_IF_ERROR(WriteText(o.out_dir + "/best.txt", SummaryText(named, false)));
  return s;
}

absl::StatusOr<SyntheticSummary> ReadSyntheticSummary(const std::string& dir) {
  const std::string path = dir + "/best.txt";
  std::ifstream in(path);
  if (!in) return absl::NotFoundError(absl::StrCat(path, ": no synthetic data set"));
  SyntheticSummary s;
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    const std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
    const std::string& k = kv.first;
    const std::string& v = kv.second;
    bool ok = true;
    if (k == "family")
      s.family = v;
    else if (k == "seed")
      ok = absl::SimpleAtoi(v, &s.seed);
    else if (k == "train_lines")
      ok = absl::SimpleAtoi(v, &s.train_lines);
    else if (k == "eval_lines")
      ok = absl::SimpleAtoi(v, &s.eval_lines);
    else if (k == "train_positive_rate")
      ok = absl::SimpleAtod(v, &s.train_positive_rate);
    else if (k == "eval_positive_rate")
      ok = absl::SimpleAtod(v, &s.eval_positive_rate);
    else if (k == "best_auc")
      ok = absl::SimpleAtod(v, &s.best_auc);
    else if (k == "best_logloss")
      ok = absl::SimpleAtod(v, &s.best_logloss);
    else if (k == "dense_only_auc")
      ok = absl::SimpleAtod(v, &s.dense_only_auc);
    else if (k == "constant_logloss")
      ok = absl::SimpleAtod(v, &s.constant_logloss);
    else if (k == "train_file" && !v.empty())
      s.train_files.push_back(dir + "/" + v);
    else if (k == "eval_file" && !v.empty())
      s.eval_files.push_back(dir + "/" + v);
    else
      ok = false;
    if (!ok) {
      return absl::InvalidArgumentError(
          absl::StrCat(path, ":", line_no, ": cannot parse \"", line, "\""));
    }
  }
  return s;
}

absl::StatusOr<DataFiles> ResolveDataFiles(const DataConfig& data) {
  DataFiles files;
  if (data.train_files_size() > 0) {
    files.train.assign(data.train_files().begin(), data.train_files().end());
    files.eval.assign(data.eval_files().begin(), data.eval_files().end());
    return files;
  }
  if (data.synthetic_dir().empty()) {
    return absl::InvalidArgumentError(
        "data: no train_files and no synthetic_dir to generate them in");
  }
  SyntheticOptions o;
  o.out_dir = data.synthetic_dir();
  if (data.synthetic_train_lines() > 0) o.train_lines = data.synthetic_train_lines();
  if (data.synthetic_eval_lines() > 0) o.eval_lines = data.synthetic_eval_lines();
  if (data.synthetic_seed() != 0) o.seed = data.synthetic_seed();
  absl::StatusOr<SyntheticSummary> summary = ReadSyntheticSummary(o.out_dir);
  const bool reuse = summary.ok() && summary->seed == o.seed &&
                     summary->train_lines == o.train_lines && summary->eval_lines == o.eval_lines;
  if (!reuse) {
    summary = GenerateSynthetic(o);
    if (!summary.ok()) return summary.status();
  }
  files.train = summary->train_files;
  files.eval = summary->eval_files;
  files.synthetic = *summary;
  return files;
}

}  // namespace data
}  // namespace shardps

#include "worker/data/criteo_reader.h"

#include <algorithm>
#include <numeric>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/partition.h"
#include "common/status_macros.h"
#include "glog/logging.h"

namespace shardps {
namespace data {
namespace {

// Malformed lines logged in full: the first kLogFirst, then every kLogEvery.
constexpr uint64_t kLogFirst = 10;
constexpr uint64_t kLogEvery = 1000;

absl::Status ValidateOptions(const ReaderOptions& o) {
  auto bad = [](absl::string_view what) {
    return absl::InvalidArgumentError(absl::StrCat("reader options: ", what));
  };
  if (o.files.empty()) return bad("no files");
  if (o.num_workers == 0) return bad("num_workers must be > 0");
  if (o.rank >= o.num_workers) {
    return bad(absl::StrCat("rank ", o.rank, " >= num_workers ", o.num_workers));
  }
  if (o.epochs == 0) return bad("epochs must be > 0");
  if (o.shuffle_buffer > kMaxShuffleBuffer) {
    return bad(absl::StrCat("shuffle_buffer ", o.shuffle_buffer, " > ", kMaxShuffleBuffer));
  }
  if (o.max_line_bytes < 16 || o.max_line_bytes > (size_t{1} << 30)) {
    return bad("max_line_bytes must be in [16, 2^30]");
  }
  if (o.num_dense < 0) return bad("num_dense must be >= 0");
  if (o.num_columns < 1 + o.num_dense) {
    return bad(absl::StrCat("num_columns ", o.num_columns, " < 1 + num_dense ", o.num_dense));
  }
  for (const FieldSpec& f : o.fields) {
    if (f.column < 1 + o.num_dense || f.column >= o.num_columns) {
      return bad(absl::StrCat("field ", f.name, ": column ", f.column,
                              " is not a categorical column (", 1 + o.num_dense, "..",
                              o.num_columns - 1, ")"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReaderOptions> ReaderOptionsFromConfig(const JobConfig& config,
                                                      std::vector<std::string> files, uint32_t rank,
                                                      uint32_t num_workers, bool training) {
  ReaderOptions o;
  ASSIGN_OR_RETURN(o.fields, ResolveFields(config));
  const DataConfig& data = config.data();
  o.files = std::move(files);
  o.format =
      data.format() == DataConfig::TSV_MULTIHOT ? DataConfig::TSV_MULTIHOT : DataConfig::CRITEO;
  o.num_dense = NumDense(data);
  o.num_columns = NumColumns(data, o.fields, config.fields_size() > 0);
  o.error_budget = data.error_budget() == 0 ? 100 : data.error_budget();
  o.rank = rank;
  o.num_workers = num_workers;
  if (rank >= num_workers) {
    return absl::InvalidArgumentError(absl::StrCat("rank ", rank, " >= num_workers ", num_workers));
  }
  if (training) {
    o.epochs = config.training().epochs() == 0 ? 1 : config.training().epochs();
    o.shuffle = true;
    o.shuffle_seed = config.training().shuffle_seed();
    o.shuffle_buffer = data.shuffle_buffer();
  }
  return o;
}

std::string EncodePosition(const ReaderPosition& p) {
  return absl::StrCat("v2 epoch=", p.epoch, " unit=", p.unit, " line=", p.line,
                      " offset=", p.offset, " taken=", p.taken, " bad=", p.bad_lines,
                      " samples=", p.samples);
}

absl::StatusOr<ReaderPosition> DecodePosition(absl::string_view text) {
  if (absl::StartsWith(text, "v1 ")) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reader position \"", text,
        "\" is of the older line-stripe reader (v1), which cannot be resumed by this one"));
  }
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  const char* const kNames[] = {
      "epoch=", "unit=", "line=", "offset=", "taken=", "bad=", "samples="};
  ReaderPosition p;
  uint64_t* const values[] = {&p.epoch, &p.unit,      &p.line,   &p.offset,
                              &p.taken, &p.bad_lines, &p.samples};
  // Positions written before `samples` was recorded have 6 fields (0 then).
  bool ok = (parts.size() == 7 || parts.size() == 8) && parts[0] == "v2";
  for (size_t i = 0; ok && i + 1 < parts.size(); ++i) {
    absl::string_view part = parts[i + 1];
    ok = absl::ConsumePrefix(&part, kNames[i]) && absl::SimpleAtoi(part, values[i]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(absl::StrCat("not a reader position: \"", text, "\""));
  }
  return p;
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Create(ReaderOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  ASSIGN_OR_RETURN(ShardPlan plan,
                   ShardPlan::Create(options.files, options.rank, options.num_workers,
                                     options.shuffle, options.shuffle_seed));
  return std::unique_ptr<CriteoReader>(new CriteoReader(std::move(options), std::move(plan)));
}

CriteoReader::CriteoReader(ReaderOptions options, ShardPlan plan)
    : options_(std::move(options)),
      plan_(std::move(plan)),
      parser_(options_.format, options_.num_dense, options_.num_columns, options_.fields) {
  StartEpoch(0);
}

void CriteoReader::StartEpoch(uint64_t epoch) {
  epoch_ = epoch;
  unit_ = 0;
  CloseUnit();
  units_.clear();
  if (epoch_ < options_.epochs) units_ = plan_.Units(epoch_);
  window_.clear();
  window_order_.clear();
  window_text_.clear();
  taken_ = 0;
}

ReaderPosition CriteoReader::Cursor() const {
  ReaderPosition p;
  p.epoch = epoch_;
  p.unit = unit_;
  if (source_ != nullptr) {
    p.line = source_->next_line();
    p.offset = source_->next_offset();
  }
  return p;
}

ReaderPosition CriteoReader::position() const {
  const bool in_window = taken_ < window_.size();
  ReaderPosition p = in_window ? window_start_ : Cursor();
  p.taken = in_window ? taken_ : 0;
  p.bad_lines = bad_lines_;
  p.samples = samples_;
  return p;
}

CriteoReader::Stats CriteoReader::stats() const {
  Stats s = closed_;
  if (source_ != nullptr) {
    s.bytes_decompressed += source_->bytes_decompressed();
    s.bytes_read_plain += source_->bytes_read();
  }
  return s;
}

absl::Status CriteoReader::OpenUnit(bool at_start, uint64_t offset, uint64_t line) {
  const ReadUnit& unit = units_[unit_];
  ASSIGN_OR_RETURN(source_,
                   LineSource::Open(plan_.files()[unit.file].path, options_.max_line_bytes));
  if (at_start && unit.begin == 0) return absl::OkStatus();
  absl::Status status =
      at_start ? source_->SeekToLineAtOrAfter(unit.begin, 0) : source_->Seek(offset, line);
  if (!status.ok()) CloseUnit();
  return status;
}

void CriteoReader::CloseUnit() {
  if (source_ == nullptr) return;
  closed_.bytes_decompressed += source_->bytes_decompressed();
  closed_.bytes_read_plain += source_->bytes_read();
  source_.reset();
}

absl::Status CriteoReader::Seek(const ReaderPosition& p) {
  const bool at_start = p.line == 0 && p.offset == 0;
  bool valid = p.epoch <= options_.epochs;
  if (valid && p.epoch == options_.epochs) {
    valid = p.unit == 0 && at_start && p.taken == 0;  // The end.
  } else if (valid) {
    const std::vector<ReadUnit> units = plan_.Units(p.epoch);
    if (p.unit >= units.size()) {
      valid = p.unit == units.size() && at_start && p.taken == 0;  // The epoch's end.
    } else if (!at_start) {
      // A unit's line 0 is its first line at or after `begin`; later lines
      // start after it.
      const uint64_t begin = units[p.unit].begin;
      valid = p.line == 0 ? begin > 0 && p.offset >= begin : p.offset > begin;
    }
  }
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reader position out of range for ", options_.epochs, " epochs of ", options_.files.size(),
        " files (worker ", options_.rank, " of ", options_.num_workers, "): ", EncodePosition(p)));
  }
  StartEpoch(p.epoch);
  unit_ = p.unit;
  bad_lines_ = p.bad_lines;
  samples_ = p.samples;
  failed_ = absl::OkStatus();
  if (!at_start) failed_ = OpenUnit(false, p.offset, p.line);
  if (failed_.ok() && p.taken > 0) {
    failed_ = FillWindow();
    if (failed_.ok() && p.taken >= window_.size()) {
      failed_ = absl::InvalidArgumentError(absl::StrCat("reader position takes ", p.taken,
                                                        " lines of a shuffle window of ",
                                                        window_.size(), ": ", EncodePosition(p)));
    }
    if (failed_.ok()) taken_ = p.taken;
  }
  return failed_;
}

absl::Status CriteoReader::FillWindow() {
  window_start_ = Cursor();
  window_.clear();
  window_order_.clear();
  window_text_.clear();
  taken_ = 0;
  const uint64_t capacity = std::max<uint64_t>(options_.shuffle_buffer, 1);
  LineSource::Line line;
  while (window_.size() < capacity && unit_ < units_.size()) {
    if (source_ == nullptr) RETURN_IF_ERROR(OpenUnit(true, 0, 0));
    Held held{unit_, source_->next_line(), source_->next_offset(), window_text_.size(), 0, false};
    bool more = held.offset < units_[unit_].end;
    if (more) {
      ASSIGN_OR_RETURN(more, source_->Next(&line));
    }
    if (!more) {
      CloseUnit();
      ++unit_;
      continue;
    }
    held.too_long = line.too_long;
    held.text_size = static_cast<uint32_t>(line.text.size());
    window_text_.append(line.text.data(), line.text.size());
    window_.push_back(held);
  }
  closed_.lines += window_.size();
  window_order_.resize(window_.size());
  std::iota(window_order_.begin(), window_order_.end(), uint32_t{0});
  if (capacity > 1) {
    uint64_t state = Mix64(options_.shuffle_seed ^ 0x6a09e667f3bcc909ULL);
    for (uint64_t v :
         {window_start_.epoch, window_start_.unit, window_start_.line, window_start_.offset}) {
      state = Mix64(state ^ Mix64(v));
    }
    SeededShuffle(state, &window_order_);
  }
  return absl::OkStatus();
}

absl::Status CriteoReader::BadLine(const Held& held, absl::string_view what) {
  ++bad_lines_;
  const ReadUnit& unit = units_[held.unit];
  const std::string& path = plan_.files()[unit.file].path;
  // Only a unit that starts the file knows its lines' numbers in the file.
  const std::string where = unit.begin == 0
                                ? absl::StrCat(path, ":", held.line + 1, ": ")
                                : absl::StrCat(path, ": line at byte ", held.offset, ": ");
  if (bad_lines_ <= kLogFirst || bad_lines_ % kLogEvery == 0) {
    LOG(WARNING) << where << what << " (malformed line #" << bad_lines_
                 << " of this reader, skipped)";
  }
  if (bad_lines_ <= options_.error_budget) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(where, what, "; ", bad_lines_,
                                                 " malformed lines exceed the error budget (",
                                                 options_.error_budget, ", data.error_budget)"));
}

absl::Status CriteoReader::Emit(Batch* batch) {
  const Held& held = window_[window_order_[taken_++]];
  if (held.too_long) {
    return BadLine(held, absl::StrCat("longer than ", options_.max_line_bytes, " bytes"));
  }
  const absl::string_view text(window_text_.data() + held.text_begin, held.text_size);
  absl::Status status = parser_.Parse(text, batch);
  if (!status.ok()) return BadLine(held, status.message());
  return absl::OkStatus();
}

absl::StatusOr<bool> CriteoReader::NextBatch(int max_batch, Batch* batch) {
  if (max_batch <= 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("NextBatch: max_batch must be > 0, got ", max_batch));
  }
  RETURN_IF_ERROR(failed_);
  batch->Reset(options_.num_dense, static_cast<int>(options_.fields.size()));
  while (batch->size < max_batch && epoch_ < options_.epochs) {
    absl::Status status;
    if (taken_ < window_.size()) {
      status = Emit(batch);
    } else if (unit_ >= units_.size()) {
      StartEpoch(epoch_ + 1);
      continue;
    } else {
      status = FillWindow();
    }
    if (!status.ok()) {
      failed_ = status;
      return status;
    }
  }
  samples_ += batch->size;
  batch->end_position = position();
  return batch->size > 0;
}

}  // namespace data
}  // namespace shardps

#include "worker/data/criteo_reader.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <numeric>
#include <utility>

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
  if (o.stripe_lines == 0) return bad("stripe_lines must be > 0");
  if (o.max_line_bytes < 16) return bad("max_line_bytes must be >= 16");
  if (o.num_dense < 0) return bad("num_dense must be >= 0");
  if (o.num_columns < 1 + o.num_dense) {
    return bad(absl::StrCat("num_columns ", o.num_columns, " < 1 + num_dense ",
                            o.num_dense));
  }
  for (const FieldSpec& f : o.fields) {
    if (f.column < 1 + o.num_dense || f.column >= o.num_columns) {
      return bad(absl::StrCat("field ", f.name, ": column ", f.column,
                              " is not a categorical column (", 1 + o.num_dense,
                              "..", o.num_columns - 1, ")"));
    }
  }
  for (const std::string& path : o.files) {
    struct stat st;
    if (stat(path.c_str(), &st) != 0) {
      const std::string what = absl::StrCat(path, ": ", std::strerror(errno));
      if (errno == ENOENT) return absl::NotFoundError(what);
      return absl::FailedPreconditionError(what);
    }
    if (S_ISDIR(st.st_mode)) {
      return absl::FailedPreconditionError(absl::StrCat(path, ": is a directory"));
    }
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<ReaderOptions> ReaderOptionsFromConfig(
    const JobConfig& config, std::vector<std::string> files, uint32_t rank,
    uint32_t num_workers, bool training) {
  ReaderOptions o;
  ASSIGN_OR_RETURN(o.fields, ResolveFields(config));
  const DataConfig& data = config.data();
  o.files = std::move(files);
  o.format = data.format() == DataConfig::TSV_MULTIHOT ? DataConfig::TSV_MULTIHOT
                                                       : DataConfig::CRITEO;
  o.num_dense = NumDense(data);
  o.num_columns = NumColumns(data, o.fields, config.fields_size() > 0);
  o.error_budget = data.error_budget() == 0 ? 100 : data.error_budget();
  o.rank = rank;
  o.num_workers = num_workers;
  if (rank >= num_workers) {
    return absl::InvalidArgumentError(
        absl::StrCat("rank ", rank, " >= num_workers ", num_workers));
  }
  if (training) {
    o.epochs = config.training().epochs() == 0 ? 1 : config.training().epochs();
    o.shuffle = true;
    o.shuffle_seed = config.training().shuffle_seed();
  }
  return o;
}

std::string EncodePosition(const ReaderPosition& p) {
  return absl::StrCat("v1 epoch=", p.epoch, " file=", p.file_ordinal,
                      " line=", p.line, " offset=", p.offset, " bad=",
                      p.bad_lines);
}

absl::StatusOr<ReaderPosition> DecodePosition(absl::string_view text) {
  const std::vector<absl::string_view> parts = absl::StrSplit(text, ' ');
  const char* const kNames[] = {"epoch=", "file=", "line=", "offset=", "bad="};
  ReaderPosition p;
  uint64_t* const values[] = {&p.epoch, &p.file_ordinal, &p.line, &p.offset,
                              &p.bad_lines};
  bool ok = parts.size() == 6 && parts[0] == "v1";
  for (int i = 0; ok && i < 5; ++i) {
    absl::string_view part = parts[i + 1];
    ok = absl::ConsumePrefix(&part, kNames[i]) && absl::SimpleAtoi(part, values[i]);
  }
  if (!ok) {
    return absl::InvalidArgumentError(
        absl::StrCat("not a reader position: \"", text, "\""));
  }
  return p;
}

absl::StatusOr<std::unique_ptr<CriteoReader>> CriteoReader::Create(
    ReaderOptions options) {
  RETURN_IF_ERROR(ValidateOptions(options));
  return std::unique_ptr<CriteoReader>(new CriteoReader(std::move(options)));
}

CriteoReader::CriteoReader(ReaderOptions options)
    : options_(std::move(options)),
      parser_(options_.format, options_.num_dense, options_.num_columns,
              options_.fields) {
  StartEpoch(0);
}

std::vector<size_t> CriteoReader::FileOrder(uint64_t epoch) const {
  std::vector<size_t> order(options_.files.size());
  std::iota(order.begin(), order.end(), size_t{0});
  if (!options_.shuffle) return order;
  // splitmix64 stream seeded by (seed, epoch); Fisher-Yates with a
  // multiply-shift draw, so the order is the same with every standard library.
  uint64_t state = Mix64(options_.shuffle_seed ^ Mix64(epoch + 0x5bd1e995ULL));
  for (size_t i = order.size(); i > 1; --i) {
    state += 0x9e3779b97f4a7c15ULL;
    const uint64_t r = Mix64(state);
    const size_t j = static_cast<size_t>(
        (static_cast<unsigned __int128>(r) * i) >> 64);
    std::swap(order[i - 1], order[j]);
  }
  return order;
}

bool CriteoReader::Owns(size_t file_index, uint64_t line) const {
  const uint64_t stripe = line / options_.stripe_lines;
  return (stripe + file_index) % options_.num_workers == options_.rank;
}

void CriteoReader::StartEpoch(uint64_t epoch) {
  epoch_ = epoch;
  file_ordinal_ = 0;
  source_.reset();
  if (epoch_ < options_.epochs) order_ = FileOrder(epoch_);
}

ReaderPosition CriteoReader::position() const {
  ReaderPosition p;
  p.epoch = epoch_;
  p.file_ordinal = file_ordinal_;
  if (source_ != nullptr) {
    p.line = source_->next_line();
    p.offset = source_->next_offset();
  }
  p.bad_lines = bad_lines_;
  return p;
}

absl::Status CriteoReader::OpenCurrent(uint64_t offset, uint64_t line) {
  ASSIGN_OR_RETURN(source_, LineSource::Open(options_.files[order_[file_ordinal_]],
                                             options_.max_line_bytes));
  if (offset == 0 && line == 0) return absl::OkStatus();
  absl::Status status = source_->Seek(offset, line);
  if (!status.ok()) source_.reset();
  return status;
}

absl::Status CriteoReader::Seek(const ReaderPosition& p) {
  const uint64_t num_files = options_.files.size();
  const bool at_file_start = p.line == 0 && p.offset == 0;
  bool valid = (p.line == 0) == (p.offset == 0);  // Line 0 is at offset 0.
  if (p.epoch == options_.epochs) {
    valid = valid && p.file_ordinal == 0 && at_file_start;  // The end.
  } else {
    valid = valid && p.epoch < options_.epochs &&
            (p.file_ordinal < num_files ||
             (p.file_ordinal == num_files && at_file_start));
  }
  if (!valid) {
    return absl::InvalidArgumentError(absl::StrCat(
        "reader position out of range for ", options_.epochs, " epochs of ",
        num_files, " files: ", EncodePosition(p)));
  }
  StartEpoch(p.epoch);
  file_ordinal_ = p.file_ordinal;
  bad_lines_ = p.bad_lines;
  failed_ = absl::OkStatus();
  if (!at_file_start) failed_ = OpenCurrent(p.offset, p.line);
  return failed_;
}

absl::Status CriteoReader::BadLine(uint64_t line_index, absl::string_view what) {
  ++bad_lines_;
  const std::string where =
      absl::StrCat(source_->path(), ":", line_index + 1, ": ");
  if (bad_lines_ <= kLogFirst || bad_lines_ % kLogEvery == 0) {
    LOG(WARNING) << where << what << " (malformed line #" << bad_lines_
                 << " of this reader, skipped)";
  }
  if (bad_lines_ <= options_.error_budget) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      where, what, "; ", bad_lines_, " malformed lines exceed the error budget (",
      options_.error_budget, ", data.error_budget)"));
}

absl::Status CriteoReader::ReadFromCurrent(int max_batch, Batch* batch) {
  const size_t file_index = order_[file_ordinal_];
  LineSource::Line line;
  while (batch->size < max_batch) {
    const uint64_t index = source_->next_line();
    ASSIGN_OR_RETURN(const bool more, source_->Next(&line));
    if (!more) {
      source_.reset();
      ++file_ordinal_;
      return absl::OkStatus();
    }
    if (!Owns(file_index, index)) continue;
    if (line.too_long) {
      RETURN_IF_ERROR(BadLine(
          index, absl::StrCat("longer than ", options_.max_line_bytes, " bytes")));
      continue;
    }
    absl::Status status = parser_.Parse(line.text, batch);
    if (!status.ok()) RETURN_IF_ERROR(BadLine(index, status.message()));
  }
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
    if (file_ordinal_ >= order_.size()) {
      StartEpoch(epoch_ + 1);
      continue;
    }
    absl::Status status =
        source_ == nullptr ? OpenCurrent(0, 0) : absl::OkStatus();
    if (status.ok()) status = ReadFromCurrent(max_batch, batch);
    if (!status.ok()) {
      failed_ = status;
      return status;
    }
  }
  batch->end_position = position();
  return batch->size > 0;
}

}  // namespace data
}  // namespace shardps

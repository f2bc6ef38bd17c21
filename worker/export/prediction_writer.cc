#include "worker/export/prediction_writer.h"

#include <cstdio>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/checkpoint/file_io.h"
#include "common/status_macros.h"
#include "worker/data/criteo_reader.h"
#include "worker/data/line_parser.h"
#include "worker/data/line_source.h"

namespace shardps {
namespace exporter {

// Walks the input lines and classifies each one as the reader would.
struct PredictionWriter::Impl {
  Impl(data::ReaderOptions o, std::unique_ptr<checkpoint::AtomicFileWriter> out)
      : options(std::move(o)),
        parser(options.format, options.num_dense, options.num_columns, options.fields),
        out(std::move(out)) {}

  // The next input line: true and `*good` (with `*label` if good), or false
  // after the last line of the last file.
  absl::StatusOr<bool> NextLine(bool* good, float* label) {
    data::LineSource::Line line;
    while (true) {
      if (source == nullptr) {
        if (next_file >= options.files.size()) return false;
        ASSIGN_OR_RETURN(
            source, data::LineSource::Open(options.files[next_file++], options.max_line_bytes));
      }
      line_index = source->next_line();
      ASSIGN_OR_RETURN(const bool more, source->Next(&line));
      if (more) break;
      source.reset();
    }
    scratch.Reset(parser.num_dense(), parser.num_fields());
    *good = !line.too_long && parser.Parse(line.text, &scratch).ok();
    if (*good) *label = scratch.labels[0];
    return true;
  }

  std::string Where() const {
    return source ? absl::StrCat(source->path(), ":", line_index + 1) : "the end of the input";
  }

  absl::Status Flush(bool force) {
    if (!force && buffer.size() < (1 << 16)) return absl::OkStatus();
    RETURN_IF_ERROR(out->Append(buffer));
    buffer.clear();
    return absl::OkStatus();
  }

  const data::ReaderOptions options;
  data::LineParser parser;
  std::unique_ptr<checkpoint::AtomicFileWriter> out;
  std::unique_ptr<data::LineSource> source;
  size_t next_file = 0;
  uint64_t line_index = 0;
  data::Batch scratch;
  std::string buffer;
};

PredictionWriter::PredictionWriter(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
PredictionWriter::~PredictionWriter() = default;

absl::StatusOr<std::unique_ptr<PredictionWriter>> PredictionWriter::Create(
    const JobConfig& config, std::vector<std::string> files, const std::string& out_path) {
  ASSIGN_OR_RETURN(data::ReaderOptions options,
                   data::ReaderOptionsFromConfig(config, std::move(files), 0, 1, false));
  ASSIGN_OR_RETURN(std::unique_ptr<checkpoint::AtomicFileWriter> out,
                   checkpoint::AtomicFileWriter::Create(out_path));
  return std::unique_ptr<PredictionWriter>(
      new PredictionWriter(std::make_unique<Impl>(std::move(options), std::move(out))));
}

absl::Status PredictionWriter::Add(const data::Batch& batch, absl::Span<const float> probs) {
  if (probs.size() != static_cast<size_t>(batch.size)) {
    return absl::InternalError(absl::StrCat("PredictionWriter: ", probs.size(),
                                            " predictions for a batch of ", batch.size));
  }
  char text[32];
  for (int i = 0; i < batch.size; ++i) {
    while (true) {
      bool good = false;
      float label = 0;
      ASSIGN_OR_RETURN(const bool more, impl_->NextLine(&good, &label));
      if (!more) {
        return absl::InternalError(
            "PredictionWriter: the input files ended before the scored examples did");
      }
      ++lines_;
      if (!good) {
        ++malformed_;
        impl_->buffer += "nan\n";
        continue;
      }
      if (label != batch.labels[i]) {
        return absl::InternalError(absl::StrCat("PredictionWriter: ", impl_->Where(), " has label ",
                                                label, ", the scored example ", batch.labels[i],
                                                ": predictions would not line up"));
      }
      std::snprintf(text, sizeof text, "%.9g\n", probs[i]);
      impl_->buffer += text;
      break;
    }
  }
  return impl_->Flush(false);
}

absl::Status PredictionWriter::Finish() {
  while (true) {
    bool good = false;
    float label = 0;
    ASSIGN_OR_RETURN(const bool more, impl_->NextLine(&good, &label));
    if (!more) break;
    if (good) {
      return absl::InternalError(absl::StrCat("PredictionWriter: ", impl_->Where(),
                                              " is well-formed but was never scored"));
    }
    ++lines_;
    ++malformed_;
    impl_->buffer += "nan\n";
  }
  RETURN_IF_ERROR(impl_->Flush(true));
  return impl_->out->Commit();
}

}  // namespace exporter
}  // namespace shardps

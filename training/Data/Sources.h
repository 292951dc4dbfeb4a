// Training data sources: what a run trains on (file patterns, weights, the
// validation data), opened into files and the ranges of them that train and
// validate.
//
//   llmc::data::DataSpec spec;
//   spec.train = {{"web", {"web/*.bin"}, 0.7}, {"code", {"code/*.tok"}, 0.3}};
//   spec.valFraction = 0.05;              // or spec.val = {"val/*.bin"}
//   auto opened = llmc::data::openSources(spec, tokenizer.get());
//   // opened->train[s].segments: the files' token ranges source s trains on;
//   // opened->val: the validation ranges. Nothing is read but headers.
//
// A segment is a range of one file's tokens; windows of T + 1 tokens never
// cross a file, so a segment of L tokens gives (L - 1) / T windows, starting
// at 0, T, 2T, ... of it.
#ifndef LLMC_TRAINING_DATA_SOURCES_H
#define LLMC_TRAINING_DATA_SOURCES_H

#include "training/Data/TokenFile.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace llmc::data {

/// One training source as configured: its files (patterns) and its weight
/// in a blend.
struct SourceSpec {
  std::string name;
  std::vector<std::string> patterns;
  double weight = 1;
};

/// Everything a run's data is made from.
struct DataSpec {
  std::vector<SourceSpec> train;
  /// Validation files (patterns); empty: the last valFraction of each
  /// training source's tokens.
  std::vector<std::string> val;
  double valFraction = 0;
};

/// The files a pattern names: itself if it has no glob characters (* ? [),
/// else the files of its directory whose names match its last component,
/// sorted. An error if a pattern matches nothing.
llvm::Expected<std::vector<std::string>>
expandFilePatterns(llvm::ArrayRef<std::string> patterns);

/// Tokens [start, start + count) of one file.
struct Segment {
  std::shared_ptr<TokenFile> file;
  int64_t start = 0;
  int64_t count = 0;
  /// The windows of seqLen + 1 tokens in it: (count - 1) / seqLen.
  int64_t windows(int64_t seqLen) const {
    return count > 0 ? (count - 1) / seqLen : 0;
  }
};

/// A training source opened: its files and the ranges of them it trains on.
struct Source {
  std::string name;
  double weight = 1;
  /// The patterns' files, in order; every segment is a range of one.
  std::vector<std::string> files;
  std::vector<Segment> segments;
  int64_t tokens() const;
  int64_t windows(int64_t seqLen) const;
};

struct OpenedSources {
  std::vector<Source> train;
  /// The validation ranges: the val files whole, or each training source's
  /// held-out end, in source order.
  std::vector<Segment> val;
  int64_t valTokens() const;
};

/// Expands the patterns and opens every file (headers only; text files are
/// encoded with `tokenizer`). Errors name the source (data.train[i]) or the
/// file: a pattern that matches nothing, a bad file, a weight that is not a
/// positive number, a file that is both training and validation data, a
/// validation fraction outside [0, 1).
llvm::Expected<OpenedSources> openSources(const DataSpec &spec,
                                          const Tokenizer *tokenizer);

/// Cuts the last floor(N * fraction) of the N tokens of `segments` (taken
/// as one stream in order) off into `heldOut`; this may cut one file in two.
void holdOutFraction(std::vector<Segment> &segments, double fraction,
                     std::vector<Segment> &heldOut);

} // namespace llmc::data

#endif // LLMC_TRAINING_DATA_SOURCES_H

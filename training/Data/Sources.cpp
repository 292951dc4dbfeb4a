// Training data sources: patterns expanded, files opened, the validation cut.
#include "training/Data/Sources.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/GlobPattern.h"
#include "llvm/Support/Path.h"

#include <algorithm>
#include <cmath>
#include <map>

using namespace llmc;
using namespace llmc::data;

llvm::Expected<std::vector<std::string>>
llmc::data::expandFilePatterns(llvm::ArrayRef<std::string> patterns) {
  std::vector<std::string> files;
  for (const std::string &pattern : patterns) {
    llvm::StringRef name = llvm::sys::path::filename(pattern);
    if (name.find_first_of("*?[") == llvm::StringRef::npos) {
      files.push_back(pattern);
      continue;
    }
    llvm::Expected<llvm::GlobPattern> glob = llvm::GlobPattern::create(name);
    if (!glob)
      return llvm::createStringError("bad file pattern '" + pattern +
                                     "': " + llvm::toString(glob.takeError()));
    llvm::StringRef dir = llvm::sys::path::parent_path(pattern);
    std::vector<std::string> matches;
    std::error_code error;
    for (llvm::sys::fs::directory_iterator it(dir.empty() ? "." : dir, error),
         end;
         it != end && !error; it.increment(error)) {
      llvm::StringRef entry = llvm::sys::path::filename(it->path());
      if (glob->match(entry))
        matches.push_back(dir.empty() ? entry.str() : it->path());
    }
    if (error)
      return llvm::createStringError(error, "cannot list '" + dir + "' for '" +
                                                pattern +
                                                "': " + error.message());
    if (matches.empty())
      return llvm::createStringError("no files match '" + pattern + "'");
    std::sort(matches.begin(), matches.end());
    files.insert(files.end(), matches.begin(), matches.end());
  }
  return files;
}

int64_t Source::tokens() const {
  int64_t total = 0;
  for (const Segment &segment : segments)
    total += segment.count;
  return total;
}

int64_t Source::windows(int64_t seqLen) const {
  int64_t total = 0;
  for (const Segment &segment : segments)
    total += segment.windows(seqLen);
  return total;
}

int64_t OpenedSources::valTokens() const {
  int64_t total = 0;
  for (const Segment &segment : val)
    total += segment.count;
  return total;
}

void llmc::data::holdOutFraction(std::vector<Segment> &segments,
                                 double fraction,
                                 std::vector<Segment> &heldOut) {
  int64_t total = 0;
  for (const Segment &segment : segments)
    total += segment.count;
  int64_t cut = std::min(total, int64_t(std::floor(double(total) * fraction)));
  // Walk back from the end: whole segments, then the end of one.
  std::vector<Segment> tail;
  while (cut > 0 && !segments.empty()) {
    Segment &last = segments.back();
    if (last.count <= cut) {
      cut -= last.count;
      tail.push_back(last);
      segments.pop_back();
      continue;
    }
    Segment end = last;
    end.start = last.start + last.count - cut;
    end.count = cut;
    last.count -= cut;
    tail.push_back(end);
    cut = 0;
  }
  heldOut.insert(heldOut.end(), tail.rbegin(), tail.rend());
}

namespace {
/// Opens `paths`, each once: a file named again reuses its TokenFile.
llvm::Error openFiles(llvm::ArrayRef<std::string> paths,
                      const Tokenizer *tokenizer,
                      std::map<std::string, std::shared_ptr<TokenFile>> &opened,
                      std::vector<Segment> &segments) {
  for (const std::string &path : paths) {
    std::shared_ptr<TokenFile> &file = opened[path];
    if (!file) {
      llvm::Expected<std::shared_ptr<TokenFile>> open =
          TokenFile::open(path, tokenizer);
      if (!open)
        return open.takeError();
      file = std::move(*open);
    }
    segments.push_back({file, 0, file->numTokens()});
  }
  return llvm::Error::success();
}
} // namespace

llvm::Expected<OpenedSources>
llmc::data::openSources(const DataSpec &spec, const Tokenizer *tokenizer) {
  if (spec.train.empty())
    return llvm::createStringError("no training data files given");
  if (!(spec.valFraction >= 0 && spec.valFraction < 1))
    return llvm::createStringError(llvm::formatv(
        "validation fraction {0} is out of range; expected a value in [0, 1)",
        spec.valFraction));
  OpenedSources result;
  std::map<std::string, std::shared_ptr<TokenFile>> opened;
  for (size_t s = 0; s < spec.train.size(); ++s) {
    const SourceSpec &sourceSpec = spec.train[s];
    std::string where = spec.train.size() == 1
                            ? std::string("data.train")
                            : llvm::formatv("data.train[{0}] ({1})", s,
                                            sourceSpec.name)
                                  .str();
    if (!(sourceSpec.weight > 0) || !std::isfinite(sourceSpec.weight))
      return llvm::createStringError(llvm::formatv(
          "{0}: weight {1} is not a positive number", where,
          sourceSpec.weight));
    llvm::Expected<std::vector<std::string>> files =
        expandFilePatterns(sourceSpec.patterns);
    if (!files)
      return llvm::createStringError(where + ": " +
                                     llvm::toString(files.takeError()));
    Source source;
    source.name = sourceSpec.name;
    source.weight = sourceSpec.weight;
    source.files = *files;
    if (llvm::Error err =
            openFiles(*files, tokenizer, opened, source.segments))
      return llvm::createStringError(where + ": " +
                                     llvm::toString(std::move(err)));
    result.train.push_back(std::move(source));
  }
  if (spec.val.empty()) {
    for (Source &source : result.train)
      holdOutFraction(source.segments, spec.valFraction, result.val);
    return result;
  }
  llvm::Expected<std::vector<std::string>> valFiles =
      expandFilePatterns(spec.val);
  if (!valFiles)
    return llvm::createStringError("data.val: " +
                                   llvm::toString(valFiles.takeError()));
  for (const std::string &path : *valFiles)
    for (const Source &source : result.train)
      if (llvm::is_contained(source.files, path))
        return llvm::createStringError(
            "'" + path + "' is both a training (source '" + source.name +
            "') and a validation file");
  if (llvm::Error err = openFiles(*valFiles, tokenizer, opened, result.val))
    return llvm::createStringError("data.val: " +
                                   llvm::toString(std::move(err)));
  return result;
}

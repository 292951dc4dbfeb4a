// Finding the checkpoint a session resumes from; making OUT ready.
#include "training/Checkpointing.h"

#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"

using namespace llmc;
using namespace llmc::training;
namespace rt = ::llmc::runtime;

namespace {
std::string joinPath(llvm::StringRef dir, llvm::StringRef name) {
  llvm::SmallString<256> path(dir);
  llvm::sys::path::append(path, name);
  return std::string(path);
}

/// Removes the temporary files of OUT's own files (config.yaml,
/// metrics.jsonl, loss.svg) that a killed run never renamed; appends them
/// to `removed`.
llvm::Error removeInterruptedOutputFiles(const std::string &dir,
                                         std::vector<std::string> &removed) {
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(dir, ec), end; !ec && it != end;
       it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    if (!llvm::any_of(std::initializer_list<llvm::StringRef>{"config.yaml",
                                                             "metrics.jsonl",
                                                             "loss.svg"},
                      [&](llvm::StringRef target) {
                        return kir::isTemporaryFileOf(name, target);
                      }))
      continue;
    if (std::error_code removeEc = llvm::sys::fs::remove(it->path()))
      return llvm::createStringError("cannot remove '" + it->path() +
                                     "': " + removeEc.message());
    removed.push_back(it->path());
  }
  return llvm::Error::success();
}
} // namespace

std::string training::checkpointDirectory(const TrainingConfig &config) {
  return joinPath(config.out, "checkpoints");
}

llvm::Expected<ResumePoint>
training::findResumePoint(const TrainingConfig &config,
                          const ResumeRequest &request, bool warn) {
  std::string checkpointDir = checkpointDirectory(config);
  ResumePoint point;
  point.path = request.path;
  point.sections = resumeSections(config);
  std::optional<rt::Checkpoint> latest;
  if (request.latest && point.path.empty()) {
    llvm::Expected<std::pair<std::string, rt::Checkpoint>> found =
        rt::readLatestGoodCheckpoint(checkpointDir, point.damaged);
    if (!found)
      return llvm::createStringError("--resume: " +
                                     llvm::toString(found.takeError()));
    point.path = found->first;
    latest = std::move(found->second);
    if (warn)
      for (const rt::DamagedCheckpoint &d : point.damaged)
        llvm::WithColor::warning(llvm::errs(), "llmc run")
            << "--resume: skipping the damaged checkpoint " << d.path << ": "
            << d.reason << "; resuming from the newest good one, " << point.path
            << "\n";
  }
  if (!point.path.empty()) {
    llvm::Expected<rt::Checkpoint> read =
        latest ? std::move(*latest) : rt::readCheckpoint(point.path);
    if (!read)
      return read.takeError();
    std::string difference =
        rt::describeConfigDifference(read->config, point.sections);
    if (!difference.empty())
      return llvm::createStringError(
          point.path +
          ": cannot resume: the config differs from the one the "
          "checkpoint was trained with:\n" +
          llvm::StringRef(difference).rtrim() +
          "\n(model, optimizer and data must match; steps, "
          "intervals and the output directory may change)");
    point.checkpoint = std::move(*read);
  } else if (!rt::listCheckpoints(checkpointDir).empty()) {
    return llvm::createStringError(
        "'" + config.out +
        "' already holds checkpoints of a run; continue it with "
        "--resume or choose another --out");
  }
  return point;
}

llvm::Error training::prepareOutputDirectory(const TrainingConfig &config,
                                             const ResumePoint &resume,
                                             llvm::raw_ostream &out) {
  if (std::error_code ec = llvm::sys::fs::create_directories(config.out))
    return llvm::createStringError("cannot create '" + config.out +
                                   "': " + ec.message());
  // What a run killed while writing (SIGKILL, a node lost) left: the
  // temporary files of a checkpoint, config.yaml, metrics.jsonl or
  // loss.svg, never renamed, and rank files of a ZeRO checkpoint whose
  // main file never came.
  llvm::Expected<std::vector<std::string>> stale =
      rt::removeInterruptedCheckpointFiles(checkpointDirectory(config));
  if (!stale)
    return stale.takeError();
  if (llvm::Error err = removeInterruptedOutputFiles(config.out, *stale))
    return err;
  if (!stale->empty())
    out << "llmc run: removed " << stale->size() << " file"
        << (stale->size() == 1 ? "" : "s") << " of an interrupted write ("
        << stale->front() << (stale->size() > 1 ? ", ..." : "") << ")\n";
  for (const rt::DamagedCheckpoint &d : resume.damaged) {
    if (llvm::Error err = rt::setAsideCheckpoint(d.path))
      return err;
    out << "llmc run: renamed the damaged checkpoint to " << d.path
        << ".damaged\n";
  }
  std::string text;
  llvm::raw_string_ostream os(text);
  printTrainingConfig(config, os);
  return kir::writeFileAtomically(
      joinPath(config.out, "config.yaml"),
      llvm::ArrayRef<uint8_t>(reinterpret_cast<const uint8_t *>(text.data()),
                              text.size()));
}

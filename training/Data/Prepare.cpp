// `llmc data prepare`'s engine: the output directory and its state, the
// reader -> workers -> in-order writer pipeline, progress and the summary.
#include "training/Data/Prepare.h"

#include "training/Data/PrepareInput.h"
#include "training/Data/PrepareState.h"

#include "frontend/Tokenizer.h"
#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <thread>

using namespace llmc::data;

/// Input bytes per batch: large enough that a batch's overhead (a queue
/// hand-off, a tokenizer call per document) is small, small enough that
/// the batches in flight stay a few MB per worker.
static constexpr int64_t kBatchBytes = 1 << 20;

static llvm::StringRef shardExtension(TokenFormat format) {
  return format == TokenFormat::LlmcShard ? ".bin" : ".tok";
}

std::string llmc::data::shardPath(const PrepareOptions &options,
                                  int64_t index) {
  llvm::SmallString<256> path(options.outputDir);
  llvm::sys::path::append(path, llvm::formatv("{0}_{1:d6}{2}", options.prefix,
                                              index,
                                              shardExtension(options.format))
                                    .str());
  return path.str().str();
}

std::string llmc::data::statePath(const PrepareOptions &options) {
  llvm::SmallString<256> path(options.outputDir);
  llvm::sys::path::append(path, options.prefix + ".prepare.json");
  return path.str().str();
}

//===----------------------------------------------------------------------===//
// The output directory
//===----------------------------------------------------------------------===//

namespace {
/// A file of the output directory that belongs to this prefix.
struct OwnedFile {
  std::string path;
  bool temporary = false;
  int64_t shardIndex = -1; // for shards
};
} // namespace

/// Whether `name` is PREFIX_<digits><ext>; sets `index`.
static bool isShardName(llvm::StringRef name, const PrepareOptions &options,
                        int64_t &index) {
  if (!name.consume_front(options.prefix + "_") ||
      !name.consume_back(shardExtension(options.format)) || name.size() < 6 ||
      !llvm::all_of(name, llvm::isDigit))
    return false;
  return !name.getAsInteger(10, index);
}

/// The shards, the state file's and the shards' temporaries (left behind by
/// a process that was killed while writing) in the output directory.
static llvm::Expected<std::vector<OwnedFile>>
listOwnedFiles(const PrepareOptions &options) {
  std::vector<OwnedFile> files;
  std::string state = llvm::sys::path::filename(statePath(options)).str();
  std::error_code ec;
  for (llvm::sys::fs::directory_iterator it(options.outputDir, ec), end;
       !ec && it != end; it.increment(ec)) {
    llvm::StringRef name = llvm::sys::path::filename(it->path());
    int64_t index = -1;
    OwnedFile file{it->path(), false, -1};
    if (isShardName(name, options, index)) {
      file.shardIndex = index;
    } else {
      size_t tmp = name.find(".tmp");
      llvm::StringRef target = name.take_front(tmp);
      if (tmp == llvm::StringRef::npos ||
          !(target == state || isShardName(target, options, index)))
        continue;
      file.temporary = true;
    }
    files.push_back(std::move(file));
  }
  if (ec)
    return llvm::createStringError(ec, "%s: cannot list: %s",
                                   options.outputDir.c_str(),
                                   ec.message().c_str());
  return files;
}

static llvm::Error removeFile(llvm::StringRef path) {
  if (std::error_code ec = llvm::sys::fs::remove(path))
    return llvm::createStringError(ec, "%s: cannot remove: %s",
                                   path.str().c_str(), ec.message().c_str());
  return llvm::Error::success();
}

/// Checks that the shards `state` records are there with their token
/// counts (headers only).
static llvm::Error checkKeptShards(const PrepareOptions &options,
                                   const PrepareState &state) {
  for (size_t i = 0; i < state.shards.size(); ++i) {
    std::string path = shardPath(options, static_cast<int64_t>(i));
    auto file = TokenFile::open(path, nullptr);
    if (!file)
      return llvm::createStringError(
          statePath(options) + " records " + path +
          " as finished, but it cannot be read (" +
          llvm::toString(file.takeError()) +
          "); rerun with --overwrite to start over");
    if ((*file)->numTokens() != state.shards[i].tokens)
      return llvm::createStringError(llvm::formatv(
          "{0} records {1} tokens in {2}, but it holds {3}; rerun with "
          "--overwrite to start over",
          statePath(options), state.shards[i].tokens, path,
          (*file)->numTokens()));
  }
  return llvm::Error::success();
}

/// Makes the output directory ready: the state to continue from (its
/// finished shards kept, everything else of this prefix removed), or a
/// refusal when it holds another run's output and `overwrite` is off.
static llvm::Expected<PrepareState>
prepareOutputDirectory(const PrepareOptions &options,
                       const llvm::json::Object &identity) {
  if (std::error_code ec = llvm::sys::fs::create_directories(options.outputDir))
    return llvm::createStringError(ec, "%s: cannot create the output "
                                       "directory: %s",
                                   options.outputDir.c_str(),
                                   ec.message().c_str());
  auto owned = listOwnedFiles(options);
  if (!owned)
    return owned.takeError();
  std::string stateFile = statePath(options);
  PrepareState state;
  state.identity = identity;
  bool hasState = llvm::sys::fs::exists(stateFile);
  if (!options.overwrite && hasState) {
    auto stored = readState(stateFile);
    if (!stored)
      return stored.takeError();
    // A run that finished no shard has nothing to keep: start over.
    std::string why = identityDifference(stored->identity, identity);
    if (!why.empty() && !stored->shards.empty())
      return llvm::createStringError(
          stateFile + ": this directory was prepared with other options or "
                      "inputs (" + why +
          "); rerun with the same ones to continue, or with --overwrite to "
          "start over");
    if (why.empty()) {
      if (llvm::Error error = checkKeptShards(options, *stored))
        return error;
      state = std::move(*stored);
    }
  } else if (!options.overwrite) {
    for (const OwnedFile &file : *owned)
      if (!file.temporary)
        return llvm::createStringError(
            options.outputDir + " already holds " + file.path +
            " and no state file (" + stateFile +
            ") says which run wrote it; --overwrite replaces it");
  }
  int64_t kept = static_cast<int64_t>(state.shards.size());
  for (const OwnedFile &file : *owned)
    if (file.temporary || file.shardIndex >= kept)
      if (llvm::Error error = removeFile(file.path))
        return error;
  return state;
}

//===----------------------------------------------------------------------===//
// Progress
//===----------------------------------------------------------------------===//

static std::string humanCount(double value) {
  if (value >= 1e9)
    return llvm::formatv("{0:f2}G", value / 1e9).str();
  if (value >= 1e6)
    return llvm::formatv("{0:f2}M", value / 1e6).str();
  if (value >= 1e4)
    return llvm::formatv("{0:f1}k", value / 1e3).str();
  return llvm::formatv("{0}", static_cast<int64_t>(value)).str();
}

static std::string humanSeconds(double seconds) {
  int64_t s = static_cast<int64_t>(seconds + 0.5);
  if (s >= 3600)
    return llvm::formatv("{0}h{1:d2}m", s / 3600, s / 60 % 60).str();
  if (s >= 60)
    return llvm::formatv("{0}m{1:d2}s", s / 60, s % 60).str();
  return llvm::formatv("{0}s", s).str();
}

namespace {
/// Documents, tokens, tokens/s, MB/s and an ETA from input bytes, redrawn
/// in place or printed as lines at an interval.
class ProgressMeter {
public:
  ProgressMeter(const PrepareOptions &options, llvm::raw_ostream &os,
                int64_t totalBytes)
      : style(options.progress), os(os), totalBytes(totalBytes),
        interval(style == ProgressStyle::Redraw
                     ? 0.2
                     : options.progressIntervalSeconds),
        start(std::chrono::steady_clock::now()), lastShown(start) {}

  void update(int64_t documents, int64_t tokens, int64_t bytes) {
    if (style == ProgressStyle::Quiet)
      return;
    auto now = std::chrono::steady_clock::now();
    if (std::chrono::duration<double>(now - lastShown).count() < interval)
      return;
    lastShown = now;
    double seconds = std::chrono::duration<double>(now - start).count();
    double rate = seconds > 0 ? bytes / seconds : 0;
    std::string line = llvm::formatv(
        "prepare: {0} documents, {1} tokens, {2} tokens/s, {3:f1} MB/s, "
        "{4}% of {5:f1} MB, ETA {6}",
        humanCount(documents), humanCount(tokens),
        humanCount(seconds > 0 ? tokens / seconds : 0), rate / 1e6,
        totalBytes ? bytes * 100 / totalBytes : 100, totalBytes / 1e6,
        rate > 0 ? humanSeconds((totalBytes - bytes) / rate) : "-");
    if (style == ProgressStyle::Redraw)
      os << "\r" << line << "\x1b[K";
    else
      os << line << "\n";
    os.flush();
    drawn = true;
  }

  /// Clears a redrawn line before the summary.
  void finish() {
    if (style == ProgressStyle::Redraw && drawn) {
      os << "\r\x1b[K";
      os.flush();
    }
  }

private:
  ProgressStyle style;
  llvm::raw_ostream &os;
  int64_t totalBytes;
  double interval;
  std::chrono::steady_clock::time_point start, lastShown;
  bool drawn = false;
};
} // namespace

//===----------------------------------------------------------------------===//
// The pipeline
//===----------------------------------------------------------------------===//

namespace {
/// The batches between the reader, the workers and the writer. The reader
/// blocks while `limit` batches are in flight, so memory stays bounded
/// however far the workers run ahead of a slow writer.
class BatchQueue {
public:
  explicit BatchQueue(int64_t limit) : limit(limit) {}

  /// Reader: hands a batch on; false once stopped.
  bool push(Batch batch) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return stopped || inFlight < limit; });
    if (stopped)
      return false;
    ++inFlight;
    work.push_back(std::move(batch));
    changed.notify_all();
    return true;
  }
  void finishReading(int64_t batches) {
    std::lock_guard<std::mutex> lock(mutex);
    total = batches;
    changed.notify_all();
  }
  /// Worker: the next batch to encode; false when there is none left.
  bool take(Batch &batch) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] { return stopped || !work.empty() || total >= 0; });
    if (stopped || work.empty())
      return false;
    batch = std::move(work.front());
    work.pop_front();
    return true;
  }
  void deliver(EncodedBatch encoded) {
    std::lock_guard<std::mutex> lock(mutex);
    done.emplace(encoded.sequence, std::move(encoded));
    changed.notify_all();
  }
  /// Writer: the batch `sequence` once encoded; false after the last.
  bool receive(int64_t sequence, EncodedBatch &encoded) {
    std::unique_lock<std::mutex> lock(mutex);
    changed.wait(lock, [&] {
      return done.count(sequence) || (total >= 0 && sequence >= total);
    });
    auto it = done.find(sequence);
    if (it == done.end())
      return false;
    encoded = std::move(it->second);
    done.erase(it);
    --inFlight;
    changed.notify_all();
    return true;
  }
  void stop() {
    std::lock_guard<std::mutex> lock(mutex);
    stopped = true;
    changed.notify_all();
  }

private:
  std::mutex mutex;
  std::condition_variable changed;
  std::deque<Batch> work;
  std::map<int64_t, EncodedBatch> done;
  int64_t limit;
  int64_t inFlight = 0;
  int64_t total = -1; // batches the reader made, once it is done
  bool stopped = false;
};

/// The writer's side: documents appended in input order to the current
/// shard, shards committed and recorded in the state file.
class ShardSink {
public:
  ShardSink(const PrepareOptions &options, const std::vector<InputFile> &inputs,
            TokenType type, PrepareState &state, PrepareResult &result)
      : options(options), inputs(inputs), type(type), state(state),
        result(result) {}

  /// Takes one encoded batch in order.
  llvm::Error take(const EncodedBatch &batch) {
    size_t at = 0;
    for (const EncodedDocument &document : batch.documents) {
      if (document.empty) {
        ++emptySinceShard;
        ++result.emptyDocuments;
        continue;
      }
      llvm::ArrayRef<int32_t> tokens(batch.tokens.data() + at,
                                     static_cast<size_t>(document.tokens));
      at += document.tokens;
      if (!document.complete || !pending.empty()) {
        pending.insert(pending.end(), tokens.begin(), tokens.end());
        if (!document.complete)
          continue;
        tokens = pending;
      }
      llvm::Error error = append(tokens, document.after);
      pending.clear();
      if (error)
        return error;
    }
    return llvm::Error::success();
  }

  /// Commits the last, partial shard.
  llvm::Error finish() {
    if (writer)
      return commit({static_cast<int64_t>(inputs.size()), 0, 1});
    if (!state.shards.empty())
      state.shards.back().emptyDocuments += emptySinceShard;
    return llvm::Error::success();
  }

private:
  llvm::Error append(llvm::ArrayRef<int32_t> tokens, InputPosition after) {
    if (!writer) {
      auto created = TokenFileWriter::create(
          shardPath(options, static_cast<int64_t>(state.shards.size())),
          options.format, type);
      if (!created)
        return created.takeError();
      writer = std::move(*created);
    }
    if (llvm::Error error = writer->appendDocument(tokens))
      return error;
    ++result.documents;
    result.tokens += static_cast<int64_t>(tokens.size());
    if (writer->numTokens() >= options.shardTokens)
      return commit(after);
    return llvm::Error::success();
  }

  llvm::Error commit(InputPosition next) {
    if (next.input < static_cast<int64_t>(inputs.size()) &&
        next.offset >= inputs[next.input].size)
      next = {next.input + 1, 0, 1};
    if (llvm::Error error = writer->commit())
      return error;
    std::string path =
        shardPath(options, static_cast<int64_t>(state.shards.size()));
    ShardRecord record{llvm::sys::path::filename(path).str(),
                       writer->numTokens(), writer->numDocuments(),
                       emptySinceShard, next};
    result.shards.push_back(
        {path, record.tokens, record.documents, /*kept=*/false});
    state.shards.push_back(std::move(record));
    writer.reset();
    emptySinceShard = 0;
    return writeState(statePath(options), state);
  }

  const PrepareOptions &options;
  const std::vector<InputFile> &inputs;
  TokenType type;
  PrepareState &state;
  PrepareResult &result;
  std::unique_ptr<TokenFileWriter> writer;
  std::vector<int32_t> pending; // a Text document's pieces so far
  int64_t emptySinceShard = 0;
};
} // namespace

/// Encodes the inputs from `start` on with `threads` workers (one
/// tokenizer each: the BPE word cache is locked, so sharing one would
/// serialize them) and appends them to `sink` in order.
static llvm::Error runPipeline(const PrepareOptions &options,
                               const std::vector<InputFile> &inputs,
                               InputPosition start, int threads,
                               ShardSink &sink, ProgressMeter &progress,
                               PrepareResult &result) {
  std::vector<std::unique_ptr<Tokenizer>> tokenizers;
  for (int i = 0; i < threads; ++i) {
    auto tokenizer = loadTokenizer(options.tokenizerSpec);
    if (!tokenizer)
      return tokenizer.takeError();
    tokenizers.push_back(std::move(*tokenizer));
  }
  BatchQueue queue(4 * static_cast<int64_t>(threads) + 2);
  std::thread reader([&] {
    BatchCutter cutter(inputs, start, kBatchBytes);
    Batch batch;
    int64_t count = 0;
    while (cutter.next(batch)) {
      if (!queue.push(std::move(batch)))
        return;
      ++count;
    }
    queue.finishReading(count);
  });
  std::vector<std::thread> workers;
  for (int i = 0; i < threads; ++i)
    workers.emplace_back([&, i] {
      Batch batch;
      while (queue.take(batch)) {
        EncodedBatch encoded;
        encodeBatch(batch, inputs[batch.input], *tokenizers[i], options.field,
                    encoded);
        batch = Batch(); // unmaps a finished input's last batch
        queue.deliver(std::move(encoded));
      }
    });
  llvm::Error error = llvm::Error::success();
  EncodedBatch encoded;
  for (int64_t sequence = 0; queue.receive(sequence, encoded); ++sequence) {
    if (encoded.error) {
      error = llvm::createStringError(*encoded.error);
      break;
    }
    if ((error = sink.take(encoded)))
      break;
    result.bytesRead += encoded.bytes;
    progress.update(result.documents, result.tokens, result.bytesRead);
  }
  queue.stop();
  reader.join();
  for (std::thread &worker : workers)
    worker.join();
  return error;
}

//===----------------------------------------------------------------------===//
// prepareData
//===----------------------------------------------------------------------===//

static llvm::Error checkOptions(const PrepareOptions &options) {
  if (options.outputDir.empty())
    return llvm::createStringError("no output directory given (-o DIR)");
  if (options.shardTokens < 1)
    return llvm::createStringError(llvm::formatv(
        "--shard-tokens {0}: expected a positive number of tokens",
        options.shardTokens));
  if (options.prefix.empty() ||
      options.prefix.find_first_of("/\\") != std::string::npos)
    return llvm::createStringError("--prefix '" + options.prefix +
                                   "': expected a file name prefix without "
                                   "'/'");
  if (options.format != TokenFormat::Llmc &&
      options.format != TokenFormat::LlmcShard)
    return llvm::createStringError(
        "the output format must be llmc or llmc-shard");
  if (options.threads < 0)
    return llvm::createStringError("--threads must be 0 (every core) or more");
  return llvm::Error::success();
}

/// uint16 when every id fits, else uint32 (llmc files only).
static llvm::Expected<TokenType> chooseTokenType(const PrepareOptions &options,
                                                 const Tokenizer &tokenizer) {
  if (tokenizer.vocabSize() <= 65536)
    return TokenType::U16;
  if (options.format == TokenFormat::LlmcShard)
    return llvm::createStringError(llvm::formatv(
        "--format llmc-shard stores token ids as uint16, but the tokenizer "
        "({0}) has {1} tokens (ids up to {2}); use --format llmc, which "
        "stores them as uint32",
        tokenizer.describe(), tokenizer.vocabSize(),
        tokenizer.vocabSize() - 1));
  return TokenType::U32;
}

llvm::Expected<PrepareResult>
llmc::data::prepareData(const PrepareOptions &options,
                        llvm::raw_ostream &progressStream) {
  auto started = std::chrono::steady_clock::now();
  if (llvm::Error error = checkOptions(options))
    return error;
  auto inputs = checkInputs(options.inputs, options.inputKind);
  if (!inputs)
    return inputs.takeError();
  auto tokenizer = loadTokenizer(options.tokenizerSpec);
  if (!tokenizer)
    return tokenizer.takeError();
  PrepareResult result;
  auto type = chooseTokenType(options, **tokenizer);
  if (!type)
    return type.takeError();
  result.tokenType = *type;
  auto state = prepareOutputDirectory(
      options, runIdentity(options, **tokenizer, *inputs));
  if (!state)
    return state.takeError();
  for (size_t i = 0; i < state->shards.size(); ++i) {
    const ShardRecord &shard = state->shards[i];
    result.shards.push_back({shardPath(options, static_cast<int64_t>(i)),
                             shard.tokens, shard.documents, /*kept=*/true});
    result.tokens += shard.tokens;
    result.documents += shard.documents;
    result.emptyDocuments += shard.emptyDocuments;
  }
  unsigned cores = std::max(1u, std::thread::hardware_concurrency());
  result.threads = options.threads ? options.threads : static_cast<int>(cores);
  if (state->complete) {
    result.alreadyComplete = true;
    return result;
  }
  // Written before the first batch: an output directory that cannot be
  // written fails here, before any work.
  if (llvm::Error error = writeState(statePath(options), *state))
    return error;
  InputPosition start;
  if (!state->shards.empty())
    start = state->shards.back().next;
  int64_t totalBytes = 0;
  for (size_t i = 0; i < inputs->size(); ++i)
    if (static_cast<int64_t>(i) >= start.input)
      totalBytes += (*inputs)[i].size;
  totalBytes -= start.offset;
  ProgressMeter progress(options, progressStream, totalBytes);
  ShardSink sink(options, *inputs, *type, *state, result);
  llvm::Error error = runPipeline(options, *inputs, start, result.threads,
                                  sink, progress, result);
  progress.finish();
  if (!error)
    error = sink.finish();
  if (error) {
    if (state->shards.empty())
      return error;
    return llvm::createStringError(
        llvm::toString(std::move(error)) +
        llvm::formatv("\nnote: the {0} shard(s) finished before this error "
                      "are whole and recorded in {1}",
                      state->shards.size(), statePath(options))
            .str());
  }
  if (result.documents == 0)
    return llvm::createStringError(
        "the inputs hold no document (every file, line or field is empty): "
        "nothing to write");
  state->complete = true;
  if (llvm::Error error = writeState(statePath(options), *state))
    return error;
  result.seconds = std::chrono::duration<double>(
                       std::chrono::steady_clock::now() - started)
                       .count();
  return result;
}

void llmc::data::printPrepareSummary(const PrepareResult &result,
                                     llvm::raw_ostream &os) {
  for (const PreparedShard &shard : result.shards)
    os << llvm::formatv("{0}: {1} tokens, {2} documents{3}\n", shard.path,
                        shard.tokens, shard.documents,
                        shard.kept ? " (kept from an earlier run)" : "");
  os << llvm::formatv("total: {0} tokens, {1} documents in {2} file(s) of "
                      "{3} tokens",
                      result.tokens, result.documents, result.shards.size(),
                      typeName(result.tokenType));
  if (result.emptyDocuments)
    os << llvm::formatv("; {0} empty document(s) skipped",
                        result.emptyDocuments);
  if (result.alreadyComplete)
    os << "; already complete, nothing to do\n";
  else
    os << llvm::formatv("; {0:f1} MB of input in {1:f2} s ({2:f1} MB/s, {3} "
                        "threads)\n",
                        result.bytesRead / 1e6, result.seconds,
                        result.seconds > 0
                            ? result.bytesRead / 1e6 / result.seconds
                            : 0.0,
                        result.threads);
}

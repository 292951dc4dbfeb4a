// `llmc data prepare`'s engine: text, one-document-a-line text and JSONL
// turned into token files (llmc's format or llm.c shards) on every core,
// shard by shard, atomically, resumable after an interruption.
//
// Usage (library LlmcDataPrepare):
//
//   llmc::data::PrepareOptions options;
//   options.inputs = {"fineweb.jsonl"};    // --input auto: .jsonl/.json are JSONL
//   options.outputDir = "data/fineweb";
//   options.tokenizerSpec = "bpe/";        // what data.tokenizer takes
//   options.shardTokens = 100'000'000;
//   llvm::Expected<llmc::data::PrepareResult> result =
//       llmc::data::prepareData(options, llvm::errs());  // progress there
//   // result->shards: every file of the output with its tokens and documents.
//
// The pipeline: one reader thread cuts the inputs into batches of whole
// documents (a large text document into pieces at word boundaries), worker
// threads encode batches, and the calling thread appends the documents to
// shards in input order. Each document is preceded by the tokenizer's
// end-of-text token when it has one (the convention `llmc run` follows when
// it reads text). A shard closes at the first document boundary at or after
// `shardTokens` tokens, so the output is a function of the inputs and the
// options alone, never of the thread count or the batch cuts.
//
// The state file DIR/PREFIX.prepare.json (written atomically after every
// shard) records the options, the tokenizer, the inputs (path, size, mtime)
// and each finished shard with the input position after it: a rerun with the
// same options and unchanged inputs keeps those shards as they are and goes
// on after the last one; anything else is refused unless `overwrite`.
#ifndef LLMC_TRAINING_DATA_PREPARE_H
#define LLMC_TRAINING_DATA_PREPARE_H

#include "training/Data/TokenFile.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmc::data {

/// How an input file holds its documents.
enum class InputKind {
  /// By extension: .jsonl and .json are Jsonl, anything else Text.
  Auto,
  /// The whole file is one document.
  Text,
  /// Each line is one document (a trailing '\r' is dropped).
  Lines,
  /// Each line is a JSON object; its `field` (a string) is the document.
  Jsonl,
};
/// "auto", "text", "lines", "jsonl".
llvm::StringRef inputKindName(InputKind kind);
std::optional<InputKind> parseInputKind(llvm::StringRef name);
/// The kind `path` is read as under `kind` (Auto resolved by extension).
InputKind resolveInputKind(InputKind kind, llvm::StringRef path);

/// How progress is shown while preparing.
enum class ProgressStyle {
  /// One line redrawn in place (a terminal).
  Redraw,
  /// A line every `progressIntervalSeconds` (a log file, a pipe).
  Lines,
  /// Nothing until the end.
  Quiet,
};

struct PrepareOptions {
  /// Input files, read in this order.
  std::vector<std::string> inputs;
  /// The output directory (created when missing).
  std::string outputDir;
  /// "byte" or a BPE directory (frontend/Tokenizer.h loadTokenizer).
  std::string tokenizerSpec = "byte";
  InputKind inputKind = InputKind::Auto;
  /// JSONL: the field that holds each document's text.
  std::string field = "text";
  /// TokenFormat::Llmc (uint16 ids when the vocabulary fits, else uint32)
  /// or TokenFormat::LlmcShard (llm.c's uint16 shards).
  TokenFormat format = TokenFormat::Llmc;
  /// A shard closes at the first document boundary at or after this many
  /// tokens.
  int64_t shardTokens = 100'000'000;
  /// Output files are DIR/PREFIX_000000.tok (.bin for llm.c shards).
  std::string prefix = "data";
  /// Worker threads that encode; 0: one per core.
  int threads = 0;
  /// Start over even where a state file records another run.
  bool overwrite = false;
  ProgressStyle progress = ProgressStyle::Lines;
  double progressIntervalSeconds = 5.0;
};

/// One output file.
struct PreparedShard {
  std::string path;
  int64_t tokens = 0;
  int64_t documents = 0;
  /// Whether an earlier, interrupted run wrote it (kept as it was).
  bool kept = false;
};

struct PrepareResult {
  std::vector<PreparedShard> shards;
  TokenType tokenType = TokenType::U16;
  int64_t tokens = 0;
  int64_t documents = 0;
  /// Empty documents skipped (blank lines, empty fields, empty files).
  int64_t emptyDocuments = 0;
  /// Input bytes this run read (not those of kept shards) and its seconds.
  int64_t bytesRead = 0;
  double seconds = 0;
  int threads = 0;
  /// The state file said the output was complete: nothing was done.
  bool alreadyComplete = false;
};

/// Prepares `options.inputs` into `options.outputDir` (see the file
/// comment), writing progress to `progressStream`. Errors name the file
/// (and line) and what is wrong: a missing or binary input, a malformed
/// JSONL line or a field that is missing or not a string, an output
/// directory that cannot be written, a vocabulary too large for llm.c
/// shards, a state file from other options or inputs. An error met after
/// some shards were finished leaves them, whole, with the state file.
llvm::Expected<PrepareResult> prepareData(const PrepareOptions &options,
                                          llvm::raw_ostream &progressStream);

/// The path of shard `index`: DIR/PREFIX_000123.tok (or .bin).
std::string shardPath(const PrepareOptions &options, int64_t index);
/// DIR/PREFIX.prepare.json.
std::string statePath(const PrepareOptions &options);

/// Writes the end-of-run lines: one per output file (tokens, documents)
/// and a total.
void printPrepareSummary(const PrepareResult &result, llvm::raw_ostream &os);

} // namespace llmc::data

#endif // LLMC_TRAINING_DATA_PREPARE_H

// `llmc tokenizer`: learn a BPE vocabulary, encode text into llm.c shards.
//
//   llmc tokenizer train --vocab-size N -o DIR FILES...
//   llmc tokenizer encode --tokenizer DIR|byte FILES... -o shard.bin
//                         [--val-fraction F]
//
// It parses its own arguments (llmc's other subcommands use cl::SubCommand,
// whose options are global; these are few and positional-heavy).
#include "frontend/Tokenizer.h"
#include "training/Data/TokenFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <memory>
#include <optional>
#include <string>
#include <vector>

using namespace llmc;

int runTokenizerCommand(int argc, char **argv);

static const char *const kUsage =
    "usage: llmc tokenizer train --vocab-size N -o DIR FILES...\n"
    "         Learn a byte-level BPE vocabulary of N tokens (256 bytes, the\n"
    "         merges, <|endoftext|>) from text FILES; write DIR/vocab.json and\n"
    "         DIR/merges.txt (GPT-2's format).\n"
    "       llmc tokenizer encode --tokenizer DIR|byte FILES... -o OUT.bin\n"
    "                             [--val-fraction F]\n"
    "         Encode text FILES (each one document, preceded by <|endoftext|>\n"
    "         when the tokenizer has it) into an llm.c token shard. With\n"
    "         --val-fraction, the last fraction F of the tokens goes to\n"
    "         OUT_val.bin instead.\n";

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "llmc tokenizer") << message << "\n";
  return 1;
}

static int fail(llvm::Error error) {
  return fail(llvm::toString(std::move(error)));
}

namespace {
/// The options of both actions; each action checks the ones it needs.
struct Arguments {
  std::string action;
  std::vector<std::string> files;
  std::string output;
  std::string tokenizer;
  std::optional<std::string> vocabSize;
  std::optional<std::string> valFraction;
};
} // namespace

/// Reads "--flag value" and "--flag=value" options and positional files.
static llvm::Expected<Arguments> parseArguments(int argc, char **argv) {
  Arguments args;
  if (argc < 2)
    return llvm::createStringError("expected an action: train or encode");
  args.action = argv[1];
  for (int i = 2; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--" ) {
      for (++i; i < argc; ++i)
        args.files.push_back(argv[i]);
      break;
    }
    if (!arg.starts_with("-") || arg == "-") {
      args.files.push_back(arg.str());
      continue;
    }
    auto [flag, inlineValue] = arg.split('=');
    std::string *stringTarget = nullptr;
    std::optional<std::string> *optionalTarget = nullptr;
    if (flag == "-o" || flag == "--output")
      stringTarget = &args.output;
    else if (flag == "--tokenizer")
      stringTarget = &args.tokenizer;
    else if (flag == "--vocab-size")
      optionalTarget = &args.vocabSize;
    else if (flag == "--val-fraction")
      optionalTarget = &args.valFraction;
    else
      return llvm::createStringError("unknown option '" + arg + "'");
    std::string value;
    if (arg.contains('=')) {
      value = inlineValue.str();
    } else {
      if (i + 1 >= argc)
        return llvm::createStringError("option '" + flag + "' needs a value");
      value = argv[++i];
    }
    if (stringTarget)
      *stringTarget = value;
    else
      *optionalTarget = value;
  }
  return args;
}

/// The contents of `paths`, read before anything is written.
static llvm::Expected<std::vector<std::unique_ptr<llvm::MemoryBuffer>>>
readFiles(llvm::ArrayRef<std::string> paths) {
  std::vector<std::unique_ptr<llvm::MemoryBuffer>> buffers;
  for (const std::string &path : paths) {
    auto buffer = llvm::MemoryBuffer::getFile(path, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    if (!buffer)
      return llvm::createStringError(buffer.getError(),
                                     "cannot read '" + path + "': " +
                                         buffer.getError().message());
    buffers.push_back(std::move(*buffer));
  }
  return buffers;
}

static double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

static int runTrain(const Arguments &args) {
  int64_t vocabSize = 0;
  if (!args.vocabSize)
    return fail("train: --vocab-size N is required");
  if (llvm::StringRef(*args.vocabSize).getAsInteger(10, vocabSize) ||
      vocabSize < 257 || vocabSize > 65536)
    return fail("train: --vocab-size: '" + *args.vocabSize +
                "' is not an integer in [257, 65536] (256 byte tokens and "
                "<|endoftext|> at least; llm.c shards hold uint16 ids)");
  if (args.output.empty())
    return fail("train: -o DIR is required");
  if (args.files.empty())
    return fail("train: no text files given");
  auto buffers = readFiles(args.files);
  if (!buffers)
    return fail(buffers.takeError());

  // Files are separate documents: <|endoftext|> keeps words from spanning two.
  std::string text;
  for (const auto &buffer : *buffers) {
    if (!text.empty())
      text += data::kEndOfText;
    text += buffer->getBuffer();
  }
  llvm::outs() << llvm::formatv("learning {0} tokens from {1} bytes in {2} "
                                "file(s)\n",
                                vocabSize, text.size(), args.files.size());
  llvm::outs().flush();
  auto start = std::chrono::steady_clock::now();
  int64_t lastReport = 0;
  auto learned = data::trainBpe(
      text, static_cast<int32_t>(vocabSize), [&](int64_t done, int64_t total) {
        if (done * 10 / std::max<int64_t>(total, 1) > lastReport) {
          lastReport = done * 10 / std::max<int64_t>(total, 1);
          llvm::outs() << llvm::formatv("  {0}/{1} merges ({2:f1} s)\n", done,
                                        total, secondsSince(start));
          llvm::outs().flush();
        }
      });
  if (!learned)
    return fail(learned.takeError());
  double trainSeconds = secondsSince(start);
  if (static_cast<int64_t>(learned->tokens.size()) < vocabSize)
    llvm::outs() << llvm::formatv("note: the text has no more pairs that occur "
                                  "twice; the vocabulary has {0} tokens\n",
                                  learned->tokens.size());
  if (llvm::Error error = data::writeBpeFiles(*learned, args.output))
    return fail(std::move(error));

  auto tokenizer = data::BpeTokenizer::fromVocabulary(*learned);
  if (!tokenizer)
    return fail(tokenizer.takeError());
  start = std::chrono::steady_clock::now();
  size_t tokens = 0;
  for (const auto &buffer : *buffers)
    tokens += (*tokenizer)->encode(buffer->getBuffer()).size();
  double encodeSeconds = secondsSince(start);
  llvm::SmallString<128> vocabPath(args.output), mergesPath(args.output);
  llvm::sys::path::append(vocabPath, "vocab.json");
  llvm::sys::path::append(mergesPath, "merges.txt");
  llvm::outs() << llvm::formatv(
      "wrote {0} and {1}: {2} tokens, {3} merges, learned in {4:f2} s\n",
      vocabPath, mergesPath, learned->tokens.size(), learned->merges.size(),
      trainSeconds);
  llvm::outs() << llvm::formatv(
      "compression: {0} bytes -> {1} tokens = {2:f3} bytes/token (encoded in "
      "{3:f2} s)\n",
      text.size() - (args.files.size() - 1) * data::kEndOfText.size(), tokens,
      tokens ? double(text.size() -
                      (args.files.size() - 1) * data::kEndOfText.size()) /
                   tokens
             : 0.0,
      encodeSeconds);
  return 0;
}

/// OUT.bin -> OUT_val.bin.
static std::string valShardPath(llvm::StringRef output) {
  llvm::SmallString<256> path(output);
  std::string extension = llvm::sys::path::extension(output).str();
  llvm::sys::path::replace_extension(path, "");
  return (path + "_val" + extension).str();
}

static int runEncode(const Arguments &args) {
  if (args.tokenizer.empty())
    return fail("encode: --tokenizer DIR|byte is required");
  if (args.output.empty())
    return fail("encode: -o OUT.bin is required");
  if (args.files.empty())
    return fail("encode: no text files given");
  double valFraction = 0;
  if (args.valFraction &&
      (!llvm::to_float(*args.valFraction, valFraction) ||
       !(valFraction >= 0 && valFraction < 1)))
    return fail("encode: --val-fraction: '" + *args.valFraction +
                "' is not a number in [0, 1)");
  auto tokenizer = data::loadTokenizer(args.tokenizer);
  if (!tokenizer)
    return fail(tokenizer.takeError());
  if ((*tokenizer)->vocabSize() > 65536)
    return fail(llvm::formatv("encode: the tokenizer has {0} tokens; llm.c "
                              "shards hold ids below 65536",
                              (*tokenizer)->vocabSize())
                    .str());
  auto buffers = readFiles(args.files);
  if (!buffers)
    return fail(buffers.takeError());
  std::vector<llvm::StringRef> texts;
  size_t bytes = 0;
  for (const auto &buffer : *buffers) {
    texts.push_back(buffer->getBuffer());
    bytes += buffer->getBufferSize();
  }
  auto start = std::chrono::steady_clock::now();
  std::vector<int32_t> tokens = data::encodeDocuments(texts, **tokenizer);
  double seconds = secondsSince(start);
  llvm::outs() << llvm::formatv(
      "encoded {0} bytes into {1} tokens with {2}: {3:f3} bytes/token ({4:f2} "
      "s)\n",
      bytes, tokens.size(), (*tokenizer)->describe(),
      tokens.empty() ? 0.0 : double(bytes) / tokens.size(), seconds);

  // The last fraction of the tokens (rounded down) validates, as the
  // loader's data.val_fraction holds out.
  size_t valSize = std::min(
      tokens.size(), size_t(std::floor(double(tokens.size()) * valFraction)));
  llvm::ArrayRef<int32_t> all(tokens);
  llvm::ArrayRef<int32_t> train = all.drop_back(valSize),
                          val = all.take_back(valSize);
  if (args.valFraction) {
    std::string valPath = valShardPath(args.output);
    if (llvm::Error error = data::writeShard(valPath, val))
      return fail(std::move(error));
    llvm::outs() << llvm::formatv("wrote {0} tokens to {1}\n", val.size(),
                                  valPath);
  }
  if (llvm::Error error = data::writeShard(args.output, train))
    return fail(std::move(error));
  llvm::outs() << llvm::formatv("wrote {0} tokens to {1}\n", train.size(),
                                args.output);
  return 0;
}

int runTokenizerCommand(int argc, char **argv) {
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--help" || arg == "-h" || arg == "-help") {
      llvm::outs() << kUsage;
      return 0;
    }
  }
  auto args = parseArguments(argc, argv);
  if (!args) {
    int code = fail(args.takeError());
    llvm::errs() << kUsage;
    return code;
  }
  if (args->action == "train")
    return runTrain(*args);
  if (args->action == "encode")
    return runEncode(*args);
  fail("unknown action '" + args->action + "'; expected train or encode");
  llvm::errs() << kUsage;
  return 1;
}

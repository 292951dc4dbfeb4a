// `llmc data`: the dispatch of its actions, and `llmc data info`, which
// prints what a token file holds (format, dtype, tokens, documents, id
// range, checksum) and fails on a bad one.
#include "tools/llmc/DataCommand.h"

#include "frontend/Tokenizer.h"
#include "training/Data/TokenFile.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <memory>
#include <string>
#include <vector>

using namespace llmc;

namespace {
/// One action of `llmc data`.
struct DataAction {
  llvm::StringRef name;
  int (*run)(int argc, char **argv);
  llvm::StringRef usage;
};
} // namespace

// The actions, in the order `llmc data --help` lists them. `prepare`
// (DataPrepareCommand.cpp) adds its line here.
static const DataAction kActions[] = {
    {"info", runDataInfo,
     "llmc data info FILES... [--vocab N] [--tokenizer SPEC]\n"
     "    What each token file holds: format, dtype, tokens, documents,\n"
     "    min/max id and the XXH3-64 of its token bytes (for llmc files,\n"
     "    whether it matches the header's). Exits non-zero if any file is\n"
     "    bad (the error names it).\n"},
    {"prepare", runDataPrepare,
     "llmc data prepare INPUT... -o DIR [--tokenizer SPEC] [--input KIND]\n"
     "    Text, one-document-a-line text and JSONL into token files, on\n"
     "    every core, resumable (llmc data prepare --help).\n"},
};

static void printUsage(llvm::raw_ostream &os) {
  os << "usage: llmc data ACTION ...\n\n";
  for (const DataAction &action : kActions)
    os << "  " << action.usage;
  os << "\nToken files: llm.c shards (*.bin), llmc files (*.tok), Megatron "
        "datasets\n(PREFIX.bin + PREFIX.idx) and text; see docs/data.md.\n";
}

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "llmc data") << message << "\n";
  return 1;
}

int llmc::runDataCommand(int argc, char **argv) {
  if (argc < 2) {
    printUsage(llvm::errs());
    return 1;
  }
  llvm::StringRef name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    printUsage(llvm::outs());
    return 0;
  }
  for (const DataAction &action : kActions)
    if (action.name == name)
      return action.run(argc - 1, argv + 1);
  std::vector<llvm::StringRef> names;
  for (const DataAction &action : kActions)
    names.push_back(action.name);
  return fail("unknown action '" + name + "'; expected one of: " +
              llvm::join(names, ", ") + " (llmc data --help)");
}

//===----------------------------------------------------------------------===//
// llmc data info
//===----------------------------------------------------------------------===//

namespace {
struct InfoArguments {
  std::vector<std::string> files;
  int64_t vocab = 0;
  std::string tokenizer = "byte";
  bool help = false;
};
} // namespace

static llvm::Expected<InfoArguments> parseInfoArguments(int argc,
                                                        char **argv) {
  InfoArguments args;
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i)
        args.files.push_back(argv[i]);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      args.help = true;
      continue;
    }
    if (!arg.starts_with("-") || arg == "-") {
      args.files.push_back(arg.str());
      continue;
    }
    auto [flag, inlineValue] = arg.split('=');
    if (flag != "--vocab" && flag != "--tokenizer")
      return llvm::createStringError("unknown option '" + arg +
                                     "' (llmc data info --help)");
    std::string value = inlineValue.str();
    if (!arg.contains('=')) {
      if (i + 1 >= argc)
        return llvm::createStringError("option '" + flag + "' needs a value");
      value = argv[++i];
    }
    if (flag == "--tokenizer") {
      args.tokenizer = value;
    } else if (llvm::StringRef(value).getAsInteger(10, args.vocab) ||
               args.vocab <= 0) {
      return llvm::createStringError("--vocab: '" + value +
                                     "' is not a positive integer");
    }
  }
  if (!args.help && args.files.empty())
    return llvm::createStringError("no files given (llmc data info --help)");
  return args;
}

/// Prints one file's facts; returns false when it is bad (a checksum that
/// does not match its header, ids outside the vocabulary).
static bool printInfo(const data::TokenFileInfo &info, int64_t vocab,
                      llvm::raw_ostream &os) {
  os << info.path << "\n";
  os << "  format:    " << data::formatName(info.format) << "\n";
  os << "  dtype:     " << data::typeName(info.type) << "\n";
  os << "  tokens:    " << info.tokens << "\n";
  if (info.documents)
    os << "  documents: " << *info.documents << "\n";
  else
    os << "  documents: - (the format keeps no document index)\n";
  if (info.tokens > 0)
    os << "  ids:       " << info.minId << " .. " << info.maxId << "\n";
  else
    os << "  ids:       - (no tokens)\n";
  os << "  checksum:  xxh3-64 " << llvm::format_hex_no_prefix(info.checksum, 16);
  if (info.checksumMatches)
    os << (*info.checksumMatches ? " (matches the header)"
                                 : " (does NOT match the header)");
  os << "\n";
  bool good = !info.checksumMatches || *info.checksumMatches;
  if (!good)
    llvm::WithColor::error(llvm::errs(), "llmc data")
        << info.path << ": the checksum of its tokens does not match its "
        << "header: the file is damaged\n";
  if (vocab > 0) {
    if (info.idsOutOfRange == 0) {
      os << "  vocab:     all ids below " << vocab << "\n";
    } else {
      os << "  vocab:     " << info.idsOutOfRange << " ids outside [0, "
         << vocab << "), the first at token " << *info.firstOutOfRange << "\n";
      llvm::WithColor::error(llvm::errs(), "llmc data")
          << info.path << ": " << info.idsOutOfRange
          << " token ids are outside the vocabulary of " << vocab
          << " (the first at token " << *info.firstOutOfRange << ")\n";
      good = false;
    }
  }
  return good;
}

int llmc::runDataInfo(int argc, char **argv) {
  llvm::Expected<InfoArguments> args = parseInfoArguments(argc, argv);
  if (!args)
    return fail("info: " + llvm::toString(args.takeError()));
  if (args->help) {
    llvm::outs() << "usage: " << kActions[0].usage
                 << "\n  --vocab N         also count the ids outside [0, N) "
                    "(a model's vocab_size)\n"
                    "  --tokenizer SPEC  encodes text files: byte (the "
                    "default) or a BPE directory\n";
    return 0;
  }
  // Text files are encoded with it (byte by default: loading it is free).
  llvm::Expected<std::unique_ptr<data::Tokenizer>> tokenizer =
      data::loadTokenizer(args->tokenizer);
  if (!tokenizer)
    return fail("info: " + llvm::toString(tokenizer.takeError()));
  bool allGood = true;
  int64_t totalTokens = 0;
  for (const std::string &path : args->files) {
    llvm::Expected<data::TokenFileInfo> info =
        data::scanTokenFile(path, tokenizer->get(), args->vocab);
    if (!info) {
      fail(llvm::toString(info.takeError()));
      allGood = false;
      continue;
    }
    totalTokens += info->tokens;
    allGood &= printInfo(*info, args->vocab, llvm::outs());
  }
  if (args->files.size() > 1)
    llvm::outs() << "total: " << args->files.size() << " files, "
                 << totalTokens << " tokens\n";
  return allGood ? 0 : 1;
}

// `llmc data prepare`: text, lines and JSONL into token files (the
// arguments; the engine is training/Data/Prepare.h).
#include "tools/llmc/DataCommand.h"

#include "training/Data/Prepare.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

using namespace llmc;

static const char *const kPrepareUsage =
    "usage: llmc data prepare INPUT... -o DIR [options]\n"
    "\n"
    "Turns text into token files that `llmc run` trains on (data.train:\n"
    "DIR/*.tok), on every core. Each document is preceded by the\n"
    "tokenizer's end-of-text token when it has one; empty documents are\n"
    "skipped. Shards are written atomically; a state file DIR/PREFIX.prepare.json\n"
    "lets an interrupted run continue where it stopped when rerun with the\n"
    "same options.\n"
    "\n"
    "options:\n"
    "  -o, --output DIR       the output directory (created if missing)\n"
    "  --tokenizer SPEC       byte (default) or a BPE directory holding\n"
    "                         vocab.json and merges.txt (data.tokenizer's values)\n"
    "  --input KIND           how inputs hold documents: text (a file is one\n"
    "                         document), lines (a line is one document), jsonl\n"
    "                         (a line is a JSON object; its --field is one\n"
    "                         document) or auto (default: .jsonl and .json are\n"
    "                         jsonl, anything else text)\n"
    "  --field NAME           the JSONL field holding the text (default text)\n"
    "  --format FORMAT        llmc (default: DIR/PREFIX_000000.tok, uint16 ids\n"
    "                         when the vocabulary fits, else uint32, with a\n"
    "                         document index) or llmc-shard (llm.c's uint16\n"
    "                         shards, DIR/PREFIX_000000.bin)\n"
    "  --shard-tokens N       a shard closes at the first document boundary at\n"
    "                         or after N tokens (default 100M; k, M, G suffixes)\n"
    "  --prefix NAME          output file names' prefix (default data)\n"
    "  --threads N            encoding threads (default: one per core); the\n"
    "                         output is the same for every N\n"
    "  --overwrite            start over, replacing what a run with other\n"
    "                         options or inputs left in DIR\n"
    "  --quiet                no progress display (the summary is printed)\n"
    "  -h, --help             this text\n"
    "\n"
    "Progress (documents, tokens, tokens/s, MB/s, ETA) goes to stderr,\n"
    "redrawn in place on a terminal, a line every 5 seconds otherwise. At the\n"
    "end one line per output file (tokens, documents) and a total go to\n"
    "stdout.\n";

static int fail(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "llmc data prepare") << message << "\n";
  return 1;
}

/// "100000", "100k", "100M", "2G" (powers of ten).
static bool parseCount(llvm::StringRef text, int64_t &value) {
  int64_t scale = 1;
  if (text.consume_back("k") || text.consume_back("K"))
    scale = 1000;
  else if (text.consume_back("M"))
    scale = 1000000;
  else if (text.consume_back("G"))
    scale = 1000000000;
  int64_t number = 0;
  if (text.getAsInteger(10, number) || number < 0 ||
      number > INT64_MAX / scale)
    return false;
  value = number * scale;
  return true;
}

namespace {
/// The options that take a value, and where each goes.
struct ParsedArguments {
  data::PrepareOptions options;
  bool quiet = false;
  bool help = false;
};
} // namespace

/// Sets the option `flag` from `value`; an error message if it is wrong.
static std::string applyOption(llvm::StringRef flag, llvm::StringRef value,
                               ParsedArguments &args) {
  data::PrepareOptions &o = args.options;
  if (flag == "-o" || flag == "--output") {
    o.outputDir = value.str();
  } else if (flag == "--tokenizer") {
    o.tokenizerSpec = value.str();
  } else if (flag == "--input") {
    std::optional<data::InputKind> kind = data::parseInputKind(value);
    if (!kind)
      return "--input '" + value.str() +
             "': expected text, lines, jsonl or auto";
    o.inputKind = *kind;
  } else if (flag == "--field") {
    if (value.empty())
      return "--field needs a name";
    o.field = value.str();
  } else if (flag == "--format") {
    if (value == "llmc")
      o.format = data::TokenFormat::Llmc;
    else if (value == "llmc-shard")
      o.format = data::TokenFormat::LlmcShard;
    else
      return "--format '" + value.str() + "': expected llmc or llmc-shard";
  } else if (flag == "--shard-tokens") {
    if (!parseCount(value, o.shardTokens) || o.shardTokens < 1)
      return "--shard-tokens '" + value.str() +
             "': expected a positive count of tokens (k, M, G suffixes)";
  } else if (flag == "--prefix") {
    o.prefix = value.str();
  } else if (flag == "--threads") {
    int64_t threads = 0;
    if (!parseCount(value, threads) || threads > 1024)
      return "--threads '" + value.str() +
             "': expected a count (0: one per core)";
    o.threads = static_cast<int>(threads);
  } else {
    return "unknown option '" + flag.str() + "' (llmc data prepare --help)";
  }
  return "";
}

static std::string parseArguments(int argc, char **argv,
                                  ParsedArguments &args) {
  for (int i = 1; i < argc; ++i) {
    llvm::StringRef arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i)
        args.options.inputs.push_back(argv[i]);
      break;
    }
    if (!arg.starts_with("-") || arg == "-") {
      args.options.inputs.push_back(arg.str());
      continue;
    }
    if (arg == "-h" || arg == "--help" || arg == "-help") {
      args.help = true;
      continue;
    }
    if (arg == "--overwrite") {
      args.options.overwrite = true;
      continue;
    }
    if (arg == "--quiet" || arg == "-q") {
      args.quiet = true;
      continue;
    }
    auto [flag, inlineValue] = arg.split('=');
    static const char *const kValueFlags[] = {
        "-o",      "--output", "--tokenizer",    "--input",  "--field",
        "--format", "--prefix", "--shard-tokens", "--threads"};
    if (!llvm::is_contained(kValueFlags, flag))
      return "unknown option '" + flag.str() + "' (llmc data prepare --help)";
    std::string value;
    if (arg.contains('=')) {
      value = inlineValue.str();
    } else {
      if (i + 1 >= argc)
        return "option '" + flag.str() + "' needs a value";
      value = argv[++i];
    }
    std::string error = applyOption(flag, value, args);
    if (!error.empty())
      return error;
  }
  return "";
}

int llmc::runDataPrepare(int argc, char **argv) {
  ParsedArguments args;
  std::string error = parseArguments(argc, argv, args);
  if (args.help) {
    llvm::outs() << kPrepareUsage;
    return 0;
  }
  if (!error.empty())
    return fail(error);
  if (args.options.inputs.empty())
    return fail("no input files given (llmc data prepare --help)");
  if (args.options.outputDir.empty())
    return fail("no output directory given: -o DIR");
  args.options.progress =
      args.quiet ? data::ProgressStyle::Quiet
      : llvm::sys::Process::StandardErrIsDisplayed()
          ? data::ProgressStyle::Redraw
          : data::ProgressStyle::Lines;
  llvm::Expected<data::PrepareResult> result =
      data::prepareData(args.options, llvm::errs());
  if (!result)
    return fail(llvm::toString(result.takeError()));
  data::printPrepareSummary(*result, llvm::outs());
  return 0;
}

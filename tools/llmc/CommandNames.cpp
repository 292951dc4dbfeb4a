// The names of llmc's commands: a near miss or a synonym of one suggests it,
// and `llmc help config` prints the config keys of llmc run and llmc plan.
#include "tools/llmc/CommandNames.h"

#include "frontend/ConfigYaml.h"
#include "frontend/TrainConfig.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/WithColor.h"

#include <utility>
#include <vector>

namespace cl = llvm::cl;
using mlir::llmc::closestName;
using mlir::llmc::printConfigKeyReference;
using mlir::llmc::printTrainingConfigHelp;

namespace llmc {

static void reportError(const llvm::Twine &message) {
  llvm::WithColor::error(llvm::errs(), "llmc") << message << "\n";
}

bool checkCommandName(llvm::StringRef word) {
  if (word.empty() || word.starts_with("-") || word.starts_with("@"))
    return true;
  // `help`, `run`, `tokenizer` and `data` are dispatched before cl
  // parses; the rest are cl's subcommands (sorted: the suggestion must not
  // depend on the order of a pointer set).
  std::vector<llvm::StringRef> commands = {"help", "run", "tokenizer",
                                           "data"};
  for (cl::SubCommand *sub : cl::getRegisteredSubcommands())
    if (!sub->getName().empty())
      commands.push_back(sub->getName());
  llvm::sort(commands);
  if (llvm::is_contained(commands, word))
    return true;
  static const std::pair<llvm::StringRef, llvm::StringRef> synonyms[] = {
      {"train", "run"},    {"fit", "run"},       {"finetune", "run"},
      {"fine-tune", "run"}, {"pretrain", "run"}, {"sample", "generate"}};
  // The synonyms only as they are: their near misses would catch unrelated
  // short words ('foo' is two edits from 'fit').
  llvm::StringRef suggestion = closestName(word, commands);
  for (auto [synonym, command] : synonyms)
    if (word.equals_insensitive(synonym))
      suggestion = command;
  if (!suggestion.empty())
    reportError("unknown command '" + word + "'; did you mean '" + suggestion +
         "'? (llmc --help lists the commands)");
  else
    reportError("unknown command '" + word + "'; commands: " +
         llvm::join(commands, ", ") + " (llmc --help says what each does)");
  return false;
}

int runHelpCommand(int argc, char **argv) {
  llvm::StringRef usage = "usage: llmc help config [--markdown]\n";
  if (argc < 2 || llvm::StringRef(argv[1]) != "config" || argc > 3 ||
      (argc == 3 && llvm::StringRef(argv[2]) != "--markdown")) {
    llvm::errs() << usage;
    return 1;
  }
  if (argc == 3)
    printConfigKeyReference(llvm::outs());
  else
    printTrainingConfigHelp(llvm::outs());
  return 0;
}

} // namespace llmc

// The names of llmc's commands: near misses, synonyms and `llmc help`.
#ifndef LLMC_TOOLS_LLMC_COMMANDNAMES_H
#define LLMC_TOOLS_LLMC_COMMANDNAMES_H

#include "llvm/ADT/StringRef.h"

namespace llmc {

/// `llmc WORD ...` where WORD is no command: prints the command it is a
/// near miss of, or the one a word users reach for means (`train` is
/// `run`), instead of cl's "Unknown subcommand". Returns whether `word`
/// names a command (or is a flag, or an @response-file cl expands). Call
/// it after cl's subcommands are registered (from main).
bool checkCommandName(llvm::StringRef word);

/// `llmc help config [--markdown]`: the config keys of llmc run and llmc
/// plan from their one table; --markdown prints docs/config-keys.md.
/// `argv[0]` is "help".
int runHelpCommand(int argc, char **argv);

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_COMMANDNAMES_H

// `llmc data`: commands on token files (`info`; `prepare` joins the table
// in DataCommand.cpp).
#ifndef LLMC_TOOLS_LLMC_DATACOMMAND_H
#define LLMC_TOOLS_LLMC_DATACOMMAND_H

namespace llmc {

/// `llmc data ACTION ARGS...`: dispatches to the action; `argv[0]` is
/// "data".
int runDataCommand(int argc, char **argv);

/// `llmc data info FILES... [--vocab N] [--tokenizer SPEC]`; `argv[0]` is
/// "info".
int runDataInfo(int argc, char **argv);

/// `llmc data prepare INPUT... -o DIR [options]` (DataPrepareCommand.cpp);
/// `argv[0]` is "prepare".
int runDataPrepare(int argc, char **argv);

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_DATACOMMAND_H

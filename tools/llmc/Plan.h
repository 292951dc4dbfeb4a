// llmc plan: the subcommand that prints a training run's memory, compute,
// time and cost estimate before launch (options and their handling live in
// Plan.cpp).
#ifndef LLMC_TOOLS_LLMC_PLAN_H
#define LLMC_TOOLS_LLMC_PLAN_H

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"

#include <vector>

/// `llmc plan [CONFIG.yaml | MODEL] [--KEY VALUE ...] [options]`.
extern llvm::cl::SubCommand planCmd;

/// Sets aside the config-key flags of `llmc plan`'s arguments (argv[0] is
/// the program) and returns the rest, for the command-line parser.
std::vector<char *> splitPlanArguments(int argc, char **argv);

/// Runs the subcommand once the command line is parsed; the exit code.
int runPlan(mlir::MLIRContext &context);

#endif // LLMC_TOOLS_LLMC_PLAN_H

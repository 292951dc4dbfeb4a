// llmc plan: the subcommand that prints a training run's memory, compute,
// time and cost plan before launch (options and their handling live in
// Plan.cpp).
#ifndef LLMC_TOOLS_LLMC_PLAN_H
#define LLMC_TOOLS_LLMC_PLAN_H

#include "mlir/IR/MLIRContext.h"
#include "llvm/Support/CommandLine.h"

/// `llmc plan MODEL [--train FILE] [--cluster FILE] [flags]`.
extern llvm::cl::SubCommand planCmd;

/// Runs the subcommand once the command line is parsed; the exit code.
int runPlan(mlir::MLIRContext &context);

#endif // LLMC_TOOLS_LLMC_PLAN_H

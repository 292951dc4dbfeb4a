// Parsing model.mlir text with a bound on its nesting, so that hostile input
// gets an error instead of overflowing the stack of a recursive parser.
#ifndef LLMC_IR_PARSEMODULE_H
#define LLMC_IR_PARSEMODULE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <optional>

namespace llvm {
class SourceMgr;
} // namespace llvm

namespace mlir::llmc {

/// The deepest bracket nesting ((, [, {, <) a model file may have. MLIR's
/// parser, verifier, passes and printer recurse once per level (about 2 KiB
/// of stack a level), so a file nested thousands deep overflows an 8 MiB
/// stack; written and generated models nest a few dozen levels at most.
constexpr int kMaxNestingDepth = 1000;

/// The offset of the first bracket in `text` that opens level
/// kMaxNestingDepth + 1, outside string literals and // comments (`->` and
/// `>=` are not brackets); nullopt when there is none.
std::optional<size_t> findExcessiveNesting(llvm::StringRef text);

/// Whether the main buffer of `sourceMgr` nests at most kMaxNestingDepth
/// deep; if not, emits an error at the offending bracket's file:line:col.
LogicalResult checkNesting(llvm::SourceMgr &sourceMgr, MLIRContext *context);

/// parseSourceFile<ModuleOp> of the main buffer after checkNesting.
OwningOpRef<ModuleOp>
parseModuleSource(const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
                  MLIRContext *context);

} // namespace mlir::llmc

#endif // LLMC_IR_PARSEMODULE_H

// Parsing model.mlir text after checks that MLIR's parser handles badly: a
// bound on nesting (hostile input would overflow the stack of the recursive
// parser) and negative dimensions (reported as an unrelated syntax error).
#ifndef LLMC_IR_PARSEMODULE_H
#define LLMC_IR_PARSEMODULE_H

#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/StringRef.h"

#include <memory>
#include <optional>
#include <string>

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

/// The offset of the first negative dimension in a shaped type's shape
/// (`tensor<-4x8xf32>`, `memref<4x-1xf32>`, `vector<-2xf32>`), outside
/// string literals and comments, which MLIR's parser reports only as
/// "expected non-function type"; nullopt when there is none.
std::optional<size_t> findNegativeDimension(llvm::StringRef text);

/// A problem that the checks above find in `text`, at `offset`: the
/// message (without location) to report; nullopt when there is none.
/// The offset of the first control character other than tab, line feed
/// and carriage return (a NUL, an escape...): the mark of binary data where
/// text is expected; nullopt when there is none.
std::optional<size_t> findBinaryByte(llvm::StringRef text);

struct SourceProblem {
  size_t offset;
  std::string message;
};
std::optional<SourceProblem> findSourceProblem(llvm::StringRef text);

/// Whether the main buffer of `sourceMgr` is free of the problems
/// findSourceProblem finds; if not, emits an error at its file:line:col.
LogicalResult checkSource(llvm::SourceMgr &sourceMgr, MLIRContext *context);

/// parseSourceFile<ModuleOp> of the main buffer after checkSource.
OwningOpRef<ModuleOp>
parseModuleSource(const std::shared_ptr<llvm::SourceMgr> &sourceMgr,
                  MLIRContext *context);

} // namespace mlir::llmc

#endif // LLMC_IR_PARSEMODULE_H

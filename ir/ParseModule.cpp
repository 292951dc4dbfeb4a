// The nesting bound on model.mlir text and the parse behind it.
#include "ir/ParseModule.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/Parser/Parser.h"
#include "llvm/Support/SourceMgr.h"

#include <algorithm>

using namespace mlir;

std::optional<size_t> mlir::llmc::findExcessiveNesting(llvm::StringRef text) {
  int depth = 0;
  for (size_t i = 0, n = text.size(); i < n; ++i) {
    char c = text[i];
    char next = i + 1 < n ? text[i + 1] : '\0';
    if (c == '"') { // a string literal, with backslash escapes
      for (++i; i < n && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && next == '/') {
      i = text.find('\n', i);
      if (i == llvm::StringRef::npos)
        return std::nullopt;
      continue;
    }
    if (c == '-' && next == '>') { // an arrow, not a closing bracket
      ++i;
      continue;
    }
    if (c == '(' || c == '[' || c == '{' || c == '<') {
      if (++depth > kMaxNestingDepth)
        return i;
    } else if (c == ')' || c == ']' || c == '}' ||
               (c == '>' && next != '=')) {
      // Unbalanced text only lowers the count: the parser rejects it.
      depth = std::max(depth - 1, 0);
    }
  }
  return std::nullopt;
}

LogicalResult mlir::llmc::checkNesting(llvm::SourceMgr &sourceMgr,
                                       MLIRContext *context) {
  unsigned id = sourceMgr.getMainFileID();
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(id);
  std::optional<size_t> offset = findExcessiveNesting(buffer->getBuffer());
  if (!offset)
    return success();
  auto [line, column] = sourceMgr.getLineAndColumn(
      llvm::SMLoc::getFromPointer(buffer->getBufferStart() + *offset), id);
  return emitError(FileLineColLoc::get(context,
                                       buffer->getBufferIdentifier(), line,
                                       column),
                   "brackets nest deeper than ")
         << kMaxNestingDepth
         << " levels here; llmc refuses such input rather than overflow "
            "the parser's stack (models nest a few dozen levels)";
}

OwningOpRef<ModuleOp> mlir::llmc::parseModuleSource(
    const std::shared_ptr<llvm::SourceMgr> &sourceMgr, MLIRContext *context) {
  if (failed(checkNesting(*sourceMgr, context)))
    return nullptr;
  return parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(context));
}

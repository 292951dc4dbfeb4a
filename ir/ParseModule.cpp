// The checks on model.mlir text and the parse behind them.
#include "ir/ParseModule.h"

#include "mlir/IR/Diagnostics.h"
#include "mlir/IR/Location.h"
#include "mlir/Parser/Parser.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FormatVariadic.h"
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

/// Whether text[i] starts `word<` after a character that cannot end an
/// identifier.
static bool startsType(llvm::StringRef text, size_t i, llvm::StringRef word) {
  if (!text.substr(i).starts_with(word) ||
      text.substr(i + word.size()).take_front(1) != "<")
    return false;
  if (i == 0)
    return true;
  char before = text[i - 1];
  return !(llvm::isAlnum(before) || before == '_' || before == '.' ||
           before == '$');
}

std::optional<size_t> mlir::llmc::findNegativeDimension(llvm::StringRef text) {
  for (size_t i = 0, n = text.size(); i < n; ++i) {
    char c = text[i];
    if (c == '"') {
      for (++i; i < n && text[i] != '"'; ++i)
        if (text[i] == '\\')
          ++i;
      continue;
    }
    if (c == '/' && i + 1 < n && text[i + 1] == '/') {
      i = text.find('\n', i);
      if (i == llvm::StringRef::npos)
        return std::nullopt;
      continue;
    }
    llvm::StringRef word;
    for (llvm::StringRef type : {"tensor", "memref", "vector"})
      if (startsType(text, i, type))
        word = type;
    if (word.empty())
      continue;
    // The shape: (size | ? | [size]) 'x' ..., then the element type.
    size_t j = i + word.size() + 1;
    while (true) {
      while (j < n && text[j] == ' ')
        ++j;
      if (j + 1 < n && text[j] == '-' && llvm::isDigit(text[j + 1]))
        return j;
      size_t dim = j;
      if (j < n && text[j] == '[')
        ++j;
      while (j < n && (llvm::isDigit(text[j]) || text[j] == '?'))
        ++j;
      if (j < n && text[j] == ']')
        ++j;
      if (j == dim || j >= n || text[j] != 'x')
        break;
      ++j;
    }
    i = j - 1;
  }
  return std::nullopt;
}

std::optional<size_t> mlir::llmc::findBinaryByte(llvm::StringRef text) {
  for (size_t i = 0, n = text.size(); i < n; ++i) {
    unsigned char c = text[i];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      return i;
  }
  return std::nullopt;
}

std::optional<mlir::llmc::SourceProblem>
mlir::llmc::findSourceProblem(llvm::StringRef text) {
  // First: binary data would otherwise be reported as whatever the lexer
  // makes of its first bytes (an unknown op, an unexpected character).
  if (std::optional<size_t> offset = findBinaryByte(text))
    return SourceProblem{
        *offset, llvm::formatv("not a text file: byte {0} is the control "
                               "character 0x{1:x-2}; llmc reads MLIR as text",
                               *offset, unsigned((unsigned char)text[*offset]))
                     .str()};
  if (std::optional<size_t> offset = findExcessiveNesting(text))
    return SourceProblem{
        *offset,
        (llvm::Twine("brackets nest deeper than ") +
         llvm::Twine(kMaxNestingDepth) +
         " levels here; llmc refuses such input rather than overflow the "
         "parser's stack (models nest a few dozen levels)")
            .str()};
  if (std::optional<size_t> offset = findNegativeDimension(text)) {
    llvm::StringRef number = text.substr(*offset + 1);
    number = number.take_while([](char c) { return llvm::isDigit(c); });
    return SourceProblem{*offset, ("negative dimension -" + number +
                                   " in a shaped type: a dimension is a "
                                   "size of 0 or more, or ? for a dynamic "
                                   "one")
                                      .str()};
  }
  return std::nullopt;
}

LogicalResult mlir::llmc::checkSource(llvm::SourceMgr &sourceMgr,
                                      MLIRContext *context) {
  unsigned id = sourceMgr.getMainFileID();
  const llvm::MemoryBuffer *buffer = sourceMgr.getMemoryBuffer(id);
  std::optional<SourceProblem> problem =
      findSourceProblem(buffer->getBuffer());
  if (!problem)
    return success();
  auto [line, column] = sourceMgr.getLineAndColumn(
      llvm::SMLoc::getFromPointer(buffer->getBufferStart() + problem->offset),
      id);
  return emitError(FileLineColLoc::get(context, buffer->getBufferIdentifier(),
                                       line, column),
                   problem->message);
}

OwningOpRef<ModuleOp> mlir::llmc::parseModuleSource(
    const std::shared_ptr<llvm::SourceMgr> &sourceMgr, MLIRContext *context) {
  if (failed(checkSource(*sourceMgr, context)))
    return nullptr;
  return parseSourceFile<ModuleOp>(sourceMgr, ParserConfig(context));
}

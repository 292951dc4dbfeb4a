// llmc's one YAML config reader: a file or buffer read into a tree of nodes
// (YamlFile, with its SourceMgr so errors say file:line:col; a file that is
// binary, or prose rather than a config, is named as such), the walk over
// a mapping's keys with the unknown- and duplicate-key checks (forEachKey),
// scalar access (getScalar), a mapping of known keys with typed getters
// (Fields), the message for an unknown key and the list of an enum's names.
// Every YAML file llmc reads goes through it: model configs
// (frontend/ModelConfig.cpp), `llmc run` configs (frontend/TrainConfig.cpp),
// the planner's cluster file (frontend/PlanConfig.cpp) and hardware table
// (training/Plan/Hardware.cpp). Where the readers word an error differently
// (tests assert each), the caller passes the wording.
#ifndef LLMC_FRONTEND_CONFIGYAML_H
#define LLMC_FRONTEND_CONFIGYAML_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/ConvertUTF.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/ErrorHandling.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/YAMLParser.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <map>
#include <memory>
#include <optional>
#include <vector>

#include <string>

namespace llvm {
class SMDiagnostic;
} // namespace llvm

namespace mlir::llmc {

/// Collects the YAML scanner's first diagnostic (it stops after one; later
/// ones would be noise) instead of letting it reach stderr. Install with
/// `sourceMgr.setDiagHandler(YamlDiagnostic::capture, &diagnostic)`.
struct YamlDiagnostic {
  std::string message;
  bool seen = false;

  static void capture(const llvm::SMDiagnostic &diag, void *self);
};

/// The deepest YAML nesting llmc reads, as model.mlir's bracket bound
/// (ir/ParseModule.h): LLVM's YAML parser recurses once per level, and a
/// file nested 20,000 deep overflows its stack. Configs nest a few levels.
constexpr unsigned kMaxYamlNesting = 1000;

/// Where the nesting of YAML `text` first passes `limit` levels (a byte
/// offset), else nullopt. Counts flow brackets ([ and { outside quotes and
/// comments), block levels (indentation deeper than the enclosing line's)
/// and compact nested sequence or key items (`- - x`, `? `) on a line; an
/// estimate that is never below the parser's depth.
std::optional<size_t> findDeepYamlNesting(llvm::StringRef text,
                                          unsigned limit = kMaxYamlNesting);

/// The name of `known` nearest to `name` when it is a near miss (edit
/// distance below 3, or a case-insensitive match), else empty: what
/// "did you mean" suggests for keys, presets and flags.
llvm::StringRef closestName(llvm::StringRef name,
                            llvm::ArrayRef<llvm::StringRef> known);

/// "unknown key 'x' (did you mean 'y'?)" for a near miss (closestName),
/// else "unknown key 'x'; known keys: a, b, ...".
std::string unknownKeyMessage(llvm::StringRef name,
                              llvm::ArrayRef<llvm::StringRef> known);

/// The names of an enum's `count` values, comma separated.
template <typename E>
std::string listEnumNames(llvm::StringRef (*stringify)(E), unsigned count) {
  std::string result;
  for (unsigned i = 0; i < count; ++i)
    result += (i ? ", " : "") + stringify(static_cast<E>(i)).str();
  return result;
}

namespace config {
using namespace llvm;

/// An error with `message` as it stands (it already says where).
inline Error makeError(const Twine &message) {
  return createStringError(std::make_error_code(std::errc::invalid_argument),
                           message.str());
}

/// A YAML node read out of the streaming parser (which must be walked once,
/// in document order) into a tree that can be looked at in any order.
struct YNode {
  enum class Kind { Null, Scalar, Mapping, Sequence, Alias };
  Kind kind = Kind::Null;
  std::string text; // Scalar
  SMRange range;
  std::vector<YNode> keys, values; // Mapping, in document order
  std::vector<YNode> items;        // Sequence, in document order

  StringRef describe() const {
    switch (kind) {
    case Kind::Null:
      return "an empty value";
    case Kind::Scalar:
      return "a scalar";
    case Kind::Mapping:
      return "a mapping";
    case Kind::Sequence:
      return "a sequence";
    case Kind::Alias:
      return "an alias";
    }
    llvm_unreachable("unknown node kind");
  }
};

inline YNode convertNode(llvm::yaml::Node *node) {
  YNode result;
  result.range = node->getSourceRange();
  if (auto *scalar = dyn_cast<yaml::ScalarNode>(node)) {
    SmallString<32> storage;
    result.kind = YNode::Kind::Scalar;
    result.text = scalar->getValue(storage).str();
  } else if (auto *block = dyn_cast<yaml::BlockScalarNode>(node)) {
    result.kind = YNode::Kind::Scalar;
    result.text = block->getValue().str();
  } else if (auto *mapping = dyn_cast<yaml::MappingNode>(node)) {
    result.kind = YNode::Kind::Mapping;
    for (yaml::KeyValueNode &kv : *mapping) {
      YNode key;
      if (yaml::Node *k = kv.getKey())
        key = convertNode(k);
      else
        key.range = kv.getSourceRange();
      YNode value;
      if (yaml::Node *v = kv.getValue())
        value = convertNode(v);
      if (value.kind == YNode::Kind::Null)
        value.range = key.range; // an empty value has no useful extent
      result.keys.push_back(std::move(key));
      result.values.push_back(std::move(value));
    }
  } else if (auto *sequence = dyn_cast<yaml::SequenceNode>(node)) {
    result.kind = YNode::Kind::Sequence;
    for (yaml::Node &item : *sequence)
      result.items.push_back(convertNode(&item));
  } else if (isa<yaml::AliasNode>(node)) {
    result.kind = YNode::Kind::Alias;
  }
  return result;
}

/// A YAML text with its SourceMgr, so errors point into the file.
class YamlFile {
public:
  YamlFile(StringRef text, StringRef bufferName)
      : buffer(MemoryBuffer::getMemBufferCopy(text, bufferName)),
        name(bufferName.str()) {
    sm.setDiagHandler(YamlDiagnostic::capture, &capture);
  }

  /// The top-level mapping. Syntax is checked in a first pass: a stream
  /// reports errors lazily, while its nodes are walked.
  Expected<const YNode *> root(StringRef what) {
    if (Error error = checkText())
      return error;
    if (Error error = checkNesting())
      return error;
    {
      yaml::Stream check(buffer->getMemBufferRef(), sm, false);
      if (!check.validate() || capture.seen) {
        if (Error prose = notConfig(what))
          return prose;
        return makeError(capture.seen ? StringRef(capture.message).rtrim()
                                      : StringRef(name + ": error: invalid "
                                                         "YAML"));
      }
    }
    yaml::Stream stream(buffer->getMemBufferRef(), sm, false);
    yaml::document_iterator doc = stream.begin();
    yaml::Node *node = doc != stream.end() ? doc->getRoot() : nullptr;
    SMLoc start = this->start();
    if (node)
      tree = convertNode(node);
    // Later documents are read too, so that singleDocument() can point at
    // the first one that is not empty (a stray trailing "---" is harmless).
    if (doc != stream.end())
      while (++doc != stream.end()) {
        yaml::Node *extra = doc->getRoot();
        if (extra && !isa<yaml::NullNode>(extra) && !extraDocument.isValid())
          extraDocument = extra->getSourceRange();
      }
    if (capture.seen)
      return makeError(StringRef(capture.message).rtrim());
    // Prose that happens to parse (a scalar, or a sentence before a colon
    // as the first key) is named as such rather than as its first key.
    if (Error prose = notConfig(what))
      return prose;
    if (!node || tree.kind == YNode::Kind::Null)
      return error(SMRange(start, start),
                   "empty document; expected a mapping of " + what);
    if (tree.kind != YNode::Kind::Mapping)
      return error(tree.range, "expected a mapping of " + what +
                                   " at the top level, got " +
                                   tree.describe());
    return &tree;
  }

  /// An error at the second document, if the file has one that is not
  /// empty. Call after root().
  Error singleDocument() const {
    if (extraDocument.isValid())
      return error(extraDocument, "expected a single YAML document");
    return Error::success();
  }

  /// That the file is UTF-8 text: the YAML scanner reports binary data or
  /// another encoding as syntax ("Got empty plain scalar"), and its source
  /// line would print the garbage. Names the first bad byte by offset.
  Error checkText() const {
    StringRef text = buffer->getBuffer();
    const auto *begin = reinterpret_cast<const llvm::UTF8 *>(text.begin());
    const auto *end = reinterpret_cast<const llvm::UTF8 *>(text.end());
    const llvm::UTF8 *bad = begin;
    bool utf8 = llvm::isLegalUTF8String(&bad, end);
    size_t offset = utf8 ? text.size() : size_t(bad - begin);
    auto lineAndColumn = [&](size_t at) { // (the buffer is not in sm yet)
      StringRef before = text.take_front(at);
      size_t lineStart = before.rfind('\n');
      size_t col = lineStart == StringRef::npos ? at + 1 : at - lineStart;
      return std::make_pair(before.count('\n') + 1, col);
    };
    // Control characters other than tab and line ends mean binary data,
    // wherever they are: random bytes are seldom valid UTF-8 for long, and
    // "not UTF-8" would suggest a text file in another encoding.
    for (size_t i = 0; i < text.size(); ++i) {
      unsigned char c = text[i];
      if (c < 0x20 && c != '\t' && c != '\n' && c != '\r') {
        auto [line, col] = lineAndColumn(i);
        return makeError(formatv("{0}: error: not a text file: byte {1} (line "
                                 "{2}, column {3}) is the control character "
                                 "0x{4:x-2}; a config is a YAML text file",
                                 name, i, line, col, unsigned(c))
                             .str());
      }
    }
    if (utf8)
      return Error::success();
    auto [line, col] = lineAndColumn(offset);
    return makeError(formatv("{0}: error: not UTF-8: byte {1} (line {2}, "
                             "column {3}) is 0x{4:x-2}, which is not valid "
                             "UTF-8 there; a config is UTF-8 YAML text",
                             name, offset, line, col,
                             unsigned((unsigned char)text[offset]))
                         .str());
  }

  /// That the file nests no deeper than kMaxYamlNesting, before any
  /// parser sees it (file:line:col of the level past the bound).
  Error checkNesting() const {
    std::optional<size_t> offset = findDeepYamlNesting(buffer->getBuffer());
    if (!offset)
      return Error::success();
    StringRef before = buffer->getBuffer().take_front(*offset);
    size_t lineStart = before.rfind('\n');
    size_t col = lineStart == StringRef::npos ? *offset + 1
                                              : *offset - lineStart;
    return makeError(formatv("{0}:{1}:{2}: error: YAML nests deeper than {3} "
                             "levels here; llmc refuses such input rather "
                             "than overflow the parser's stack (configs "
                             "nest a few levels)",
                             name, before.count('\n') + 1, col,
                             kMaxYamlNesting)
                         .str());
  }

  /// That the file is not prose (a text file given where a config is
  /// expected): its first line that is neither blank nor a comment starts
  /// with words, not with "key:" or a lone scalar, and the YAML parser
  /// would echo it as a key or a syntax error. A config given as a flag's
  /// value (buffer "--model") is not a file and is not checked.
  Error notConfig(StringRef what) const {
    if (name.empty() || StringRef(name).starts_with("-"))
      return Error::success();
    StringRef rest = buffer->getBuffer();
    size_t lineNumber = 0;
    while (!rest.empty()) {
      auto [line, next] = rest.split('\n');
      rest = next;
      ++lineNumber;
      StringRef trimmed = line.trim();
      if (trimmed.empty() || trimmed.starts_with("#"))
        continue;
      // Flow collections, sequences, quoted keys, anchors, tags, document
      // markers and directives: YAML, whatever the parser says of it.
      if (StringRef("{[\"'-?!&*%|>").contains(trimmed.front()))
        return Error::success();
      // A key before a colon, or a lone scalar (a preset's name): one
      // word of name characters.
      StringRef key = trimmed.split(':').first.rtrim();
      if (!key.empty() && llvm::all_of(key, [](char c) {
            return isAlnum(c) || StringRef("_.-/+").contains(c);
          }))
        return Error::success();
      size_t cut = std::min<size_t>(40, trimmed.size());
      while (cut < trimmed.size() && (trimmed[cut] & 0xC0) == 0x80)
        --cut; // not inside a UTF-8 sequence
      std::string excerpt = trimmed.take_front(cut).str();
      if (cut < trimmed.size())
        excerpt += "...";
      return makeError(
          formatv("{0}: error: not a YAML config: line {1} ('{2}') is text, "
                  "not a 'key: value' line of {3} (a text file? to train on "
                  "it: llmc run examples/train-tiny.yaml --train {0})",
                  name, lineNumber, excerpt, what)
              .str());
    }
    return Error::success();
  }

  SMLoc start() const {
    return SMLoc::getFromPointer(buffer->getBufferStart());
  }
  StringRef text() const { return buffer->getBuffer(); }
  StringRef bufferName() const { return name; }
  unsigned line(SMLoc loc) const { return sm.getLineAndColumn(loc).first; }

  /// "file:line:col: error: message" with the line and a caret under
  /// `range`; an invalid range points at the start of the buffer.
  Error error(SMRange range, const Twine &message) const {
    std::string text;
    raw_string_ostream os(text);
    // Printed here rather than through sm.PrintMessage, which would hand
    // the message to the scanner's diagnostic handler.
    SMLoc loc = range.Start.isValid() ? range.Start : start();
    SMDiagnostic diag = sm.GetMessage(
        loc, SourceMgr::DK_Error, message,
        range.isValid() ? ArrayRef<SMRange>(range) : ArrayRef<SMRange>());
    diag.print(/*ProgName=*/nullptr, os, /*ShowColors=*/false);
    return makeError(StringRef(text).rtrim());
  }

  std::string where(SMLoc loc) const {
    auto [line, col] = sm.getLineAndColumn(loc);
    return formatv("{0}:{1}:{2}", name, line, col).str();
  }

private:
  SourceMgr sm;
  YamlDiagnostic capture;
  std::unique_ptr<MemoryBuffer> buffer;
  YNode tree;
  SMRange extraDocument;
  std::string name;
};

/// The range an error about `value` (the value of `key`) points at: the
/// value's own, or the key's where the value has no useful extent (an empty
/// value, an alias).
inline SMRange valueRange(const YNode &key, const YNode &value) {
  if (value.kind == YNode::Kind::Null || value.kind == YNode::Kind::Alias)
    return key.range;
  return value.range;
}

/// How forEachKey checks and words the keys of one mapping. The readers
/// word a duplicate differently (each wording is asserted by tests), so the
/// caller may pass its own.
struct KeyRules {
  /// The names allowed; empty: any name (the caller checks).
  ArrayRef<StringRef> known;
  /// The message for a key that is not a scalar.
  StringRef notScalar = "expected a scalar key";
  /// The message for a name not in `known`; default unknownKeyMessage.
  function_ref<std::string(StringRef name)> unknown = nullptr;
  /// The message for a name given twice, told the first key and value;
  /// default "duplicate key 'x' (first given on line N)".
  function_ref<std::string(StringRef name, const YNode &firstKey,
                           const YNode &firstValue)>
      duplicate = nullptr;
};

/// Calls `visit` on each key of `mapping` in document order, after checking
/// that the key is a scalar, known and not given before in this mapping.
/// Errors point at the key.
Error forEachKey(const YamlFile &file, const YNode &mapping,
                 const KeyRules &rules,
                 function_ref<Error(StringRef name, const YNode &key,
                                    const YNode &value)>
                     visit);

/// The text of a scalar value, or "name: expected <expected>, got <what
/// the value is>" pointing at it.
Expected<StringRef> getScalar(const YamlFile &file, StringRef name,
                              const YNode &key, const YNode &value,
                              const Twine &expected);

/// `text` as one of an enum's `count` names.
template <typename E>
std::optional<E> parseEnumName(StringRef text, StringRef (*stringify)(E),
                               unsigned count) {
  for (unsigned i = 0; i < count; ++i)
    if (stringify(static_cast<E>(i)) == text)
      return static_cast<E>(i);
  return std::nullopt;
}

/// The keys of one mapping, checked against the known ones, with typed
/// getters whose errors point at the value.
class Fields {
public:
  Fields(const YamlFile &file, ArrayRef<StringRef> known)
      : file(file), known(known) {}

  Error collect(const YNode &mapping) {
    KeyRules rules;
    rules.known = known;
    auto duplicate = [&](StringRef name, const YNode &, const YNode &) {
      return "duplicate key '" + name.str() + "' (first given at " +
             entries[name.str()].where + ")";
    };
    rules.duplicate = duplicate;
    return forEachKey(file, mapping, rules,
                      [&](StringRef name, const YNode &key,
                          const YNode &value) -> Error {
                        if (value.kind == YNode::Kind::Null)
                          return file.error(key.range, name + ": missing value");
                        Entry &entry = entries[name.str()];
                        entry.value = &value;
                        entry.where = file.where(value.range.Start);
                        return Error::success();
                      });
  }

  bool has(StringRef key) const { return entries.count(key.str()); }
  std::string where(StringRef key) const { return entries.at(key.str()).where; }
  const YNode &node(StringRef key) const {
    return *entries.at(key.str()).value;
  }

  Error error(StringRef key, const Twine &message) const {
    return file.error(node(key).range, key + ": " + message);
  }

  Expected<std::string> getString(StringRef key) const {
    const YNode &value = node(key);
    if (value.kind != YNode::Kind::Scalar)
      return error(key, "expected a scalar, got " + value.describe());
    return value.text;
  }

  Expected<double> getNumber(StringRef key, double min, bool minInclusive,
                             double max = HUGE_VAL) const {
    Expected<std::string> text = getString(key);
    if (!text)
      return text.takeError();
    double value = 0;
    if (StringRef(*text).trim().getAsDouble(value) || !std::isfinite(value))
      return error(key, "expected a number, got '" + *text + "'");
    if (value < min || (!minInclusive && value == min) || value > max) {
      std::string range = (minInclusive ? ">= " : "> ") + formatNumber(min);
      if (max != HUGE_VAL)
        range += " and <= " + formatNumber(max);
      return error(key, *text + " is out of range; expected a value " + range);
    }
    return value;
  }

  Expected<int64_t> getInt(StringRef key, int64_t min, int64_t max) const {
    Expected<std::string> text = getString(key);
    if (!text)
      return text.takeError();
    int64_t value = 0;
    if (StringRef(*text).trim().getAsInteger(10, value))
      return error(key, "expected an integer, got '" + *text + "'");
    if (value < min || value > max)
      return error(key, formatv("{0} is out of range; expected {1} to {2}",
                                value, min, max));
    return value;
  }

  template <typename E>
  Expected<E> getEnum(StringRef key, std::optional<E> (*parse)(StringRef),
                      StringRef allowed) const {
    Expected<std::string> text = getString(key);
    if (!text)
      return text.takeError();
    if (std::optional<E> value = parse(*text))
      return *value;
    return error(key,
                 "unknown value '" + *text + "'; expected one of " + allowed);
  }

  Expected<const YNode *> getMapping(StringRef key) const {
    const YNode &value = node(key);
    if (value.kind != YNode::Kind::Mapping)
      return error(key, "expected a mapping, got " + value.describe());
    return &value;
  }

private:
  struct Entry {
    const YNode *value = nullptr;
    std::string where;
  };

  static std::string formatNumber(double value) {
    return formatv("{0}", format("%g", value)).str();
  }

  const YamlFile &file;
  ArrayRef<StringRef> known;
  std::map<std::string, Entry> entries;
};

inline Expected<std::unique_ptr<MemoryBuffer>> readFile(StringRef path,
                                                 StringRef what) {
  ErrorOr<std::unique_ptr<MemoryBuffer>> file = MemoryBuffer::getFile(path);
  if (std::error_code ec = file.getError())
    return createStringError(ec, "cannot read " + what + " '" + path +
                                     "': " + ec.message());
  return std::move(*file);
}

} // namespace config
} // namespace mlir::llmc

#endif // LLMC_FRONTEND_CONFIGYAML_H

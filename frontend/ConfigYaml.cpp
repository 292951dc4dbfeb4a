// llmc's one YAML config reader (see ConfigYaml.h).
#include "frontend/ConfigYaml.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/SourceMgr.h"
#include "llvm/Support/raw_ostream.h"

using namespace llvm;

void mlir::llmc::YamlDiagnostic::capture(const SMDiagnostic &diag,
                                         void *self) {
  auto *diagnostic = static_cast<YamlDiagnostic *>(self);
  if (diagnostic->seen)
    return;
  diagnostic->seen = true;
  raw_string_ostream os(diagnostic->message);
  diag.print(/*ProgName=*/nullptr, os, /*ShowColors=*/false);
}

StringRef mlir::llmc::closestName(StringRef name, ArrayRef<StringRef> known) {
  StringRef best;
  unsigned bestDistance = 3;
  for (StringRef candidate : known) {
    if (candidate.equals_insensitive(name))
      return candidate;
    unsigned distance = name.edit_distance(candidate, /*AllowReplacements=*/true,
                                           /*MaxEditDistance=*/bestDistance);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  return best;
}

std::string mlir::llmc::unknownKeyMessage(StringRef name,
                                          ArrayRef<StringRef> known) {
  StringRef best = closestName(name, known);
  if (!best.empty())
    return ("unknown key '" + name + "' (did you mean '" + best + "'?)").str();
  return ("unknown key '" + name + "'; known keys: " + join(known, ", ")).str();
}

Error mlir::llmc::config::forEachKey(
    const YamlFile &file, const YNode &mapping, const KeyRules &rules,
    function_ref<Error(StringRef, const YNode &, const YNode &)> visit) {
  // name -> index of its first key; mappings are small.
  SmallVector<std::pair<StringRef, size_t>> seen;
  for (size_t i = 0; i < mapping.keys.size(); ++i) {
    const YNode &key = mapping.keys[i];
    const YNode &value = mapping.values[i];
    if (key.kind != YNode::Kind::Scalar)
      return file.error(key.range, rules.notScalar);
    StringRef name = key.text;
    if (!rules.known.empty() && !is_contained(rules.known, name))
      return file.error(key.range, rules.unknown
                                       ? rules.unknown(name)
                                       : unknownKeyMessage(name, rules.known));
    auto first = find_if(seen, [&](auto &entry) { return entry.first == name; });
    if (first != seen.end()) {
      const YNode &firstKey = mapping.keys[first->second];
      const YNode &firstValue = mapping.values[first->second];
      return file.error(
          key.range,
          rules.duplicate
              ? rules.duplicate(name, firstKey, firstValue)
              : ("duplicate key '" + name + "' (first given on line " +
                 Twine(file.line(firstKey.range.Start)) + ")")
                    .str());
    }
    seen.push_back({name, i});
    if (Error err = visit(name, key, value))
      return err;
  }
  return Error::success();
}

Expected<StringRef> mlir::llmc::config::getScalar(const YamlFile &file,
                                                  StringRef name,
                                                  const YNode &key,
                                                  const YNode &value,
                                                  const Twine &expected) {
  if (value.kind == YNode::Kind::Scalar)
    return StringRef(value.text);
  return file.error(valueRange(key, value), name + ": expected " + expected +
                                                ", got " + value.describe());
}

/// Whether a quote at text[i] opens a quoted scalar: it starts a value
/// (after indentation, a ':', '-', '?', ',' or flow bracket), else it is an
/// apostrophe inside a plain scalar ("it's").
static bool opensQuote(StringRef text, size_t i) {
  while (i > 0 && (text[i - 1] == ' ' || text[i - 1] == '\t'))
    --i;
  return i == 0 || StringRef(":-?,[{\n").contains(text[i - 1]);
}

std::optional<size_t> mlir::llmc::findDeepYamlNesting(StringRef text,
                                                      unsigned limit) {
  SmallVector<size_t> indents; // columns of the open block levels
  // Flow brackets open and the block level where the outermost opened.
  size_t flow = 0, flowBase = 0, n = text.size();
  for (size_t i = 0; i < n;) {
    // A line: its indentation opens or closes block levels (in flow
    // context indentation means nothing).
    size_t col = 0;
    while (i < n && text[i] == ' ')
      ++i, ++col;
    if (i >= n)
      break;
    size_t level = 0;
    if (flow == 0 && text[i] != '\n' && text[i] != '\r' && text[i] != '#') {
      while (!indents.empty() && indents.back() >= col)
        indents.pop_back();
      indents.push_back(col);
      level = indents.size();
      if (level > limit)
        return i;
      // "- - - x": each indicator nests one more level on this line.
      while (i + 1 < n && (text[i] == '-' || text[i] == '?') &&
             (text[i + 1] == ' ' || text[i + 1] == '\t')) {
        if (++level > limit)
          return i;
        i += 2;
        while (i < n && (text[i] == ' ' || text[i] == '\t'))
          ++i;
      }
    }
    // The rest of the line: flow brackets, quoted scalars (which may span
    // lines), a comment.
    for (; i < n && text[i] != '\n'; ++i) {
      char c = text[i];
      if ((c == '"' || c == '\'') && opensQuote(text, i)) {
        for (++i; i < n; ++i) {
          if (c == '"' && text[i] == '\\')
            ++i;
          else if (text[i] == c &&
                   !(c == '\'' && i + 1 < n && text[i + 1] == '\''))
            break;
          else if (c == '\'' && text[i] == '\'')
            ++i; // '' inside single quotes
        }
        if (i >= n)
          return std::nullopt;
        continue;
      }
      if (c == '#' &&
          (i == 0 || StringRef(" \t\n").contains(text[i - 1]))) {
        i = text.find('\n', i);
        if (i == StringRef::npos)
          return std::nullopt;
        break;
      }
      if (c == '[' || c == '{') {
        if (flow == 0)
          flowBase = level;
        if (flowBase + ++flow > limit)
          return i;
      } else if ((c == ']' || c == '}') && flow > 0) {
        --flow;
      }
    }
    if (i < n)
      ++i; // the line end
  }
  return std::nullopt;
}

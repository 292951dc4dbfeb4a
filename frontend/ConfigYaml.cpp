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

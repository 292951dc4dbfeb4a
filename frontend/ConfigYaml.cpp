// What llmc's YAML config readers share.
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

std::string mlir::llmc::unknownKeyMessage(StringRef name,
                                          ArrayRef<StringRef> known) {
  StringRef best;
  unsigned bestDistance = 3;
  for (StringRef candidate : known) {
    unsigned distance = name.edit_distance(candidate, /*AllowReplacements=*/true,
                                           /*MaxEditDistance=*/bestDistance);
    if (distance < bestDistance) {
      best = candidate;
      bestDistance = distance;
    }
  }
  if (!best.empty())
    return ("unknown key '" + name + "' (did you mean '" + best + "'?)").str();
  return ("unknown key '" + name + "'; known keys: " + join(known, ", ")).str();
}

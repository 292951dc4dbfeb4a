// What llmc's YAML config readers share (model configs in
// frontend/ModelConfig.cpp; training, cluster and hardware files in
// codegen/Plan.cpp): the capture of the YAML scanner's diagnostic, the
// message for an unknown key and the list of an enum's names.
#ifndef LLMC_FRONTEND_CONFIGYAML_H
#define LLMC_FRONTEND_CONFIGYAML_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

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

/// "unknown key 'x' (did you mean 'y'?)" for a near miss (edit distance
/// below 3), else "unknown key 'x'; known keys: a, b, ...".
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

} // namespace mlir::llmc

#endif // LLMC_FRONTEND_CONFIGYAML_H

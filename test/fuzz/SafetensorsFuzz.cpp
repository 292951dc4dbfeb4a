// libFuzzer target: runtime::parseSafetensors on any bytes; what it accepts
// must survive writeSafetensors and read back the same.
#include "test/fuzz/FuzzInput.h"

#include "runtime/Weights/Weights.h"

#include <cstring>

using namespace llmc;

static bool sameF64(const runtime::F64Tensor &a, const runtime::F64Tensor &b) {
  // memcmp of an empty tensor would pass null pointers (undefined).
  return a.shape == b.shape && a.values.size() == b.values.size() &&
         (a.values.empty() ||
          std::memcmp(a.values.data(), b.values.data(),
                      a.values.size() * sizeof(double)) == 0);
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile copy(".safetensors");
  llvm::Expected<runtime::SafetensorsFile> file = runtime::parseSafetensors(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "<fuzz>");
  if (!file) {
    fuzz::expectMessage(file.takeError());
    return 0;
  }
  // Round trip: a file llmc reads is one it writes again, unchanged.
  if (llvm::Error err = runtime::writeSafetensors(copy.name(), *file)) {
    llvm::errs() << "fuzz: writing back a file that read fine failed: "
                 << llvm::toString(std::move(err)) << "\n";
    std::abort();
  }
  llvm::Expected<runtime::SafetensorsFile> again =
      runtime::readSafetensorsFile(copy.name());
  if (!again) {
    llvm::errs() << "fuzz: llmc cannot read the file it wrote: "
                 << llvm::toString(again.takeError()) << "\n";
    std::abort();
  }
  bool same = again->tensors == file->tensors &&
              again->metadata == file->metadata &&
              again->f64Tensors.size() == file->f64Tensors.size();
  for (const auto &[name, tensor] : file->f64Tensors) {
    auto it = again->f64Tensors.find(name);
    same = same && it != again->f64Tensors.end() && sameF64(it->second, tensor);
  }
  if (!same) {
    llvm::errs() << "fuzz: the safetensors round trip changed the contents\n";
    std::abort();
  }
  return 0;
}

// libFuzzer target: model configs (parseModelConfig, what `llmc compile
// model.yaml` and the `model:` of a training config read). A refusal must
// have a message; an accepted config must print (printModelConfig) as YAML
// that reads back to an equal config.
#include "test/fuzz/FuzzInput.h"

#include "frontend/ModelConfig.h"

#include <cstdlib>

using namespace mlir::llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  llvm::Expected<ModelConfig> config = parseModelConfig(text, "model.yaml");
  if (!config) {
    llmc::fuzz::expectMessage(config.takeError());
    return 0;
  }
  std::string printed;
  llvm::raw_string_ostream os(printed);
  printModelConfig(*config, os);
  llvm::Expected<ModelConfig> again = parseModelConfig(printed, "printed.yaml");
  if (!again) {
    llvm::errs() << "fuzz: the printed config does not read back: "
                 << llvm::toString(again.takeError()) << "\n"
                 << printed;
    std::abort();
  }
  if (*again != *config) {
    llvm::errs() << "fuzz: the printed config reads back different:\n"
                 << printed;
    std::abort();
  }
  return 0;
}

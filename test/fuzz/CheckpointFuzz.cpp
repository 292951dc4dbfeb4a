// libFuzzer target: runtime::parseCheckpoint (the checkpoints `llmc run`
// writes) on any bytes, and the ZeRO manifest of what it accepts. The
// checksums are not checked in the fuzz build (ir/kernel/Fuzzing.h).
#include "test/fuzz/FuzzInput.h"

#include "runtime/Weights/Checkpoint.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::Expected<runtime::Checkpoint> checkpoint = runtime::parseCheckpoint(
      llvm::StringRef(reinterpret_cast<const char *>(data), size), "<fuzz>");
  if (!checkpoint) {
    fuzz::expectMessage(checkpoint.takeError());
    return 0;
  }
  if (!checkpoint->manifest.empty()) {
    llvm::Expected<runtime::ShardManifest> manifest =
        runtime::ShardManifest::fromJson(checkpoint->manifest);
    if (!manifest)
      fuzz::expectMessage(manifest.takeError());
  }
  return 0;
}

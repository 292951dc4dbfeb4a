// libFuzzer target: runtime::readCheckpoint (the checkpoints `llmc run`
// writes) on any bytes, and the ZeRO manifest of what it accepts. The
// checksums are not checked in the fuzz build (ir/kernel/Fuzzing.h).
#include "test/fuzz/FuzzInput.h"

#include "runtime/Checkpoint.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile input(".ckpt");
  llvm::Expected<runtime::Checkpoint> checkpoint =
      runtime::readCheckpoint(input.write(data, size));
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

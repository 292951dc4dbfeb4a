// libFuzzer target: kir::deserializeArtifact (compiled-model artifacts) on
// any bytes. The checksum is not checked in the fuzz build
// (ir/kernel/Fuzzing.h), so mutations reach the FlatBuffer verifier and the
// program checks behind it.
#include "test/fuzz/FuzzInput.h"

#include "ir/kernel/Artifact.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::Expected<kir::ArtifactContents> contents =
      kir::deserializeArtifact(llvm::ArrayRef<uint8_t>(data, size), "<fuzz>");
  if (!contents)
    fuzz::expectMessage(contents.takeError());
  return 0;
}

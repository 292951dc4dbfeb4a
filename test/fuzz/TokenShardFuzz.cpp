// libFuzzer target: data::parseShard (llm.c token shards) on any bytes,
// without a vocabulary bound and with GPT-2's.
#include "test/fuzz/FuzzInput.h"

#include "frontend/Dataset.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef bytes(reinterpret_cast<const char *>(data), size);
  for (int32_t vocabSize : {0, 50257}) {
    llvm::Expected<std::vector<int32_t>> tokens =
        data::parseShard(bytes, "<fuzz>", vocabSize);
    if (!tokens)
      fuzz::expectMessage(tokens.takeError());
  }
  return 0;
}

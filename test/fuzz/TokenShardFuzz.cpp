// libFuzzer target: data::readShard (llm.c token shards) on any bytes,
// without a vocabulary bound and with GPT-2's.
#include "test/fuzz/FuzzInput.h"

#include "frontend/Dataset.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static fuzz::InputFile input(".bin");
  const std::string &path = input.write(data, size);
  for (int32_t vocabSize : {0, 50257}) {
    llvm::Expected<std::vector<int32_t>> tokens =
        data::readShard(path, vocabSize);
    if (!tokens)
      fuzz::expectMessage(tokens.takeError());
  }
  return 0;
}

// libFuzzer target: BPE tokenizer files (vocab.json, merges.txt) through
// data::BpeTokenizer::fromContents. The input is vocab.json, a NUL byte,
// then merges.txt. A tokenizer that loads encodes and decodes some text.
#include "test/fuzz/FuzzInput.h"

#include "frontend/Tokenizer.h"

using namespace llmc;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  llvm::StringRef input(reinterpret_cast<const char *>(data), size);
  auto [vocab, merges] = input.split('\0');
  auto tokenizer = data::BpeTokenizer::fromContents(vocab, merges);
  if (!tokenizer) {
    fuzz::expectMessage(tokenizer.takeError());
    return 0;
  }
  const data::BpeTokenizer &bpe = **tokenizer;
  for (llvm::StringRef text : {llvm::StringRef("Hello world, it's 2024!\n"),
                               vocab.take_front(64), merges.take_front(64)}) {
    for (int32_t id : bpe.encode(text)) {
      if (id < 0 || id >= bpe.vocabSize()) {
        llvm::errs() << "fuzz: token " << id << " is outside the vocabulary\n";
        std::abort();
      }
      (void)bpe.decodeToken(id);
    }
  }
  (void)bpe.describe();
  return 0;
}

// libFuzzer target: text training data (data::encodeDocuments, what
// a text file's bytes become for training) through the byte tokenizer and a small byte-level BPE; the BPE's tokens
// must spell the text back exactly, whatever its bytes (invalid UTF-8
// included).
#include "test/fuzz/FuzzInput.h"

#include "frontend/Tokenizer.h"

using namespace llmc;

/// A BPE learned (as `llmc tokenizer train` does) from a little English,
/// numbers and non-ASCII text, so that merges apply to typical inputs.
static const data::BpeTokenizer &bpe() {
  static std::unique_ptr<data::BpeTokenizer> tokenizer = [] {
    const char *text =
        "The quick brown fox jumps over the lazy dog. The dog's 12 bones, "
        "the fox's 345 tricks: they'll see. Naïve café, über Straße; "
        "東京 and Москва.\n\n  indented\tlines  and  spaces   \n";
    llvm::Expected<data::BpeVocabulary> vocabulary = data::trainBpe(text, 300);
    if (!vocabulary) {
      llvm::errs() << llvm::toString(vocabulary.takeError()) << "\n";
      std::abort();
    }
    auto loaded = data::BpeTokenizer::fromVocabulary(*vocabulary, "fuzz");
    if (!loaded) {
      llvm::errs() << llvm::toString(loaded.takeError()) << "\n";
      std::abort();
    }
    return std::move(*loaded);
  }();
  return *tokenizer;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  static data::ByteTokenizer bytes;
  llvm::StringRef text(reinterpret_cast<const char *>(data), size);
  for (const data::Tokenizer *tokenizer :
       {static_cast<const data::Tokenizer *>(&bytes),
        static_cast<const data::Tokenizer *>(&bpe())}) {
    for (int32_t id : data::encodeDocuments({text}, *tokenizer))
      if (id < 0 || id >= tokenizer->vocabSize()) {
        llvm::errs() << "fuzz: token " << id << " is outside the vocabulary\n";
        std::abort();
      }
  }
  std::string spelled;
  for (int32_t id : bpe().encode(text))
    spelled += bpe().decodeToken(id);
  if (spelled != text) {
    llvm::errs() << "fuzz: BPE decode(encode(text)) differs from the text\n";
    std::abort();
  }
  return 0;
}

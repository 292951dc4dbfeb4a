// A frontend tokenizer as the server's TextCodec (runtime/Serve/TextCodec.h).
#ifndef LLMC_TOOLS_COMMON_TOKENIZERCODEC_H
#define LLMC_TOOLS_COMMON_TOKENIZERCODEC_H

#include "frontend/Tokenizer.h"
#include "runtime/Serve/TextCodec.h"

namespace llmc {

class TokenizerCodec final : public serve::TextCodec {
public:
  explicit TokenizerCodec(const data::Tokenizer &tokenizer)
      : tokenizer(tokenizer) {}
  std::vector<int32_t> encode(llvm::StringRef text) const override {
    return tokenizer.encode(text);
  }
  std::string decodeToken(int32_t id) const override {
    return tokenizer.decodeToken(id);
  }
  int32_t vocabSize() const override { return tokenizer.vocabSize(); }
  std::optional<int32_t> endOfTextId() const override {
    return tokenizer.endOfTextId();
  }
  std::string describe() const override { return tokenizer.describe(); }

private:
  const data::Tokenizer &tokenizer;
};

} // namespace llmc

#endif // LLMC_TOOLS_COMMON_TOKENIZERCODEC_H

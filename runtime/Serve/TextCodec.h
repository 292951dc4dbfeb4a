// What serving needs of a tokenizer: text to ids and ids back to bytes. The
// server is given one (tools/common/TokenizerCodec.h adapts frontend's
// tokenizers), so runtime/ includes nothing of frontend/.
#ifndef LLMC_RUNTIME_SERVE_TEXTCODEC_H
#define LLMC_RUNTIME_SERVE_TEXTCODEC_H

#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llmc::serve {

class TextCodec {
public:
  virtual ~TextCodec() = default;
  /// The ids of `text`, each below vocabSize().
  virtual std::vector<int32_t> encode(llvm::StringRef text) const = 0;
  /// The bytes of one token.
  virtual std::string decodeToken(int32_t id) const = 0;
  virtual int32_t vocabSize() const = 0;
  /// The end-of-text token, if the vocabulary has one.
  virtual std::optional<int32_t> endOfTextId() const = 0;
  /// What it is, for messages ("byte", "bpe (1024 tokens, DIR)").
  virtual std::string describe() const = 0;
};

} // namespace llmc::serve

#endif // LLMC_RUNTIME_SERVE_TEXTCODEC_H

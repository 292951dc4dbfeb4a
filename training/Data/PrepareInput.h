// `llmc data prepare`'s input side: the input files and positions in them,
// cutting inputs into batches of documents, and encoding a batch. Internal
// to training/Data/Prepare.cpp (and its tests).
#ifndef LLMC_TRAINING_DATA_PREPAREINPUT_H
#define LLMC_TRAINING_DATA_PREPAREINPUT_H

#include "training/Data/Prepare.h"

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/MemoryBuffer.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace llmc::data {

class Tokenizer;

/// An input as found before the run: what the state file records of it.
struct InputFile {
  std::string name;     // as given: errors name it
  std::string path;     // absolute: the state file records it
  InputKind kind = InputKind::Text;
  uint64_t size = 0;
  int64_t mtimeNs = 0;
};

/// A place in the inputs: byte `offset` of input `input`, which is on line
/// `line` (1-based). The end of the last input is {inputs.size(), 0, 1}.
struct InputPosition {
  int64_t input = 0;
  uint64_t offset = 0;
  int64_t line = 1;
  bool operator==(const InputPosition &other) const {
    return input == other.input && offset == other.offset &&
           line == other.line;
  }
};

/// Checks `paths` before anything is written (each exists, is a regular
/// file that can be read, and does not start like a binary file) and
/// returns what the state file records of them.
llvm::Expected<std::vector<InputFile>>
checkInputs(llvm::ArrayRef<std::string> paths, InputKind kind);

/// A slice of one input handed to a worker: whole lines (Lines, Jsonl) or a
/// piece of a Text document cut at a word boundary.
struct Batch {
  int64_t sequence = 0;
  int64_t input = 0;
  InputKind kind = InputKind::Text;
  std::shared_ptr<llvm::MemoryBuffer> buffer; // keeps `text` mapped
  llvm::StringRef text;
  /// Where `text` starts in its input.
  InputPosition start;
  /// Text pieces: whether this piece starts or ends its document.
  bool documentStart = true, documentEnd = true;
  /// A reader error met at this point of the inputs (reported in order).
  std::optional<std::string> error;
};

/// One document (or, for Text pieces, one piece of it) of an encoded batch.
struct EncodedDocument {
  int64_t tokens = 0;
  /// Whether the document ends in this batch.
  bool complete = true;
  /// An empty document, skipped (no tokens): counted where it is, so that
  /// each shard's count does not depend on where batches were cut.
  bool empty = false;
  /// The input position right after the document.
  InputPosition after;
};

struct EncodedBatch {
  int64_t sequence = 0;
  std::vector<int32_t> tokens;           // the documents' tokens, back to back
  std::vector<EncodedDocument> documents;
  int64_t bytes = 0;                     // input bytes of the batch
  std::optional<std::string> error;      // "file:line: what is wrong"
};

/// Cuts the inputs into batches of about `targetBytes` from `start` on.
class BatchCutter {
public:
  BatchCutter(const std::vector<InputFile> &inputs, InputPosition start,
              int64_t targetBytes);
  /// The next batch; false at the end of the inputs.
  bool next(Batch &batch);

private:
  const std::vector<InputFile> &inputs;
  InputPosition position;
  int64_t targetBytes;
  int64_t sequence = 0;
  std::shared_ptr<llvm::MemoryBuffer> buffer; // of inputs[position.input]
};

/// Where a Text document may be cut into pieces that encode, each alone, to
/// exactly the tokens of the whole: the first position at or after `from`
/// where a space follows an ASCII character that is not whitespace and
/// precedes an ASCII letter. No word of GPT-2's pre-tokenizer (nor a byte
/// tokenizer's token, nor "<|endoftext|>") spans such a point. npos if none.
size_t findTextCut(llvm::StringRef text, size_t from);

/// Encodes `batch` with `tokenizer`: each document preceded by the
/// end-of-text token when there is one; empty documents skipped.
/// `field` is the JSONL field. Never fails: errors go to out.error.
void encodeBatch(const Batch &batch, const InputFile &input,
                 const Tokenizer &tokenizer, llvm::StringRef field,
                 EncodedBatch &out);

} // namespace llmc::data

#endif // LLMC_TRAINING_DATA_PREPAREINPUT_H

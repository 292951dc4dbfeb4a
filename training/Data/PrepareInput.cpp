// `llmc data prepare`'s input side: checking inputs, cutting them into
// batches of documents, encoding a batch.
#include "training/Data/PrepareInput.h"

#include "frontend/Tokenizer.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"
#include "llvm/Support/Path.h"

#include <cstring>

using namespace llmc::data;

llvm::StringRef llmc::data::inputKindName(InputKind kind) {
  switch (kind) {
  case InputKind::Auto:
    return "auto";
  case InputKind::Text:
    return "text";
  case InputKind::Lines:
    return "lines";
  case InputKind::Jsonl:
    return "jsonl";
  }
  return "auto";
}

std::optional<InputKind> llmc::data::parseInputKind(llvm::StringRef name) {
  for (InputKind kind : {InputKind::Auto, InputKind::Text, InputKind::Lines,
                         InputKind::Jsonl})
    if (name == inputKindName(kind))
      return kind;
  return std::nullopt;
}

InputKind llmc::data::resolveInputKind(InputKind kind, llvm::StringRef path) {
  if (kind != InputKind::Auto)
    return kind;
  llvm::StringRef extension = llvm::sys::path::extension(path);
  if (extension.equals_insensitive(".jsonl") ||
      extension.equals_insensitive(".json"))
    return InputKind::Jsonl;
  return InputKind::Text;
}

/// The bytes a binary-file check looks at before the run starts; a NUL
/// byte further in is found when its batch is read.
static constexpr size_t kSniffBytes = 64 * 1024;

static llvm::Error binaryError(llvm::StringRef name, uint64_t offset) {
  return llvm::createStringError(llvm::formatv(
      "{0}: a NUL byte at offset {1}: this is a binary file, not text "
      "(llmc data prepare reads text, one-document-a-line text and JSONL; "
      "token files train as they are)",
      name, offset));
}

llvm::Expected<std::vector<InputFile>>
llmc::data::checkInputs(llvm::ArrayRef<std::string> paths, InputKind kind) {
  if (paths.empty())
    return llvm::createStringError("no input files given");
  std::vector<InputFile> inputs;
  for (const std::string &name : paths) {
    llvm::sys::fs::file_status status;
    if (std::error_code ec = llvm::sys::fs::status(name, status))
      return llvm::createStringError(ec, "%s: %s", name.c_str(),
                                     ec.message().c_str());
    if (!llvm::sys::fs::is_regular_file(status))
      return llvm::createStringError(
          "%s: not a regular file (a directory?); name the files to prepare",
          name.c_str());
    InputFile input;
    input.name = name;
    llvm::SmallString<256> absolute(name);
    llvm::sys::fs::make_absolute(absolute);
    llvm::sys::path::remove_dots(absolute, /*remove_dot_dot=*/true);
    input.path = absolute.str().str();
    input.kind = resolveInputKind(kind, name);
    input.size = status.getSize();
    input.mtimeNs = std::chrono::duration_cast<std::chrono::nanoseconds>(
                        status.getLastModificationTime().time_since_epoch())
                        .count();
    auto head = llvm::MemoryBuffer::getFileSlice(
        name, std::min<uint64_t>(input.size, kSniffBytes), 0);
    if (!head)
      return llvm::createStringError(head.getError(), "%s: %s", name.c_str(),
                                     head.getError().message().c_str());
    llvm::StringRef bytes = (*head)->getBuffer();
    size_t nul = bytes.find('\0');
    if (nul != llvm::StringRef::npos)
      return binaryError(name, nul);
    inputs.push_back(std::move(input));
  }
  return inputs;
}

//===----------------------------------------------------------------------===//
// Cutting
//===----------------------------------------------------------------------===//

static bool isAsciiSpace(char c) {
  return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\v' ||
         c == '\f';
}

size_t llmc::data::findTextCut(llvm::StringRef text, size_t from) {
  for (size_t p = std::max<size_t>(from, 1); p + 1 < text.size(); ++p) {
    p = text.find(' ', p);
    if (p == llvm::StringRef::npos || p + 1 >= text.size())
      return llvm::StringRef::npos;
    unsigned char before = text[p - 1];
    if (before < 0x80 && !isAsciiSpace(before) && llvm::isAlpha(text[p + 1]))
      return p;
  }
  return llvm::StringRef::npos;
}

BatchCutter::BatchCutter(const std::vector<InputFile> &inputs,
                         InputPosition start, int64_t targetBytes)
    : inputs(inputs), position(start), targetBytes(targetBytes) {}

bool BatchCutter::next(Batch &batch) {
  while (position.input < static_cast<int64_t>(inputs.size())) {
    const InputFile &input = inputs[position.input];
    batch = Batch();
    batch.sequence = sequence;
    batch.input = position.input;
    batch.kind = input.kind;
    batch.start = position;
    if (!buffer) {
      auto mapped = llvm::MemoryBuffer::getFile(
          input.name, /*IsText=*/false, /*RequiresNullTerminator=*/false);
      if (!mapped) {
        batch.error = input.name + ": " + mapped.getError().message();
        position = {static_cast<int64_t>(inputs.size()), 0, 1};
        ++sequence;
        return true;
      }
      buffer = std::move(*mapped);
    }
    llvm::StringRef all = buffer->getBuffer();
    if (position.offset >= all.size() && !(all.empty() && position.offset == 0 &&
                                           input.kind == InputKind::Text)) {
      // This input is done (an empty Text file still yields its one, empty,
      // document so that it is counted).
      buffer.reset();
      position = {position.input + 1, 0, 1};
      continue;
    }
    llvm::StringRef rest = all.drop_front(position.offset);
    size_t cut = rest.size();
    if (static_cast<int64_t>(rest.size()) > targetBytes) {
      if (input.kind == InputKind::Text) {
        cut = findTextCut(rest, targetBytes);
      } else {
        cut = rest.find('\n', targetBytes);
        if (cut != llvm::StringRef::npos)
          ++cut;
      }
      if (cut == llvm::StringRef::npos)
        cut = rest.size();
    }
    batch.buffer = buffer;
    batch.text = rest.take_front(cut);
    batch.documentStart = position.offset == 0;
    batch.documentEnd = cut == rest.size();
    ++sequence;
    if (cut == rest.size()) {
      buffer.reset();
      position = {position.input + 1, 0, 1};
    } else {
      position.offset += cut;
      position.line += batch.text.count('\n');
    }
    return true;
  }
  return false;
}

//===----------------------------------------------------------------------===//
// Encoding
//===----------------------------------------------------------------------===//

static const char *jsonKindName(const llvm::json::Value &value) {
  switch (value.kind()) {
  case llvm::json::Value::Null:
    return "null";
  case llvm::json::Value::Boolean:
    return "a boolean";
  case llvm::json::Value::Number:
    return "a number";
  case llvm::json::Value::String:
    return "a string";
  case llvm::json::Value::Array:
    return "an array";
  case llvm::json::Value::Object:
    return "an object";
  }
  return "a value";
}

/// The document text of JSONL line `line` (number `lineNumber`) of `name`,
/// or an error naming the line; nullopt for a blank line.
static llvm::Expected<std::optional<std::string>>
jsonlDocument(llvm::StringRef line, llvm::StringRef name, int64_t lineNumber,
              llvm::StringRef field) {
  if (line.trim().empty())
    return std::nullopt;
  auto where = [&] { return llvm::formatv("{0}:{1}: ", name, lineNumber).str(); };
  llvm::Expected<llvm::json::Value> value = llvm::json::parse(line);
  if (!value)
    return llvm::createStringError(where() + "not a JSON value (" +
                                   llvm::toString(value.takeError()) +
                                   "); each line of a JSONL file is one object");
  const llvm::json::Object *object = value->getAsObject();
  if (!object)
    return llvm::createStringError(where() + "expected a JSON object, got " +
                                   jsonKindName(*value));
  const llvm::json::Value *text = object->get(field);
  if (!text)
    return llvm::createStringError(
        where() + "no field '" + field +
        "' (the document's text; --field names another)");
  std::optional<llvm::StringRef> string = text->getAsString();
  if (!string)
    return llvm::createStringError(where() + "field '" + field + "' is " +
                                   jsonKindName(*text) + ", not a string");
  return std::optional<std::string>(string->str());
}

/// Appends one document: the end-of-text token, then `text`'s tokens.
static void appendDocument(llvm::StringRef text, bool withEndOfText,
                           const Tokenizer &tokenizer, EncodedBatch &out,
                           EncodedDocument document) {
  size_t before = out.tokens.size();
  if (withEndOfText)
    if (std::optional<int32_t> eot = tokenizer.endOfTextId())
      out.tokens.push_back(*eot);
  std::vector<int32_t> ids = tokenizer.encode(text);
  out.tokens.insert(out.tokens.end(), ids.begin(), ids.end());
  document.tokens = static_cast<int64_t>(out.tokens.size() - before);
  out.documents.push_back(document);
}

static void encodeLines(const Batch &batch, const InputFile &input,
                        const Tokenizer &tokenizer, llvm::StringRef field,
                        EncodedBatch &out) {
  InputPosition position = batch.start;
  for (llvm::StringRef rest = batch.text; !rest.empty();) {
    size_t end = rest.find('\n');
    llvm::StringRef line =
        end == llvm::StringRef::npos ? rest : rest.take_front(end);
    size_t consumed = end == llvm::StringRef::npos ? rest.size() : end + 1;
    rest = rest.drop_front(consumed);
    int64_t lineNumber = position.line;
    position.offset += consumed;
    if (end != llvm::StringRef::npos)
      ++position.line;
    line.consume_back("\r");
    EncodedDocument document;
    document.after = position;
    EncodedDocument empty = document;
    empty.empty = true;
    if (input.kind == InputKind::Lines) {
      if (line.empty()) {
        out.documents.push_back(empty);
        continue;
      }
      appendDocument(line, true, tokenizer, out, document);
      continue;
    }
    auto text = jsonlDocument(line, input.name, lineNumber, field);
    if (!text) {
      out.error = llvm::toString(text.takeError());
      return;
    }
    if (!*text)
      continue; // a blank line
    if ((*text)->empty()) {
      out.documents.push_back(empty);
      continue;
    }
    appendDocument(**text, true, tokenizer, out, document);
  }
}

void llmc::data::encodeBatch(const Batch &batch, const InputFile &input,
                             const Tokenizer &tokenizer, llvm::StringRef field,
                             EncodedBatch &out) {
  out = EncodedBatch();
  out.sequence = batch.sequence;
  out.bytes = static_cast<int64_t>(batch.text.size());
  if (batch.error) {
    out.error = batch.error;
    return;
  }
  size_t nul = batch.text.find('\0');
  if (nul != llvm::StringRef::npos) {
    out.error = llvm::toString(binaryError(input.name, batch.start.offset + nul));
    return;
  }
  if (batch.kind != InputKind::Text) {
    encodeLines(batch, input, tokenizer, field, out);
    return;
  }
  EncodedDocument piece;
  piece.complete = batch.documentEnd;
  piece.after = batch.start;
  piece.after.offset += batch.text.size();
  piece.after.line += batch.text.count('\n');
  if (batch.documentStart && batch.documentEnd && batch.text.empty()) {
    piece.empty = true; // an empty file
    out.documents.push_back(piece);
    return;
  }
  appendDocument(batch.text, batch.documentStart, tokenizer, out, piece);
}

// `llmc data prepare`'s state file: the run's identity, its finished shards.
#include "training/Data/PrepareState.h"

#include "frontend/Tokenizer.h"
#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/xxhash.h"

using namespace llmc::data;

/// The state file's format version.
static constexpr int64_t kStateVersion = 1;

static llvm::StringRef formatKey(TokenFormat format) {
  return format == TokenFormat::LlmcShard ? "llmc-shard" : "llmc";
}

llvm::json::Object
llmc::data::runIdentity(const PrepareOptions &options,
                        const Tokenizer &tokenizer,
                        const std::vector<InputFile> &inputs) {
  // The bytes of every token: a vocabulary that changed under the same
  // directory name changes this (its merges follow from its tokens in
  // practice; a reordered merges.txt alone is not caught).
  std::string bytes;
  for (int32_t id = 0; id < tokenizer.vocabSize(); ++id) {
    std::string token = tokenizer.decodeToken(id);
    bytes += std::to_string(token.size());
    bytes += ':';
    bytes += token;
  }
  std::optional<int32_t> eot = tokenizer.endOfTextId();
  // A BPE directory by its absolute path: a rerun from another directory,
  // or spelled "bpe/" instead of "bpe", is the same run.
  std::string spec = options.tokenizerSpec;
  if (spec != "byte") {
    llvm::SmallString<256> absolute(spec);
    llvm::sys::fs::make_absolute(absolute);
    llvm::sys::path::remove_dots(absolute, /*remove_dot_dot=*/true);
    spec = llvm::StringRef(absolute).rtrim("/").str();
  }
  llvm::json::Array inputArray;
  for (const InputFile &input : inputs)
    inputArray.push_back(llvm::json::Object{
        {"path", input.path},
        {"kind", inputKindName(input.kind)},
        {"size", static_cast<int64_t>(input.size)},
        {"mtime_ns", input.mtimeNs}});
  return llvm::json::Object{
      {"format", formatKey(options.format)},
      {"shard_tokens", options.shardTokens},
      {"prefix", options.prefix},
      // The field matters only when an input is JSONL.
      {"field", llvm::any_of(inputs,
                             [](const InputFile &input) {
                               return input.kind == InputKind::Jsonl;
                             })
                    ? llvm::json::Value(options.field)
                    : llvm::json::Value(nullptr)},
      {"tokenizer",
       llvm::json::Object{
           {"spec", spec},
           {"vocab_size", tokenizer.vocabSize()},
           {"end_of_text", eot ? llvm::json::Value(*eot) : nullptr},
           {"tokens_xxh3",
            llvm::formatv("{0:x16}", llvm::xxh3_64bits(bytes)).str()}}},
      {"inputs", std::move(inputArray)}};
}

static std::string show(const llvm::json::Value *value) {
  if (!value)
    return "absent";
  std::string text;
  llvm::raw_string_ostream os(text);
  os << *value;
  if (text.size() > 200)
    text = text.substr(0, 200) + "...";
  return text;
}

/// The first difference between two JSON values at `where`.
static std::string difference(const llvm::json::Value *stored,
                              const llvm::json::Value *current,
                              const std::string &where) {
  if (stored && current && *stored == *current)
    return "";
  const llvm::json::Object *a = stored ? stored->getAsObject() : nullptr;
  const llvm::json::Object *b = current ? current->getAsObject() : nullptr;
  if (a && b) {
    // In key order: a json::Object's own order is a hash's.
    std::vector<std::string> keys;
    for (const auto &entry : *b)
      keys.push_back(entry.first.str());
    llvm::sort(keys);
    for (const std::string &key : keys) {
      std::string d = difference(a->get(key), b->get(key), where + "." + key);
      if (!d.empty())
        return d;
    }
    for (const auto &[key, value] : *a)
      if (!b->get(key))
        return where + "." + key.str() + " was " + show(&value) + ", now absent";
  }
  const llvm::json::Array *x = stored ? stored->getAsArray() : nullptr;
  const llvm::json::Array *y = current ? current->getAsArray() : nullptr;
  if (x && y && x->size() == y->size())
    for (size_t i = 0; i < x->size(); ++i) {
      std::string d = difference(&(*x)[i], &(*y)[i],
                                 where + "[" + std::to_string(i) + "]");
      if (!d.empty())
        return d;
    }
  return where + " was " + show(stored) + ", now " + show(current);
}

std::string
llmc::data::identityDifference(const llvm::json::Object &stored,
                               const llvm::json::Object &current) {
  llvm::json::Value a = llvm::json::Object(stored);
  llvm::json::Value b = llvm::json::Object(current);
  std::string d = difference(&a, &b, "run");
  return d.empty() ? d : d.substr(4); // drop "run."
}

llvm::json::Value llmc::data::stateToJson(const PrepareState &state) {
  llvm::json::Array shards;
  for (const ShardRecord &shard : state.shards)
    shards.push_back(llvm::json::Object{
        {"file", shard.file},
        {"tokens", shard.tokens},
        {"documents", shard.documents},
        {"empty_documents", shard.emptyDocuments},
        {"next",
         llvm::json::Object{{"input", shard.next.input},
                            {"offset", static_cast<int64_t>(shard.next.offset)},
                            {"line", shard.next.line}}}});
  return llvm::json::Object{{"llmc_data_prepare", kStateVersion},
                            {"run", llvm::json::Object(state.identity)},
                            {"shards", std::move(shards)},
                            {"complete", state.complete}};
}

llvm::Expected<PrepareState> llmc::data::readState(llvm::StringRef path) {
  auto buffer = llvm::MemoryBuffer::getFile(path);
  if (!buffer)
    return llvm::createStringError(buffer.getError(), "%s: %s",
                                   path.str().c_str(),
                                   buffer.getError().message().c_str());
  auto bad = [&](const llvm::Twine &what) {
    return llvm::createStringError(
        path + ": " + what +
        " (a damaged state file: rerun with --overwrite to start over)");
  };
  llvm::Expected<llvm::json::Value> json =
      llvm::json::parse((*buffer)->getBuffer());
  if (!json)
    return bad("not JSON: " + llvm::toString(json.takeError()));
  const llvm::json::Object *root = json->getAsObject();
  if (!root || root->getInteger("llmc_data_prepare") != kStateVersion)
    return bad(llvm::formatv("not a version {0} state file of llmc data "
                             "prepare",
                             kStateVersion)
                   .str());
  PrepareState state;
  const llvm::json::Object *identity = root->getObject("run");
  const llvm::json::Array *shards = root->getArray("shards");
  std::optional<bool> complete = root->getBoolean("complete");
  if (!identity || !shards || !complete)
    return bad("expected the fields run, shards and complete");
  state.identity = *identity;
  state.complete = *complete;
  for (size_t i = 0; i < shards->size(); ++i) {
    const llvm::json::Object *shard = (*shards)[i].getAsObject();
    const llvm::json::Object *next = shard ? shard->getObject("next") : nullptr;
    ShardRecord record;
    std::optional<llvm::StringRef> file = shard ? shard->getString("file") : std::nullopt;
    std::optional<int64_t> tokens, documents, empty, input, offset, line;
    if (shard) {
      tokens = shard->getInteger("tokens");
      documents = shard->getInteger("documents");
      empty = shard->getInteger("empty_documents");
    }
    if (next) {
      input = next->getInteger("input");
      offset = next->getInteger("offset");
      line = next->getInteger("line");
    }
    if (!file || !tokens || !documents || !empty || !input || !offset ||
        !line || *tokens < 0 || *documents < 0 || *offset < 0)
      return bad(llvm::formatv("shards[{0}]: expected file, tokens, documents, "
                               "empty_documents and next {{input, offset, line}",
                               i)
                     .str());
    record.file = file->str();
    record.tokens = *tokens;
    record.documents = *documents;
    record.emptyDocuments = *empty;
    record.next = {*input, static_cast<uint64_t>(*offset), *line};
    state.shards.push_back(std::move(record));
  }
  return state;
}

llvm::Error llmc::data::writeState(llvm::StringRef path,
                                   const PrepareState &state) {
  return kir::writeFileAtomically(path, [&](llvm::raw_ostream &os) {
    os << llvm::formatv("{0:2}", stateToJson(state)) << "\n";
    return llvm::Error::success();
  });
}

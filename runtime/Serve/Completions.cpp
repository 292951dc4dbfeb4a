// The completions API's JSON and text, with nlohmann-json. The project
// builds without exceptions, so nlohmann's throwing calls would abort:
// every body is parsed with allow_exceptions = false, every field's type is
// checked before it is read, and output is dumped with invalid UTF-8
// replaced (U+FFFD) instead of refused.
#include "runtime/Serve/Completions.h"

#include "llvm/Support/FormatVariadic.h"

#include <nlohmann/json.hpp>

#include <cmath>
#include <limits>
#include <random>

using namespace llmc;
using namespace llmc::serve;
using json = nlohmann::ordered_json; // fields in the order OpenAI writes them

char ApiError::ID = 0;

void ApiError::log(llvm::raw_ostream &os) const {
  os << status << " " << type << ": " << message;
}

std::error_code ApiError::convertToErrorCode() const {
  return llvm::inconvertibleErrorCode();
}

llvm::Error llmc::serve::invalidRequest(const llvm::Twine &message) {
  return llvm::make_error<ApiError>(400, "invalid_request_error",
                                    message.str());
}

namespace {
std::string dump(const json &value) {
  return value.dump(-1, ' ', false, json::error_handler_t::replace);
}

const char *typeName(const json &value) {
  if (value.is_object())
    return "an object";
  if (value.is_array())
    return "an array";
  if (value.is_string())
    return "a string";
  if (value.is_boolean())
    return "a boolean";
  if (value.is_number_integer())
    return "an integer";
  if (value.is_number())
    return "a number";
  return "null";
}

llvm::Error wrongType(llvm::StringRef field, llvm::StringRef expected,
                      const json &value) {
  return invalidRequest(llvm::formatv("'{0}' must be {1}, got {2}", field,
                                      expected, typeName(value)));
}

/// An integer field >= 0 (values past int64 saturate: they are refused as
/// too large by whoever checks the range).
llvm::Expected<int64_t> readCount(llvm::StringRef field, const json &value) {
  if (value.is_number_unsigned()) {
    uint64_t v = value.get<uint64_t>();
    return int64_t(std::min<uint64_t>(v, std::numeric_limits<int64_t>::max()));
  }
  if (!value.is_number_integer())
    return wrongType(field, "an integer", value);
  int64_t v = value.get<int64_t>();
  if (v < 0)
    return invalidRequest(
        llvm::formatv("'{0}' must be >= 0, got {1}", field, v));
  return v;
}
} // namespace

llvm::Expected<CompletionParams>
llmc::serve::parseCompletionRequest(llvm::StringRef body) {
  // JSON escapes its control characters: one raw in the body is binary.
  for (size_t i = 0; i < body.size(); ++i) {
    unsigned char c = body[i];
    if ((c < 0x20 && c != '\t' && c != '\n' && c != '\r') || c == 0x7f)
      return invalidRequest(
          llvm::formatv("the body is not text: byte {0} is the control "
                        "character 0x{1:x-2}; a request is a JSON object",
                        i, unsigned(c)));
  }
  json doc = json::parse(body.begin(), body.end(), nullptr,
                         /*allow_exceptions=*/false);
  if (doc.is_discarded())
    return invalidRequest("the body is not valid JSON");
  if (!doc.is_object())
    return invalidRequest(llvm::formatv(
        "the body must be a JSON object, got {0}", typeName(doc)));
  CompletionParams params;
  auto field = [&](const char *name) -> const json * {
    auto it = doc.find(name);
    return it == doc.end() || it->is_null() ? nullptr : &*it;
  };
  const json *prompt = field("prompt");
  if (!prompt)
    return invalidRequest("'prompt' is required");
  if (!prompt->is_string())
    return wrongType("prompt", "a string", *prompt);
  params.prompt = prompt->get<std::string>();
  if (const json *value = field("max_tokens")) {
    llvm::Expected<int64_t> count = readCount("max_tokens", *value);
    if (!count)
      return count.takeError();
    params.maxTokens = *count;
  }
  if (const json *value = field("temperature")) {
    if (!value->is_number())
      return wrongType("temperature", "a number", *value);
    params.temperature = value->get<double>();
    if (!std::isfinite(params.temperature) || params.temperature < 0)
      return invalidRequest("'temperature' must be >= 0, got " +
                            dump(*value));
  }
  if (const json *value = field("top_k")) {
    llvm::Expected<int64_t> count = readCount("top_k", *value);
    if (!count)
      return count.takeError();
    params.topK = *count;
  }
  if (const json *value = field("seed")) {
    if (value->is_number_unsigned())
      params.seed = value->get<uint64_t>();
    else if (value->is_number_integer())
      return invalidRequest(llvm::formatv("'seed' must be >= 0, got {0}",
                                          value->get<int64_t>()));
    else
      return wrongType("seed", "an integer", *value);
  }
  if (const json *value = field("stream")) {
    if (!value->is_boolean())
      return wrongType("stream", "a boolean", *value);
    params.stream = value->get<bool>();
  }
  if (const json *value = field("stop")) {
    std::vector<const json *> items;
    if (value->is_string())
      items.push_back(value);
    else if (value->is_array())
      for (const json &item : *value)
        items.push_back(&item);
    else
      return wrongType("stop", "a string or an array of strings", *value);
    if (items.size() > 4)
      return invalidRequest(llvm::formatv(
          "'stop' holds at most 4 strings, got {0}", items.size()));
    for (const json *item : items) {
      if (!item->is_string())
        return wrongType("stop", "a string or an array of strings", *item);
      std::string text = item->get<std::string>();
      if (text.empty())
        return invalidRequest("'stop' strings must not be empty");
      params.stop.push_back(std::move(text));
    }
  }
  if (const json *value = field("n"))
    if (!value->is_number_integer() || value->get<int64_t>() != 1)
      return invalidRequest("'n' must be 1: one completion per request");
  return params;
}

llvm::Expected<GenerationRequest>
llmc::serve::makeGenerationRequest(const CompletionParams &params,
                                   const TextCodec &tokenizer,
                                   int64_t maxContext) {
  GenerationRequest request;
  if (params.maxTokens > maxContext - 1)
    return invalidRequest(llvm::formatv(
        "'max_tokens' is {0}; the limit is {1} (the context of {2} tokens "
        "less one prompt token)",
        params.maxTokens, maxContext - 1, maxContext));
  request.prompt = tokenizer.encode(params.prompt);
  if (request.prompt.empty())
    request.prompt = tokenizer.encode("\n"); // one token to start from
  if (int64_t(request.prompt.size()) + params.maxTokens > maxContext)
    return invalidRequest(llvm::formatv(
        "the prompt's {0} tokens plus max_tokens {1} exceed the context of "
        "{2} tokens",
        request.prompt.size(), params.maxTokens, maxContext));
  request.maxTokens = params.maxTokens;
  request.sampling.temperature = params.temperature;
  request.sampling.topK = params.topK;
  if (params.seed) {
    request.sampling.seed = *params.seed;
  } else {
    std::random_device device;
    request.sampling.seed = (uint64_t(device()) << 32) | device();
  }
  request.endToken = tokenizer.endOfTextId();
  return request;
}

CompletionText::CompletionText(const TextCodec &tokenizer,
                               std::vector<std::string> stops)
    : tokenizer(tokenizer), stops(std::move(stops)) {}

std::string CompletionText::add(int32_t token) {
  if (hit)
    return "";
  pending += tokenizer.decodeToken(token);
  // A stop string can only start in `pending`: what was released could
  // not begin one.
  size_t first = std::string::npos;
  for (const std::string &stop : stops)
    first = std::min(first, pending.find(stop));
  if (first != std::string::npos) {
    hit = true;
    std::string text = pending.substr(0, first);
    pending.clear();
    return text;
  }
  // Hold back the longest end of `pending` that begins a stop string.
  size_t hold = 0;
  for (const std::string &stop : stops)
    for (size_t n = std::min(stop.size() - 1, pending.size()); n > hold; --n)
      if (llvm::StringRef(pending).ends_with(llvm::StringRef(stop).take_front(n))) {
        hold = n;
        break;
      }
  size_t release = pending.size() - hold;
  // And a UTF-8 sequence the next token may complete: look back from the
  // end for its lead byte (at most 3 bytes back).
  for (size_t back = 1; back <= 3 && back <= release; ++back) {
    unsigned char byte = pending[release - back];
    if ((byte & 0xC0) == 0x80)
      continue; // a continuation byte
    size_t length = byte >= 0xF0 ? 4 : byte >= 0xE0 ? 3 : byte >= 0xC0 ? 2 : 1;
    if (length > back)
      release -= back; // incomplete: wait for the rest
    break;
  }
  std::string text = pending.substr(0, release);
  pending.erase(0, release);
  return text;
}

std::string CompletionText::finish() {
  std::string text = std::move(pending);
  pending.clear();
  return text;
}

const char *llmc::serve::finishReasonName(FinishReason reason) {
  return reason == FinishReason::Stop ? "stop" : "length";
}

namespace {
json usageJson(Usage usage) {
  return {{"prompt_tokens", usage.promptTokens},
          {"completion_tokens", usage.completionTokens},
          {"total_tokens", usage.promptTokens + usage.completionTokens}};
}

json completionObject(const CompletionId &id, llvm::StringRef text,
                      std::optional<FinishReason> reason) {
  json choice = {{"text", text.str()},
                 {"index", 0},
                 {"logprobs", nullptr},
                 {"finish_reason", nullptr}};
  if (reason)
    choice["finish_reason"] = finishReasonName(*reason);
  return {{"id", id.id},
          {"object", "text_completion"},
          {"created", id.created},
          {"model", id.model},
          {"choices", json::array({choice})}};
}
} // namespace

std::string llmc::serve::completionJson(const CompletionId &id,
                                        llvm::StringRef text,
                                        FinishReason reason, Usage usage) {
  json object = completionObject(id, text, reason);
  object["usage"] = usageJson(usage);
  return dump(object);
}

std::string llmc::serve::chunkEvent(const CompletionId &id,
                                    llvm::StringRef text,
                                    std::optional<FinishReason> reason,
                                    std::optional<Usage> usage) {
  json object = completionObject(id, text, reason);
  if (usage)
    object["usage"] = usageJson(*usage);
  return "data: " + dump(object) + "\n\n";
}

std::string llmc::serve::errorJson(llvm::StringRef type,
                                   llvm::StringRef message) {
  return dump({{"error", {{"message", message.str()}, {"type", type.str()}}}});
}

std::string llmc::serve::modelsJson(llvm::StringRef model, int64_t created) {
  return dump({{"object", "list"},
               {"data", json::array({{{"id", model.str()},
                                      {"object", "model"},
                                      {"created", created},
                                      {"owned_by", "llmc"}}})}});
}

std::string llmc::serve::healthJson(llvm::StringRef model,
                                    const SchedulerStats &stats) {
  double occupancy =
      stats.decodeSteps ? double(stats.decodeRows) /
                              double(stats.decodeSteps * stats.batch)
                        : 0.0;
  return dump(
      {{"status", "ok"},
       {"model", model.str()},
       {"batch", stats.batch},
       {"max_context", stats.maxContext},
       {"active", stats.active},
       {"queued", stats.queued},
       {"max_active", stats.maxActive},
       {"requests",
        {{"completed", stats.completed},
         {"cancelled", stats.cancelled},
         {"failed", stats.failed},
         {"rejected", stats.rejected}}},
       {"tokens",
        {{"prompt", stats.promptTokens}, {"generated", stats.generatedTokens}}},
       {"steps",
        {{"prefill_passes", stats.prefillPasses},
         {"prefill", stats.prefillSteps},
         {"decode", stats.decodeSteps},
         {"decode_rows", stats.decodeRows}}},
       {"occupancy", occupancy}});
}

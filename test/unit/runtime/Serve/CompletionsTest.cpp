// The completions API without sockets: request parsing and its errors,
// prompt limits, stop strings and UTF-8 across tokens, response JSON.
#include "runtime/Serve/Completions.h"
#include "tools/common/TokenizerCodec.h"

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

using namespace llmc;
using namespace llmc::serve;
using json = nlohmann::json;

namespace {

/// The ApiError of `error` as "STATUS TYPE: MESSAGE".
std::string describe(llvm::Error error) {
  std::string text;
  llvm::handleAllErrors(std::move(error), [&](const ApiError &api) {
    text = std::to_string(api.status) + " " + api.type + ": " + api.message;
  });
  return text;
}

std::string parseError(llvm::StringRef body) {
  llvm::Expected<CompletionParams> params = parseCompletionRequest(body);
  if (params)
    return "parsed";
  return describe(params.takeError());
}

json parse(llvm::StringRef text) {
  return json::parse(text.begin(), text.end(), nullptr, false);
}

TEST(Completions, ParsesEveryField) {
  llvm::Expected<CompletionParams> params = parseCompletionRequest(
      R"({"prompt": "Hi", "max_tokens": 5, "temperature": 0.5, "top_k": 3,
          "seed": 18446744073709551615, "stream": true, "stop": ["a", "bc"],
          "model": "ignored", "n": 1})");
  ASSERT_TRUE(bool(params)) << llvm::toString(params.takeError());
  EXPECT_EQ(params->prompt, "Hi");
  EXPECT_EQ(params->maxTokens, 5);
  EXPECT_EQ(params->temperature, 0.5);
  EXPECT_EQ(params->topK, 3);
  EXPECT_EQ(params->seed, std::optional<uint64_t>(~uint64_t(0)));
  EXPECT_TRUE(params->stream);
  EXPECT_EQ(params->stop, (std::vector<std::string>{"a", "bc"}));

  llvm::Expected<CompletionParams> defaults =
      parseCompletionRequest(R"({"prompt": "", "stop": null, "seed": null})");
  ASSERT_TRUE(bool(defaults));
  EXPECT_EQ(defaults->maxTokens, 16);
  EXPECT_EQ(defaults->temperature, 1.0);
  EXPECT_FALSE(defaults->seed);
  EXPECT_FALSE(defaults->stream);
  EXPECT_TRUE(defaults->stop.empty());
  EXPECT_EQ(parseCompletionRequest(R"({"prompt": "x", "stop": "END"})")->stop,
            std::vector<std::string>{"END"});
}

TEST(Completions, RefusesBadBodies) {
  EXPECT_EQ(parseError(R"({"prompt": )"),
            "400 invalid_request_error: the body is not valid JSON");
  EXPECT_EQ(parseError("[1]"), "400 invalid_request_error: the body must be "
                               "a JSON object, got an array");
  EXPECT_EQ(parseError("{}"), "400 invalid_request_error: 'prompt' is required");
  EXPECT_EQ(parseError(R"({"prompt": ["a"]})"),
            "400 invalid_request_error: 'prompt' must be a string, got an "
            "array");
  EXPECT_EQ(parseError(R"({"prompt": "a", "max_tokens": "3"})"),
            "400 invalid_request_error: 'max_tokens' must be an integer, got "
            "a string");
  EXPECT_EQ(parseError(R"({"prompt": "a", "max_tokens": -2})"),
            "400 invalid_request_error: 'max_tokens' must be >= 0, got -2");
  EXPECT_EQ(parseError(R"({"prompt": "a", "temperature": true})"),
            "400 invalid_request_error: 'temperature' must be a number, got "
            "a boolean");
  EXPECT_EQ(parseError(R"({"prompt": "a", "temperature": -0.1})"),
            "400 invalid_request_error: 'temperature' must be >= 0, got -0.1");
  EXPECT_EQ(parseError(R"({"prompt": "a", "top_k": 2.5})"),
            "400 invalid_request_error: 'top_k' must be an integer, got a "
            "number");
  EXPECT_EQ(parseError(R"({"prompt": "a", "seed": -1})"),
            "400 invalid_request_error: 'seed' must be >= 0, got -1");
  EXPECT_EQ(parseError(R"({"prompt": "a", "stream": 1})"),
            "400 invalid_request_error: 'stream' must be a boolean, got an "
            "integer");
  EXPECT_EQ(parseError(R"({"prompt": "a", "stop": [1]})"),
            "400 invalid_request_error: 'stop' must be a string or an array "
            "of strings, got an integer");
  EXPECT_EQ(parseError(R"({"prompt": "a", "stop": ["a","b","c","d","e"]})"),
            "400 invalid_request_error: 'stop' holds at most 4 strings, got 5");
  EXPECT_EQ(parseError(R"({"prompt": "a", "stop": ""})"),
            "400 invalid_request_error: 'stop' strings must not be empty");
  EXPECT_EQ(parseError(R"({"prompt": "a", "n": 2})"),
            "400 invalid_request_error: 'n' must be 1: one completion per "
            "request");
  EXPECT_EQ(parseError("{\"prompt\": \"\xff\"}"),
            "400 invalid_request_error: the body is not valid JSON");
  // Binary data is named as such, not as whatever JSON error it makes.
  EXPECT_EQ(parseError(std::string("{\"prompt\": \"a\0b\"}", 17)),
            "400 invalid_request_error: the body is not text: byte 13 is the "
            "control character 0x00; a request is a JSON object");
  // Deep nesting is refused or parsed, never a crash.
  std::string deep = R"({"prompt": "a", "x": )" + std::string(100000, '[') +
                     std::string(100000, ']') + "}";
  EXPECT_EQ(parseError(deep), "parsed");
}

TEST(Completions, FitsTheContext) {
  data::ByteTokenizer byteTokenizer;
  TokenizerCodec bytes(byteTokenizer);
  CompletionParams params;
  params.prompt = "abcd";
  params.maxTokens = 12;
  params.seed = 9;
  params.temperature = 0.7;
  llvm::Expected<GenerationRequest> request =
      makeGenerationRequest(params, bytes, 16);
  ASSERT_TRUE(bool(request));
  EXPECT_EQ(request->prompt, (std::vector<int32_t>{'a', 'b', 'c', 'd'}));
  EXPECT_EQ(request->maxTokens, 12);
  EXPECT_EQ(request->sampling.seed, 9u);
  EXPECT_EQ(request->sampling.temperature, 0.7);
  EXPECT_FALSE(request->endToken);
  params.maxTokens = 13;
  EXPECT_EQ(describe(makeGenerationRequest(params, bytes, 16).takeError()),
            "400 invalid_request_error: the prompt's 4 tokens plus "
            "max_tokens 13 exceed the context of 16 tokens");
  params.maxTokens = 16;
  EXPECT_EQ(describe(makeGenerationRequest(params, bytes, 16).takeError()),
            "400 invalid_request_error: 'max_tokens' is 16; the limit is 15 "
            "(the context of 16 tokens less one prompt token)");
  params.prompt = "";
  params.maxTokens = 1;
  EXPECT_EQ(makeGenerationRequest(params, bytes, 16)->prompt,
            std::vector<int32_t>{'\n'});
}

/// The pieces CompletionText returns for `text` fed one byte a token.
std::vector<std::string> feed(CompletionText &text, llvm::StringRef bytes) {
  std::vector<std::string> pieces;
  for (unsigned char byte : bytes)
    pieces.push_back(text.add(byte));
  return pieces;
}

TEST(Completions, StopStringsAcrossTokens) {
  data::ByteTokenizer byteTokenizer;
  TokenizerCodec bytes(byteTokenizer);
  CompletionText text(bytes, {"<END>", "zz"});
  // "<E" may begin "<END>": held back; "<Ex" cannot: released.
  EXPECT_EQ(feed(text, "ab<Ex"),
            (std::vector<std::string>{"a", "b", "", "", "<Ex"}));
  EXPECT_FALSE(text.stopped());
  EXPECT_EQ(feed(text, "y<EN"), (std::vector<std::string>{"y", "", "", ""}));
  EXPECT_EQ(text.add('D'), "");
  EXPECT_EQ(text.add('>'), "");
  EXPECT_TRUE(text.stopped());
  EXPECT_EQ(text.add('q'), "");
  EXPECT_EQ(text.finish(), "");
  // Held-back text comes out at the end.
  CompletionText end(bytes, {"zz"});
  EXPECT_EQ(feed(end, "az"), (std::vector<std::string>{"a", ""}));
  EXPECT_EQ(end.finish(), "z");
  // Text before a stop within one token stays.
  CompletionText within(bytes, {"c"});
  EXPECT_EQ(feed(within, "abcd"),
            (std::vector<std::string>{"a", "b", "", ""}));
  EXPECT_TRUE(within.stopped());
}

TEST(Completions, HoldsBackSplitUtf8) {
  data::ByteTokenizer byteTokenizer;
  TokenizerCodec bytes(byteTokenizer);
  CompletionText text(bytes, {});
  // é (C3 A9) and 😀 (F0 9F 98 80), a byte a token.
  EXPECT_EQ(feed(text, "\xC3\xA9x\xF0\x9F\x98\x80"),
            (std::vector<std::string>{"", "\xC3\xA9", "x", "", "", "",
                                      "\xF0\x9F\x98\x80"}));
  EXPECT_EQ(feed(text, "\xE2\x82"), (std::vector<std::string>{"", ""}));
  EXPECT_EQ(text.finish(), "\xE2\x82"); // never completed: out as it is
}

TEST(Completions, ResponseJson) {
  CompletionId id{"cmpl-1", 1700000000, "tiny"};
  json whole = parse(completionJson(id, "Hi \xff", FinishReason::Stop,
                                    Usage{3, 4}));
  ASSERT_FALSE(whole.is_discarded());
  EXPECT_EQ(whole["id"], "cmpl-1");
  EXPECT_EQ(whole["object"], "text_completion");
  EXPECT_EQ(whole["created"], 1700000000);
  EXPECT_EQ(whole["model"], "tiny");
  EXPECT_EQ(whole["choices"][0]["text"], "Hi \xEF\xBF\xBD"); // U+FFFD
  EXPECT_EQ(whole["choices"][0]["index"], 0);
  EXPECT_EQ(whole["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(whole["usage"],
            json({{"prompt_tokens", 3}, {"completion_tokens", 4},
                  {"total_tokens", 7}}));

  std::string event = chunkEvent(id, "a\n");
  ASSERT_TRUE(llvm::StringRef(event).starts_with("data: {"));
  ASSERT_TRUE(llvm::StringRef(event).ends_with("}\n\n"));
  EXPECT_EQ(llvm::StringRef(event).count('\n'), 2u); // one line, one blank
  json chunk = parse(llvm::StringRef(event).drop_front(6));
  EXPECT_EQ(chunk["choices"][0]["text"], "a\n");
  EXPECT_TRUE(chunk["choices"][0]["finish_reason"].is_null());
  EXPECT_FALSE(chunk.contains("usage"));
  json last = parse(llvm::StringRef(chunkEvent(id, "", FinishReason::Length,
                                               Usage{1, 2}))
                        .drop_front(6));
  EXPECT_EQ(last["choices"][0]["finish_reason"], "length");
  EXPECT_EQ(last["usage"]["total_tokens"], 3);

  EXPECT_EQ(parse(errorJson("not_found_error", "no \"such\" path")),
            json({{"error",
                   {{"message", "no \"such\" path"},
                    {"type", "not_found_error"}}}}));
  json models = parse(modelsJson("tiny", 5));
  EXPECT_EQ(models["data"][0]["id"], "tiny");
  SchedulerStats stats;
  stats.batch = 4;
  stats.decodeSteps = 10;
  stats.decodeRows = 30;
  json health = parse(healthJson("tiny", stats));
  EXPECT_EQ(health["status"], "ok");
  EXPECT_EQ(health["occupancy"], 0.75);
}

} // namespace

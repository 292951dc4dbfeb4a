// The OpenAI-style completions API without the sockets: request bodies to
// GenerationRequests, generated tokens to text (stop strings, UTF-8), and
// the JSON of responses, stream chunks and errors. Server.cpp puts these on
// HTTP; the unit tests call them directly.
#ifndef LLMC_RUNTIME_SERVE_COMPLETIONS_H
#define LLMC_RUNTIME_SERVE_COMPLETIONS_H

#include "runtime/Serve/Scheduler.h"
#include "runtime/Serve/TextCodec.h"

#include "llvm/Support/Error.h"

#include <optional>
#include <string>
#include <vector>

namespace llmc::serve {

/// A request the API refuses: the HTTP status, OpenAI's error "type"
/// ("invalid_request_error", ...) and a message for the client.
class ApiError : public llvm::ErrorInfo<ApiError> {
public:
  static char ID;
  ApiError(unsigned status, std::string type, std::string message)
      : status(status), type(std::move(type)), message(std::move(message)) {}
  void log(llvm::raw_ostream &os) const override;
  std::error_code convertToErrorCode() const override;

  unsigned status;
  std::string type, message;
};

/// An ApiError of status 400, type "invalid_request_error".
llvm::Error invalidRequest(const llvm::Twine &message);

/// The fields of POST /v1/completions that llmc reads (others are ignored).
struct CompletionParams {
  std::string prompt;
  int64_t maxTokens = 16;
  double temperature = 1.0; // 0: greedy
  int64_t topK = 0;         // 0: the whole vocabulary
  std::optional<uint64_t> seed;
  bool stream = false;
  std::vector<std::string> stop; // up to 4 non-empty strings
};

/// Reads a request body: malformed JSON, a field of the wrong type or out
/// of range is an ApiError (400) naming it.
llvm::Expected<CompletionParams> parseCompletionRequest(llvm::StringRef body);

/// The prompt's tokens (an empty prompt starts from "\n", as `llmc
/// generate` does), the sampling options (no seed: a fresh random one) and
/// the tokenizer's end-of-text token as the end token. An ApiError (400)
/// when prompt plus max_tokens exceed `maxContext`.
llvm::Expected<GenerationRequest>
makeGenerationRequest(const CompletionParams &params,
                      const TextCodec &tokenizer, int64_t maxContext);

/// A completion's text as its tokens arrive. Bytes are held back while
/// they may begin a stop string or end inside a UTF-8 sequence, so what
/// add() returns is final; a stop string ends the text before it.
class CompletionText {
public:
  CompletionText(const TextCodec &tokenizer,
                 std::vector<std::string> stops);
  /// Adds a token; returns the text it makes final (often "").
  std::string add(int32_t token);
  /// A stop string was found: the text is complete.
  bool stopped() const { return hit; }
  /// The text still held back (at the end of generation).
  std::string finish();

private:
  const TextCodec &tokenizer;
  std::vector<std::string> stops;
  std::string pending;
  bool hit = false;
};

/// Identifies one completion in responses and chunks.
struct CompletionId {
  std::string id; // "cmpl-..."
  int64_t created = 0; // Unix seconds
  std::string model;
};

struct Usage {
  int64_t promptTokens = 0, completionTokens = 0;
};

/// "length" or "stop" (a cancelled or failed request has no response).
const char *finishReasonName(FinishReason reason);

/// The non-streaming response (object "text_completion").
std::string completionJson(const CompletionId &id, llvm::StringRef text,
                           FinishReason reason, Usage usage);
/// One server-sent event of a stream: "data: {...}\n\n", a chunk with
/// `text`; the last one carries the finish reason and the usage.
std::string chunkEvent(const CompletionId &id, llvm::StringRef text,
                       std::optional<FinishReason> reason = std::nullopt,
                       std::optional<Usage> usage = std::nullopt);
/// {"error": {"message": ..., "type": ...}}.
std::string errorJson(llvm::StringRef type, llvm::StringRef message);
/// GET /v1/models: the one model.
std::string modelsJson(llvm::StringRef model, int64_t created);
/// GET /health: status, the model and the scheduler's counts (batch
/// occupancy = decode_rows / (decode_steps * batch)).
std::string healthJson(llvm::StringRef model, const SchedulerStats &stats);

} // namespace llmc::serve

#endif // LLMC_RUNTIME_SERVE_COMPLETIONS_H

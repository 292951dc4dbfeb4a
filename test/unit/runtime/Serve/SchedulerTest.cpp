// The serving scheduler driven step by step over a real tiny model: its
// tokens equal generateCached's, a request's text does not depend on the
// batch around it, the queue is bounded, cancelled requests free their
// slot at the next step.
#include "runtime/Serve/Scheduler.h"

#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "tools/llmc/Inference.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"

#include <gtest/gtest.h>

#include <thread>

using namespace llmc;
using namespace llmc::serve;

namespace {

constexpr int64_t kBatch = 4, kContext = 48, kChunk = 8;

/// A 2-layer GPT-2-style model, batch 4, context 48, prefill chunks of 8.
class SchedulerTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    context = new mlir::MLIRContext;
    mlir::DialectRegistry registry;
    registry.insert<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
    context->appendDialectRegistry(registry);
    context->loadAllAvailableDialects();
    mlir::llmc::ModelConfig config;
    config.name = "serve-test";
    config.nLayer = 2;
    config.nHead = 4;
    config.nEmbd = 32;
    config.seqLen = kContext;
    config.vocabSize = 256;
    config.ffnHidden = 4 * config.nEmbd;
    mlir::llmc::InferenceShape shape{kBatch, kContext, kChunk};
    auto loaded = loadInference(*context, config, shape, "", /*seed=*/5,
                                /*numThreads=*/1, "the test model",
                                llvm::nulls());
    if (!loaded) {
      ADD_FAILURE() << llvm::toString(loaded.takeError());
      return;
    }
    session = new InferenceSession(std::move(*loaded));
  }
  static void TearDownTestSuite() {
    delete session;
    delete context;
  }
  void SetUp() override { ASSERT_NE(session, nullptr); }

  static runtime::CachedGenerator &generator() { return session->generator; }

  static GenerationRequest makeRequest(llvm::StringRef prompt,
                                       int64_t maxTokens,
                                       double temperature = 0,
                                       uint64_t seed = 1) {
    GenerationRequest request;
    request.prompt.assign(prompt.bytes_begin(), prompt.bytes_end());
    request.maxTokens = maxTokens;
    request.sampling.temperature = temperature;
    request.sampling.topK = temperature > 0 ? 20 : 0;
    request.sampling.seed = seed;
    return request;
  }

  /// The events pushed so far: tokens, and the end if it came.
  struct Drained {
    std::vector<int32_t> tokens;
    std::optional<RequestStream::Event> end;
  };
  static void drain(RequestStream &stream, Drained &into) {
    while (auto event = stream.next(std::chrono::milliseconds(0))) {
      if (event->token)
        into.tokens.push_back(*event->token);
      else
        into.end = *event;
    }
  }

  /// Runs `request` with nothing else in the scheduler.
  static std::vector<int32_t> alone(GenerationRequest request) {
    Scheduler scheduler(generator(), 8);
    Scheduler::Submitted submitted = scheduler.submit(std::move(request));
    EXPECT_TRUE(submitted.stream) << submitted.message;
    while (scheduler.step()) {
    }
    Drained drained;
    drain(*submitted.stream, drained);
    EXPECT_TRUE(drained.end);
    return drained.tokens;
  }

  static mlir::MLIRContext *context;
  static InferenceSession *session;
};

mlir::MLIRContext *SchedulerTest::context = nullptr;
InferenceSession *SchedulerTest::session = nullptr;

TEST_F(SchedulerTest, TokensEqualGenerateCached) {
  for (double temperature : {0.0, 0.9}) {
    GenerationRequest request =
        makeRequest("Hello, server", 20, temperature, /*seed=*/42);
    std::vector<int32_t> context = request.prompt;
    std::vector<int32_t> expected;
    ASSERT_FALSE(bool(runtime::generateCached(
        generator(), context, 20, request.sampling,
        [&](int64_t id) { expected.push_back(int32_t(id)); })));
    EXPECT_EQ(alone(request), expected) << "temperature " << temperature;
  }
}

TEST_F(SchedulerTest, TextDoesNotDependOnTheBatch) {
  // Prompts of 1 to 3 chunks, greedy and seeded; more requests than slots.
  std::vector<GenerationRequest> requests;
  for (int i = 0; i < 7; ++i)
    requests.push_back(makeRequest(
        std::string("req ") + std::string(size_t(3 * i), char('a' + i)),
        12 + 2 * i, i % 2 ? 1.0 : 0.0, /*seed=*/100 + i));
  std::vector<std::vector<int32_t>> expected;
  for (const GenerationRequest &request : requests)
    expected.push_back(alone(request));

  Scheduler scheduler(generator(), 8);
  std::vector<std::shared_ptr<RequestStream>> streams;
  auto submit = [&](int64_t i) {
    Scheduler::Submitted submitted = scheduler.submit(requests[i]);
    ASSERT_TRUE(submitted.stream) << submitted.message;
    streams.push_back(submitted.stream);
  };
  // Three start together; four more arrive while they decode (two of them
  // wait for slots).
  for (int64_t i = 0; i < 3; ++i)
    submit(i);
  ASSERT_TRUE(scheduler.step()); // prefill
  ASSERT_TRUE(scheduler.step()); // decode
  ASSERT_TRUE(scheduler.step());
  for (int64_t i = 3; i < 7; ++i)
    submit(i);
  EXPECT_EQ(scheduler.stats().queued, 4);
  while (scheduler.step()) {
  }
  SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.maxActive, kBatch);
  EXPECT_EQ(stats.completed, 7);
  EXPECT_EQ(stats.active, 0);
  EXPECT_GT(stats.decodeRows, stats.decodeSteps); // batched
  for (size_t i = 0; i < streams.size(); ++i) {
    Drained drained;
    drain(*streams[i], drained);
    ASSERT_TRUE(drained.end);
    EXPECT_EQ(drained.end->reason, FinishReason::Length);
    EXPECT_EQ(drained.tokens, expected[i]) << "request " << i;
  }
}

TEST_F(SchedulerTest, QueueIsBounded) {
  Scheduler scheduler(generator(), /*queueLimit=*/1);
  std::vector<std::shared_ptr<RequestStream>> streams;
  // Free slots take kBatch requests, the queue one more.
  for (int64_t i = 0; i < kBatch + 1; ++i) {
    Scheduler::Submitted submitted = scheduler.submit(makeRequest("q", 30));
    ASSERT_TRUE(submitted.stream) << i << ": " << submitted.message;
    streams.push_back(submitted.stream);
  }
  Scheduler::Submitted full = scheduler.submit(makeRequest("q", 30));
  EXPECT_FALSE(full.stream);
  EXPECT_EQ(full.rejection, Scheduler::Submitted::QueueFull);
  ASSERT_TRUE(scheduler.step()); // admits kBatch, one waits
  EXPECT_EQ(scheduler.stats().active, kBatch);
  EXPECT_EQ(scheduler.stats().queued, 1);
  EXPECT_FALSE(scheduler.submit(makeRequest("q", 30)).stream);
  // A cancelled request's slot goes to the waiting one at the next step.
  streams[1]->cancel();
  ASSERT_TRUE(scheduler.step());
  EXPECT_EQ(scheduler.stats().queued, 0);
  EXPECT_EQ(scheduler.stats().active, kBatch);
  EXPECT_EQ(scheduler.stats().cancelled, 1);
  EXPECT_EQ(scheduler.stats().rejected, 2);
  Drained drained;
  drain(*streams[1], drained);
  ASSERT_TRUE(drained.end);
  EXPECT_EQ(drained.end->reason, FinishReason::Cancelled);
  EXPECT_TRUE(scheduler.submit(makeRequest("q", 30)).stream);
}

TEST_F(SchedulerTest, CancelFreesTheSlotAtTheNextStep) {
  Scheduler scheduler(generator(), 8);
  auto stream = scheduler.submit(makeRequest("bye", 40)).stream;
  ASSERT_TRUE(stream);
  ASSERT_TRUE(scheduler.step());
  ASSERT_TRUE(scheduler.step());
  EXPECT_EQ(scheduler.stats().active, 1);
  stream->cancel();
  EXPECT_FALSE(scheduler.step()); // drops it; nothing left to run
  SchedulerStats stats = scheduler.stats();
  EXPECT_EQ(stats.active, 0);
  EXPECT_EQ(stats.cancelled, 1);
  EXPECT_EQ(stats.generatedTokens, 2);
  Drained drained;
  drain(*stream, drained);
  EXPECT_EQ(drained.tokens.size(), 2u);
  ASSERT_TRUE(drained.end);
  EXPECT_EQ(drained.end->reason, FinishReason::Cancelled);
}

TEST_F(SchedulerTest, EndTokenStops) {
  GenerationRequest request = makeRequest("stop here", 10);
  std::vector<int32_t> tokens = alone(request);
  ASSERT_EQ(tokens.size(), 10u);
  // The third token as the end token: two are delivered, then Stop.
  request.endToken = tokens[2];
  size_t first = std::find(tokens.begin(), tokens.end(), tokens[2]) -
                 tokens.begin();
  Scheduler scheduler(generator(), 8);
  auto stream = scheduler.submit(request).stream;
  while (scheduler.step()) {
  }
  Drained drained;
  drain(*stream, drained);
  ASSERT_TRUE(drained.end);
  EXPECT_EQ(drained.end->reason, FinishReason::Stop);
  EXPECT_EQ(drained.tokens,
            std::vector<int32_t>(tokens.begin(), tokens.begin() + first));
}

TEST_F(SchedulerTest, RejectsWhatDoesNotFit) {
  Scheduler scheduler(generator(), 8);
  Scheduler::Submitted tooLong =
      scheduler.submit(makeRequest(std::string(40, 'x'), 9));
  EXPECT_EQ(tooLong.rejection, Scheduler::Submitted::Invalid);
  EXPECT_EQ(tooLong.message, "the prompt's 40 tokens plus max_tokens 9 "
                             "exceed the context of 48 tokens");
  EXPECT_TRUE(scheduler.submit(makeRequest(std::string(40, 'x'), 8)).stream);
  EXPECT_EQ(scheduler.submit(makeRequest("", 4)).rejection,
            Scheduler::Submitted::Invalid);
  GenerationRequest outside = makeRequest("ab", 4);
  outside.prompt[1] = 256;
  EXPECT_EQ(scheduler.submit(outside).message,
            "prompt token 256 is outside the vocabulary [0, 256)");
  // Nothing to draw: ends at once, without a slot.
  auto none = scheduler.submit(makeRequest("ab", 0)).stream;
  ASSERT_TRUE(none);
  Drained drained;
  drain(*none, drained);
  ASSERT_TRUE(drained.end);
  EXPECT_EQ(drained.end->reason, FinishReason::Length);
  EXPECT_EQ(scheduler.stats().queued, 1);
}

TEST_F(SchedulerTest, StopEndsEveryRequest) {
  Scheduler scheduler(generator(), 8);
  std::vector<std::shared_ptr<RequestStream>> streams;
  for (int i = 0; i < kBatch + 2; ++i)
    streams.push_back(scheduler.submit(makeRequest("long", 40)).stream);
  std::thread thread([&] { scheduler.run(); });
  // Wait for the first token of the first request: the scheduler runs.
  std::optional<RequestStream::Event> first =
      streams[0]->next(std::chrono::seconds(60));
  ASSERT_TRUE(first && first->token);
  scheduler.stop();
  thread.join();
  for (auto &stream : streams) {
    Drained drained;
    drain(*stream, drained);
    ASSERT_TRUE(drained.end);
    EXPECT_TRUE(drained.end->reason == FinishReason::Failed ||
                drained.end->reason == FinishReason::Length);
  }
  EXPECT_EQ(scheduler.submit(makeRequest("late", 4)).rejection,
            Scheduler::Submitted::Stopped);
}

} // namespace

// The serving scheduler: slots, the queue, prefill passes and batched decode.
#include "runtime/Serve/Scheduler.h"

#include "llvm/Support/FormatVariadic.h"

#include <algorithm>

using namespace llmc;
using namespace llmc::serve;

std::optional<RequestStream::Event>
RequestStream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex);
  if (!ready.wait_for(lock, timeout, [&] { return !events.empty(); }))
    return std::nullopt;
  Event event = std::move(events.front());
  events.pop_front();
  return event;
}

void RequestStream::push(Event event) {
  {
    std::lock_guard<std::mutex> lock(mutex);
    events.push_back(std::move(event));
  }
  ready.notify_one();
}

Scheduler::Scheduler(runtime::CachedGenerator &generator, int64_t queueLimit)
    : generator(generator), queueLimit(std::max<int64_t>(queueLimit, 0)),
      slots(generator.batch()) {
  counts.batch = generator.batch();
  counts.maxContext = generator.maxContext();
}

Scheduler::Submitted Scheduler::submit(GenerationRequest request) {
  Submitted result;
  auto reject = [&](Submitted::Rejection why, std::string message) {
    result.rejection = why;
    result.message = std::move(message);
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.rejected;
    return result;
  };
  int64_t context = generator.maxContext();
  if (request.prompt.empty())
    return reject(Submitted::Invalid, "the prompt has no tokens");
  if (request.maxTokens < 0)
    return reject(Submitted::Invalid,
                  llvm::formatv("max_tokens must be >= 0, got {0}",
                                request.maxTokens));
  if (int64_t(request.prompt.size()) + request.maxTokens > context)
    return reject(Submitted::Invalid,
                  llvm::formatv("the prompt's {0} tokens plus max_tokens {1} "
                                "exceed the context of {2} tokens",
                                request.prompt.size(), request.maxTokens,
                                context));
  for (int32_t id : request.prompt)
    if (id < 0 || id >= generator.vocab())
      return reject(Submitted::Invalid,
                    llvm::formatv("prompt token {0} is outside the "
                                  "vocabulary [0, {1})",
                                  id, generator.vocab()));
  auto stream = std::make_shared<RequestStream>();
  if (request.maxTokens == 0) {
    // Nothing to draw: done without taking a slot.
    stream->push({std::nullopt, FinishReason::Length, ""});
    result.stream = stream;
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.completed;
    return result;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    if (stopped) {
      ++counts.rejected;
      result.rejection = Submitted::Stopped;
      result.message = "the server is shutting down";
      return result;
    }
    // Requests that free slots will take next do not count as waiting.
    if (counts.active + int64_t(queue.size()) >= counts.batch + queueLimit) {
      ++counts.rejected;
      result.rejection = Submitted::QueueFull;
      result.message = llvm::formatv(
          "all {0} slots are busy and {1} request(s) wait (the queue "
          "limit); try again later",
          counts.batch, queue.size());
      return result;
    }
    queue.push_back({stream, std::move(request)});
    counts.queued = queue.size();
  }
  wake.notify_one();
  result.stream = stream;
  return result;
}

std::vector<int64_t> Scheduler::admit() {
  std::lock_guard<std::mutex> lock(mutex);
  for (int64_t row = 0; row < int64_t(slots.size()); ++row)
    if (slots[row] && slots[row]->stream->isCancelled()) {
      slots[row]->stream->push({std::nullopt, FinishReason::Cancelled, ""});
      slots[row].reset();
      --counts.active;
      ++counts.cancelled;
    }
  std::vector<int64_t> fresh;
  for (int64_t row = 0; row < int64_t(slots.size()) && !queue.empty();
       ++row) {
    if (slots[row])
      continue;
    // Requests cancelled while waiting never take a slot.
    while (!queue.empty() && queue.front().stream->isCancelled()) {
      queue.front().stream->push({std::nullopt, FinishReason::Cancelled, ""});
      queue.pop_front();
      ++counts.cancelled;
    }
    if (queue.empty())
      break;
    Queued next = std::move(queue.front());
    queue.pop_front();
    Slot slot;
    slot.stream = std::move(next.stream);
    slot.request = std::move(next.request);
    counts.promptTokens += slot.request.prompt.size();
    slots[row] = std::move(slot);
    fresh.push_back(row);
    ++counts.active;
  }
  counts.queued = queue.size();
  counts.maxActive = std::max(counts.maxActive, counts.active);
  return fresh;
}

bool Scheduler::step() {
  std::vector<int64_t> fresh = admit();
  if (!fresh.empty())
    return prefill(fresh);
  return decode();
}

bool Scheduler::prefill(const std::vector<int64_t> &fresh) {
  int64_t batch = generator.batch(), chunk = generator.prefillChunk();
  std::vector<bool> isFresh(batch, false);
  int64_t longest = 0;
  for (int64_t row : fresh) {
    isFresh[row] = true;
    longest = std::max<int64_t>(longest, slots[row]->request.prompt.size());
  }
  std::vector<int32_t> tokens(batch * chunk, 0), positions(batch * chunk, 0);
  std::vector<float> logits;
  int64_t steps = 0;
  for (int64_t start = 0; start < longest; start += chunk, ++steps) {
    for (int64_t row = 0; row < batch; ++row) {
      if (!slots[row])
        continue; // idle: token 0 at position 0
      for (int64_t t = 0; t < chunk; ++t) {
        int32_t &token = tokens[row * chunk + t];
        int32_t &position = positions[row * chunk + t];
        if (isFresh[row]) {
          const std::vector<int32_t> &prompt = slots[row]->request.prompt;
          int64_t at = std::min<int64_t>(start + t, prompt.size() - 1);
          token = prompt[at];
          position = int32_t(at);
        } else {
          // Mid-decode: the slot its next decode step rewrites first.
          token = slots[row]->next;
          position = slots[row]->position;
        }
      }
    }
    llvm::Expected<std::vector<float>> out =
        generator.prefillStep(tokens, positions);
    if (!out) {
      failActive(out.takeError());
      return true;
    }
    logits = std::move(*out);
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.prefillPasses;
    counts.prefillSteps += steps;
  }
  for (int64_t row : fresh) {
    slots[row]->position = int32_t(slots[row]->request.prompt.size());
    draw(row, logits);
  }
  return true;
}

bool Scheduler::decode() {
  int64_t batch = generator.batch();
  std::vector<int32_t> tokens(batch, 0), positions(batch, 0);
  int64_t rows = 0;
  for (int64_t row = 0; row < batch; ++row)
    if (slots[row]) {
      tokens[row] = slots[row]->next;
      positions[row] = slots[row]->position;
      ++rows;
    }
  if (rows == 0)
    return false;
  llvm::Expected<std::vector<float>> logits =
      generator.decode(tokens, positions);
  if (!logits) {
    failActive(logits.takeError());
    return true;
  }
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.decodeSteps;
    counts.decodeRows += rows;
  }
  for (int64_t row = 0; row < batch; ++row)
    if (slots[row]) {
      ++slots[row]->position;
      draw(row, *logits);
    }
  return true;
}

void Scheduler::draw(int64_t row, llvm::ArrayRef<float> logits) {
  Slot &slot = *slots[row];
  int64_t vocab = generator.vocab();
  int32_t token = int32_t(runtime::sampleToken(
      logits.slice(row * vocab, vocab), slot.request.sampling, slot.drawn));
  if (slot.request.endToken && token == *slot.request.endToken)
    return finish(row, {std::nullopt, FinishReason::Stop, ""});
  slot.stream->push({token, FinishReason::Length, ""});
  ++slot.drawn;
  {
    std::lock_guard<std::mutex> lock(mutex);
    ++counts.generatedTokens;
  }
  if (slot.drawn == slot.request.maxTokens)
    return finish(row, {std::nullopt, FinishReason::Length, ""});
  slot.next = token;
}

void Scheduler::finish(int64_t row, RequestStream::Event event) {
  slots[row]->stream->push(event);
  slots[row].reset();
  std::lock_guard<std::mutex> lock(mutex);
  --counts.active;
  ++(event.reason == FinishReason::Failed ? counts.failed : counts.completed);
}

void Scheduler::failActive(llvm::Error error) {
  std::string message = llvm::toString(std::move(error));
  for (int64_t row = 0; row < int64_t(slots.size()); ++row)
    if (slots[row])
      finish(row, {std::nullopt, FinishReason::Failed, message});
}

void Scheduler::run() {
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex);
      wake.wait(lock, [&] {
        return stopped || !queue.empty() || counts.active > 0;
      });
      if (stopped)
        break;
    }
    step();
  }
  // Stopped: nothing more runs; every request still here ends.
  failActive(llvm::createStringError("the server is shutting down"));
  std::lock_guard<std::mutex> lock(mutex);
  for (Queued &waiting : queue) {
    waiting.stream->push(
        {std::nullopt, FinishReason::Failed, "the server is shutting down"});
    ++counts.failed;
  }
  queue.clear();
  counts.queued = 0;
}

void Scheduler::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex);
    stopped = true;
  }
  wake.notify_all();
}

SchedulerStats Scheduler::stats() const {
  std::lock_guard<std::mutex> lock(mutex);
  return counts;
}

// The main of an inference binary written by `llmc export`: it maps its own
// file, checks the payload (runtime/Serve/ExportPayload.h) and the CPU, binds the
// weights in place and runs @prefill/@decode with the kernels linked in
// ahead of time (KernelTable.h) or, in a `--target cuda` binary, on the GPU
// with the CUDA modules its payload carries (the driver and cuBLASLt loaded
// at run time), from the command line or, as `NAME serve`, behind
// runtime/Serve's HTTP server. No MLIR, no JIT, no shared LLVM.
#include "frontend/Tokenizer.h"
#include "ir/kernel/Artifact.h"
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Serve/CachedGenerate.h"
#include "runtime/Serve/ExportPayload.h"
#include "runtime/Serve/Server.h"
#include "tools/common/TokenizerCodec.h"
#ifdef LLMC_EXPORT_CUDA
#include "ir/kernel/CudaModule.h"
#include "runtime/Cuda/CudaDeviceStore.h"
#include "runtime/Cuda/CudaExecutor.h"
#endif
#include "tools/common/GenerateOutput.h"
#include "tools/exported/KernelTable.h"

#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/WithColor.h"
#include "llvm/Support/raw_ostream.h"

#include <chrono>
#include <cstring>
#include <sys/resource.h>

using namespace llmc;
namespace cl = llvm::cl;

static cl::OptionCategory category("Options");
static GenerationFlags generation(cl::SubCommand::getTopLevel(), category);
static cl::opt<uint64_t> seed("seed",
                              cl::desc("Seed of the sampler (default 1337)"),
                              cl::init(runtime::SamplingOptions().seed),
                              cl::cat(category));
static cl::SubCommand serveCmd(
    "serve", "Serve OpenAI-style completions over HTTP (POST "
             "/v1/completions, GET /v1/models, GET /health); concurrent "
             "requests share the decode step, up to the batch the binary "
             "was exported with");
static cl::opt<int> numThreads("threads",
                               cl::desc("CPU threads (default: the CPUs this "
                                        "process may use)"),
                               cl::init(0), cl::cat(category),
                               cl::sub(cl::SubCommand::getTopLevel()),
                               cl::sub(serveCmd));
static cl::opt<std::string> serveHost("host",
                                      cl::desc("Address to listen on "
                                               "(default 127.0.0.1)"),
                                      cl::init("127.0.0.1"), cl::cat(category),
                                      cl::sub(serveCmd));
static cl::opt<unsigned> servePort(
    "port", cl::desc("Port (default 8080; 0: any free port, printed)"),
    cl::init(8080), cl::cat(category), cl::sub(serveCmd));
static cl::opt<int64_t> serveQueueLimit(
    "queue-limit",
    cl::desc("Requests that may wait while every slot is busy (default "
             "64); more are answered 503"),
    cl::init(serve::ServeOptions().queueLimit), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<uint64_t> serveMaxBody(
    "max-body-bytes",
    cl::desc("Largest request body (default 1 MiB); larger ones get 413"),
    cl::init(serve::ServeOptions().maxBodyBytes), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<int64_t> serveMaxConnections(
    "max-connections",
    cl::desc("Open connections (default 256); at the limit a new one "
             "closes the one that has waited longest for a request, and is "
             "answered 503 only when all are running requests"),
    cl::init(serve::ServeOptions().maxConnections), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<int64_t> serveMaxPerClient(
    "max-connections-per-client",
    cl::desc("Open connections from one client address (default 64; 0: no "
             "cap); more are answered 503"),
    cl::init(serve::ServeOptions().maxConnectionsPerClient), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<double> serveHeaderTimeout(
    "header-timeout",
    cl::desc("Seconds a request's header may take to arrive, from its first "
             "byte (default 10); slower clients get 408"),
    cl::init(serve::ServeOptions().headerTimeoutSeconds), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<double> serveIdleTimeout(
    "idle-timeout",
    cl::desc("Seconds a kept-alive connection may wait for its next request, "
             "or a response for a client that does not read (default 30)"),
    cl::init(serve::ServeOptions().idleTimeoutSeconds), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<double> serveRequestTimeout(
    "request-timeout",
    cl::desc("Seconds a request may take from its header to its response's "
             "end (default 300); past it, 503"),
    cl::init(serve::ServeOptions().requestTimeoutSeconds), cl::cat(category),
    cl::sub(serveCmd));
static cl::opt<std::string> serveModelName(
    "model-name",
    cl::desc("The model's name in responses (default: the exported model's)"),
    cl::cat(category), cl::sub(serveCmd));
static cl::opt<bool> bench(
    "bench",
    cl::desc("Generate --max-tokens tokens after the prompt without printing "
             "them; print start-up time, prefill and decode tokens/s and "
             "peak RSS"),
    cl::cat(category));
static cl::opt<bool> info(
    "info",
    cl::desc("Print what the binary holds (model, precision, programs, "
             "kernels, weights and their checksum, CPU features) and exit"),
    cl::cat(category));

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// Everything a run needs, loaded from the binary's own file: the payload
/// (the weights stay in its mapping), the two programs on one store, the
/// generator and the tokenizer; generation and `serve` both run on it.
struct ExportedModel {
  std::unique_ptr<runtime::Payload> payload;
  runtime::ExportManifest manifest;
  std::unique_ptr<runtime::Executor> prefill, decode;
  runtime::CachedGenerator generator;
  std::unique_ptr<data::Tokenizer> tokenizer;
  double verifySeconds = 0;
};

/// The kernel entry points of `program` (named `name` in the table).
llvm::Expected<std::vector<runtime::CpuKernelFn>>
linkedKernels(const kir::Program &program, llvm::StringRef name,
              llvm::StringRef file) {
  llvm::StringMap<runtime::CpuKernelFn> byName;
  for (int64_t i = 0; i < llmc_export_kernel_count; ++i)
    if (name == llmc_export_kernels[i].program)
      byName[llmc_export_kernels[i].name] = llmc_export_kernels[i].fn;
  std::vector<runtime::CpuKernelFn> fns;
  for (const kir::Kernel &kernel : program.kernels) {
    auto it = byName.find(kernel.name);
    if (it == byName.end())
      return llvm::createStringError(file + ": kernel '" + kernel.name +
                                     "' of @" + name +
                                     " is not linked into the binary");
    fns.push_back(it->second);
  }
  return fns;
}

llvm::Expected<std::unique_ptr<data::Tokenizer>>
loadTokenizer(const runtime::Payload &payload,
              const runtime::ExportManifest &manifest) {
  if (manifest.tokenizer == "byte")
    return std::make_unique<data::ByteTokenizer>();
  if (manifest.tokenizer != "gpt2-bpe")
    return llvm::createStringError(payload.path() + ": unknown tokenizer '" +
                                   manifest.tokenizer + "' in the manifest");
  auto vocab = payload.section("tokenizer.vocab");
  if (!vocab)
    return vocab.takeError();
  auto merges = payload.section("tokenizer.merges");
  if (!merges)
    return merges.takeError();
  auto tokenizer = data::BpeTokenizer::fromContents(
      llvm::StringRef(vocab->data(), vocab->size()),
      llvm::StringRef(merges->data(), merges->size()),
      payload.path() + ": section 'tokenizer.vocab'",
      payload.path() + ": section 'tokenizer.merges'");
  if (!tokenizer)
    return tokenizer.takeError();
  return std::unique_ptr<data::Tokenizer>(std::move(*tokenizer));
}

/// Opens `path` (this binary), checks the payload and the manifest;
/// `verify`: the checksum of every section too.
llvm::Error openPayload(llvm::StringRef path, ExportedModel &model) {
  auto payload = runtime::Payload::open(path);
  if (!payload)
    return payload.takeError();
  model.payload = std::move(*payload);
  auto start = std::chrono::steady_clock::now();
  if (llvm::Error error = model.payload->verify())
    return error;
  model.verifySeconds = secondsSince(start);
  auto manifest = runtime::readManifest(*model.payload);
  if (!manifest)
    return manifest.takeError();
  model.manifest = std::move(*manifest);
  return llvm::Error::success();
}

#ifdef LLMC_EXPORT_CUDA
/// A CUDA binary's executors: both programs on the GPU over one device
/// store, their modules from the payload (no NVRTC at run time), the
/// weights copied from the mapping to the device.
llvm::Error loadOnGpu(ExportedModel &model, kir::Program prefill,
                      kir::Program decode, llvm::ArrayRef<char> weights) {
  const runtime::Payload &payload = *model.payload;
  auto store = runtime::CudaPersistentStore::create();
  if (!store)
    return store.takeError();
  for (auto [name, program, executor] :
       {std::tuple{"prefill", &prefill, &model.prefill},
        std::tuple{"decode", &decode, &model.decode}}) {
    std::string section = std::string("cuda.") + name;
    auto bytes = payload.section(section);
    if (!bytes)
      return bytes.takeError();
    auto modules = cuda::deserializeCudaModules(
        *bytes, payload.path() + ": section '" + section + "'");
    if (!modules)
      return modules.takeError();
    runtime::CudaExecutorOptions options;
    options.store = *store;
    auto created = runtime::CudaExecutor::create(
        std::move(*program),
        [modules = std::move(*modules)](const kir::Program &) {
          return llvm::Expected<cuda::CudaModules>(modules);
        },
        options);
    if (!created)
      return llvm::createStringError(payload.path() + ": @" + name + ": " +
                                     llvm::toString(created.takeError()));
    *executor = std::move(*created);
  }
  for (const runtime::ExportManifest::Tensor &tensor : model.manifest.weights) {
    runtime::HostTensor host =
        runtime::HostTensor::zeros(tensor.dtype, tensor.shape);
    std::memcpy(host.bytes.data(), weights.data() + tensor.offset,
                host.bytes.size());
    if (llvm::Error error = (*store)->set(tensor.name, host))
      return llvm::createStringError(payload.path() + ": section 'weights': " +
                                     llvm::toString(std::move(error)));
  }
  return llvm::Error::success();
}
#endif

/// The programs, the store with the weights bound in the mapping, the
/// executors with the linked kernels (or, for a CUDA binary, on the GPU),
/// the generator and the tokenizer.
llvm::Error loadModel(ExportedModel &model, int threads) {
  const runtime::Payload &payload = *model.payload;
  const runtime::ExportManifest &manifest = model.manifest;
  bool onGpu = manifest.target == "cuda";
#ifndef LLMC_EXPORT_CUDA
  if (onGpu)
    return llvm::createStringError(
        payload.path() + ": a CUDA binary, but its runtime was built without "
                         "the CUDA toolkit");
#endif
  std::vector<std::string> missing =
      runtime::missingCpuFeatures(manifest.cpuFeatures);
  if (!missing.empty())
    return llvm::createStringError(
        payload.path() + ": this CPU lacks " + llvm::join(missing, ", ") +
        ", which the binary's kernels use (compiled for " + manifest.cpu +
        "); export it again on this machine or with llmc export --cpu for "
        "an older CPU (e.g. --cpu x86-64-v3)");
  auto weights = payload.section("weights");
  if (!weights)
    return weights.takeError();
  if (weights->size() != manifest.weightsBytes)
    return llvm::createStringError(
        payload.path() + ": section 'weights' holds " +
        llvm::Twine(weights->size()) + " bytes, the manifest says " +
        llvm::Twine(manifest.weightsBytes));
  auto store = std::make_shared<runtime::PersistentStore>();
  for (const runtime::ExportManifest::Tensor &tensor : manifest.weights)
    if (llvm::Error error =
            store->adopt(tensor.name, tensor.dtype, tensor.shape,
                         weights->data() + tensor.offset))
      return llvm::createStringError(payload.path() + ": section 'weights': " +
                                     llvm::toString(std::move(error)));
  std::vector<kir::Program> programs;
  for (const char *name : {"prefill", "decode"}) {
    auto bytes = payload.section(name);
    if (!bytes)
      return bytes.takeError();
    auto program = kir::deserializeProgram(
        llvm::ArrayRef<uint8_t>(
            reinterpret_cast<const uint8_t *>(bytes->data()), bytes->size()),
        payload.path() + ": section '" + name + "'");
    if (!program)
      return program.takeError();
    // A parameter the payload lacks would be bound zero-filled: refuse.
    for (const kir::Binding &param : program->params)
      if (!store->contains(param.name))
        return llvm::createStringError(
            payload.path() + ": section 'weights' has no tensor '" +
            param.name + "', a parameter of @" + name);
    programs.push_back(std::move(*program));
  }
#ifdef LLMC_EXPORT_CUDA
  if (onGpu) {
    if (llvm::Error error = loadOnGpu(model, std::move(programs[0]),
                                      std::move(programs[1]), *weights))
      return error;
  }
#endif
  for (auto [name, program, executor] :
       {std::tuple{"prefill", &programs[0], &model.prefill},
        std::tuple{"decode", &programs[1], &model.decode}}) {
    if (onGpu)
      break;
    auto fns = linkedKernels(*program, name, payload.path());
    if (!fns)
      return fns.takeError();
    auto created = runtime::CpuExecutor::create(
        std::move(*program), std::move(*fns), threads, store);
    if (!created)
      return llvm::createStringError(payload.path() + ": @" + name + ": " +
                                     llvm::toString(created.takeError()));
    if ((*created)->writesParameters())
      return llvm::createStringError(
          payload.path() + ": @" + name +
          " writes a parameter, which lives in the read-only mapping");
    *executor = std::move(*created);
  }
  auto generator =
      runtime::CachedGenerator::create(*model.prefill, *model.decode);
  if (!generator)
    return llvm::createStringError(payload.path() + ": " +
                                   llvm::toString(generator.takeError()));
  model.generator = *generator;
  auto tokenizer = loadTokenizer(payload, manifest);
  if (!tokenizer)
    return tokenizer.takeError();
  model.tokenizer = std::move(*tokenizer);
  return llvm::Error::success();
}

/// The binary's name as run, the prefix of its errors.
std::string programName = "llmc-exported";

int fail(llvm::Error error) {
  llvm::WithColor::error(llvm::errs(), programName)
      << llvm::toString(std::move(error)) << "\n";
  return 1;
}

/// The binary's own file, for errors and for mapping.
std::string selfPath(const char *argv0) {
  std::string path = llvm::sys::fs::getMainExecutable(
      argv0, reinterpret_cast<void *>(&selfPath));
  return path.empty() ? std::string("/proc/self/exe") : path;
}

/// `NAME serve`: runtime/Serve's server over the model's generator, each
/// of its batch rows a request slot.
int runServe(const char *argv0) {
  if (servePort > 65535)
    return fail(llvm::createStringError(
        "--port: expected 0..65535, got " + llvm::Twine(servePort)));
  if (serveQueueLimit < 0)
    return fail(llvm::createStringError(
        "--queue-limit: expected a count >= 0, got " +
        llvm::Twine(serveQueueLimit)));
  if (serveMaxConnections < 1)
    return fail(llvm::createStringError(
        "--max-connections: expected a count >= 1, got " +
        llvm::Twine(serveMaxConnections)));
  if (serveMaxPerClient < 0)
    return fail(llvm::createStringError(
        "--max-connections-per-client: expected a count >= 0, got " +
        llvm::Twine(serveMaxPerClient)));
  for (const cl::opt<double> *timeout :
       {&serveHeaderTimeout, &serveIdleTimeout, &serveRequestTimeout})
    if (!(*timeout > 0 && *timeout <= 1e6))
      return fail(llvm::createStringError(
          "--" + timeout->ArgStr + ": expected seconds in (0, 1e6], got " +
          llvm::formatv("{0}", double(*timeout)).str()));
  ExportedModel model;
  if (llvm::Error error = openPayload(selfPath(argv0), model))
    return fail(std::move(error));
  if (llvm::Error error = loadModel(model, numThreads))
    return fail(std::move(error));
  serve::ServeOptions options;
  options.maxConnections = serveMaxConnections;
  options.maxConnectionsPerClient = serveMaxPerClient;
  options.headerTimeoutSeconds = serveHeaderTimeout;
  options.idleTimeoutSeconds = serveIdleTimeout;
  options.requestTimeoutSeconds = serveRequestTimeout;
  options.host = serveHost;
  options.port = uint16_t(servePort);
  options.modelName =
      serveModelName.empty() ? model.manifest.modelName : serveModelName;
  options.queueLimit = serveQueueLimit;
  options.maxBodyBytes = serveMaxBody;
  if (llvm::Error error =
          serve::serve(model.generator, TokenizerCodec(*model.tokenizer),
                       options))
    return fail(std::move(error));
  return 0;
}

double peakRssMiB() {
  struct rusage usage;
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0; // kilobytes on Linux
}

} // namespace

int main(int argc, char **argv) {
  auto start = std::chrono::steady_clock::now();
  programName = llvm::sys::path::filename(argv[0]).str();
  // --version: the llmc that wrote the binary (its manifest), not LLVM's.
  cl::SetVersionPrinter([](llvm::raw_ostream &os) {
    auto payload = runtime::Payload::open(selfPath(nullptr));
    auto manifest = payload ? runtime::readManifest(**payload)
                            : llvm::Expected<runtime::ExportManifest>(
                                  payload.takeError());
    if (manifest)
      os << programName << ": exported by " << manifest->llmcVersion << "\n";
    else
      os << programName << ": " << llvm::toString(manifest.takeError())
         << "\n";
  });
  cl::HideUnrelatedOptions(category);
  cl::ParseCommandLineOptions(
      argc, argv,
      "an LLM inference binary written by llmc export: the model, its "
      "weights and its compiled kernels in one file\n\n"
      "  NAME --prompt TEXT [--max-tokens N] [--temperature T] [--top-k K] "
      "[--seed S]\n"
      "  NAME --info           what the binary holds\n"
      "  NAME --bench          start-up, prefill and decode speed, peak RSS\n"
      "  NAME serve [--port 8080] [--host 127.0.0.1]   an HTTP server: "
      "POST /v1/completions\n");
  if (llvm::Error error = generation.check())
    return fail(std::move(error));
  if (numThreads < 0)
    return fail(llvm::createStringError(
        "--threads: expected a count >= 0 (0: the CPUs this process may "
        "use), got " +
        llvm::Twine(numThreads)));
  // The generation flags are the top level's: at their defaults under
  // serve, so they pass there.
  if (serveCmd)
    return runServe(argv[0]);
  ExportedModel model;
  if (llvm::Error error = openPayload(selfPath(argv[0]), model))
    return fail(std::move(error));
  if (info) {
    runtime::printExportInfo(*model.payload, model.manifest, llvm::outs());
    return 0;
  }
  if (llvm::Error error = loadModel(model, numThreads))
    return fail(std::move(error));
  double startupSeconds = secondsSince(start);
  const data::Tokenizer &tok = *model.tokenizer;
  std::vector<int32_t> tokens = tok.encode(generation.prompt);
  if (tokens.empty())
    tokens = tok.encode("\n"); // the model needs one token to start from
  if (generation.printLogits) {
    if (llvm::Error error = printCachedLogits(model.generator, tokens))
      return fail(std::move(error));
    return 0;
  }
  runtime::SamplingOptions sampling = generation.sampling(seed);
  runtime::GenerationStats stats;
  if (bench) {
    if (llvm::Error error = runtime::generateCached(
            model.generator, tokens, generation.maxTokens, sampling,
            [](int64_t) {}, &stats))
      return fail(std::move(error));
    llvm::outs() << llvm::format(
        "start-up: %.3f s (checksums of %.1f MB: %.3f s)\n", startupSeconds,
        model.payload->fileSize() / 1e6, model.verifySeconds);
    // Every one of the batch's B sequences is fed (the others follow
    // sequence 0's tokens): B tokens a position.
    int64_t batch = model.generator.batch();
    llvm::outs() << llvm::format(
        "prefill: %lld tokens x %lld sequences, %.1f tokens/s\n",
        (long long)stats.promptTokens, (long long)batch,
        batch * prefillTokensPerSecond(stats));
    llvm::outs() << llvm::format(
        "decode: %zu steps x %lld sequences, %.1f tokens/s (%.2f ms a "
        "step)\n",
        stats.decodeSeconds.size(), (long long)batch,
        batch * decodeTokensPerSecond(stats),
        1e3 / std::max(decodeTokensPerSecond(stats), 1e-9));
    llvm::outs() << llvm::format("peak RSS: %.1f MiB\n", peakRssMiB());
    // 2:4 weights (found and packed at the first run): what decode read.
    for (auto [name, executor] : {std::pair{"prefill", model.prefill.get()},
                                  std::pair{"decode", model.decode.get()}})
      if (std::string sparse = executor->sparseSummary(); !sparse.empty())
        llvm::outs() << "@" << name << ": " << sparse << "\n";
    return 0;
  }
  GeneratedText text(tok, generation.prompt, generation.maxTokens);
  if (llvm::Error error = text.finish(runtime::generateCached(
          model.generator, tokens, generation.maxTokens, sampling,
          [&](int64_t id) { text.token(id); }, &stats)))
    return fail(std::move(error));
  printGenerationStats(stats, model.generator, *model.prefill, *model.decode);
  return 0;
}

// llmc-serve-check: runtime/Serve's server over a model config's KV-cache
// programs (random or given weights), for the lit tests until an exported
// binary's `./NAME serve` can run them. Test-only: built into bin/ for lit,
// not installed.
//
//   llmc-serve-check CONFIG.yaml|PRESET [--batch 8] [--max-context N]
//       [--prefill-chunk 16] [--port 0] [--queue-limit 64]
//       [--max-body-bytes N] [--tokenizer byte|DIR] [--weights FILE]
//       [--num-threads N] [--model-name NAME]
// prints "llmc: serving NAME on http://127.0.0.1:PORT ..." and serves until
// SIGINT or SIGTERM.
#include "frontend/ModelConfig.h"
#include "frontend/Tokenizer.h"
#include "ir/LlmcDialect.h"
#include "runtime/Serve/Server.h"
#include "tools/llmc/Inference.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/Support/CommandLine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/InitLLVM.h"

namespace cl = llvm::cl;
using namespace llmc;

static cl::opt<std::string> modelSpec(cl::Positional, cl::Required,
                                      cl::desc("<model config or preset>"));
static cl::opt<int64_t> batch("batch", cl::desc("decode slots"), cl::init(8));
static cl::opt<int64_t> maxContext("max-context",
                                   cl::desc("cache positions (0: seq_len)"),
                                   cl::init(0));
static cl::opt<int64_t> prefillChunk("prefill-chunk",
                                     cl::desc("@prefill tokens per step"),
                                     cl::init(16));
static cl::opt<std::string> host("host", cl::init("127.0.0.1"));
static cl::opt<unsigned> port("port", cl::desc("0: ephemeral"), cl::init(0));
static cl::opt<int64_t> queueLimit("queue-limit", cl::init(64));
static cl::opt<uint64_t> maxBodyBytes("max-body-bytes", cl::init(1 << 20));
static cl::opt<std::string> tokenizerSpec("tokenizer", cl::init("byte"));
static cl::opt<std::string> weights("weights",
                                    cl::desc("empty: GPT-2 init from --seed"));
static cl::opt<uint64_t> seed("seed", cl::init(1337));
static cl::opt<int> threads("num-threads", cl::desc("CPU threads (0: all)"),
                           cl::init(0));
static cl::opt<std::string> modelName("model-name", cl::init(""));

static int fail(llvm::Error error) {
  llvm::errs() << "llmc-serve-check: " << llvm::toString(std::move(error))
               << "\n";
  return 1;
}

int main(int argc, char **argv) {
  llvm::InitLLVM init(argc, argv);
  cl::ParseCommandLineOptions(argc, argv, "llmc-serve-check\n");
  std::optional<mlir::llmc::ModelConfig> config;
  if (llvm::sys::fs::exists(modelSpec)) {
    auto loaded = mlir::llmc::loadModelConfigFile(modelSpec);
    if (!loaded)
      return fail(loaded.takeError());
    config = *loaded;
  } else if (!(config = mlir::llmc::getModelPreset(modelSpec))) {
    return fail(llvm::createStringError(
        "'" + modelSpec + "' is no file and " +
        mlir::llmc::describePresetsFor(modelSpec)));
  }
  auto tokenizer = data::loadTokenizer(tokenizerSpec);
  if (!tokenizer)
    return fail(tokenizer.takeError());
  mlir::MLIRContext context;
  mlir::DialectRegistry registry;
  registry.insert<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  context.appendDialectRegistry(registry);
  context.loadAllAvailableDialects();
  mlir::llmc::InferenceShape shape;
  shape.batch = batch;
  shape.maxContext = maxContext ? int64_t(maxContext) : config->seqLen;
  shape.prefillTokens = std::min<int64_t>(prefillChunk, shape.maxContext);
  auto session = loadInference(context, *config, shape, weights, seed,
                               threads, "serving " + modelSpec, llvm::errs());
  if (!session)
    return fail(session.takeError());
  serve::ServeOptions options;
  options.host = host;
  options.port = uint16_t(port);
  options.modelName = modelName.empty() ? config->name : modelName;
  options.queueLimit = queueLimit;
  options.maxBodyBytes = maxBodyBytes;
  if (llvm::Error error = serve::serve(session->generator, **tokenizer, options))
    return fail(std::move(error));
  return 0;
}

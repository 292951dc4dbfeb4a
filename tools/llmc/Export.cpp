// llmc export: kernels ahead of time, the kernel table, the link with the
// export runtime, then the payload appended.
#include "tools/llmc/Export.h"

#include "codegen/KernelToCpu/KernelToCpu.h"
#ifdef LLMC_HAVE_NVRTC
#include "codegen/KernelToCuda/CudaCompiler.h"
#endif
#include "frontend/ModelConfig.h"
#include "frontend/Tokenizer.h"
#include "ir/kernel/Artifact.h"
#include "ir/kernel/AtomicFile.h"
#include "ir/kernel/CudaModule.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Serve/ExportPayload.h"
#include "runtime/Weights/Weights.h"
#include "tools/exported/KernelTable.h"
#include "tools/llmc/Inference.h"

#include "llvm/ADT/ScopeExit.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Program.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"
#include "llvm/TargetParser/X86TargetParser.h"

#include <chrono>

using namespace llmc;

namespace {

double secondsSince(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
      .count();
}

/// The archive of the exported binaries' runtime (tools/exported): beside
/// llmc's bin/ in lib/, in the build tree and after `cmake --install`.
llvm::Expected<std::string> exportRuntimeArchive() {
  llvm::SmallString<256> path(llvm::sys::fs::getMainExecutable(
      nullptr, reinterpret_cast<void *>(&exportRuntimeArchive)));
  llvm::sys::path::remove_filename(path);
  llvm::sys::path::append(path, "..", "lib", "libllmc-export-runtime.a");
  llvm::SmallString<256> real;
  if (llvm::sys::fs::real_path(path, real) || !llvm::sys::fs::exists(real))
    return llvm::createStringError(
        "the export runtime " + path +
        " is missing (build the target llmc-export-runtime, or install "
        "llmc with cmake --install)");
  return std::string(real);
}

/// The C++ compiler driver that compiles the table and links: $CXX (its
/// first word; the rest are arguments) or c++ (in a sanitized build, the
/// compiler that built llmc: tools/llmc/CMakeLists.txt).
llvm::Expected<std::vector<std::string>> compilerDriver() {
  std::string spec = LLMC_EXPORT_CXX;
  if (std::optional<std::string> env = llvm::sys::Process::GetEnv("CXX"))
    if (!llvm::StringRef(*env).trim().empty())
      spec = *env;
  llvm::SmallVector<llvm::StringRef> words;
  llvm::StringRef(spec).split(words, ' ', -1, /*KeepEmpty=*/false);
  llvm::ErrorOr<std::string> program = llvm::sys::findProgramByName(words[0]);
  if (!program)
    return llvm::createStringError(
        "llmc export links with the system C++ compiler driver, and '" +
        words[0] + "' (" + (spec == LLMC_EXPORT_CXX ? "the default" : "from $CXX") +
        ") is not found on PATH; install g++ or clang, or set CXX");
  std::vector<std::string> command{*program};
  for (llvm::StringRef word : llvm::ArrayRef(words).drop_front())
    command.push_back(word.str());
  // -DLLMC_SANITIZE=ON: the export runtime is instrumented too.
  llvm::SmallVector<llvm::StringRef> flags;
  llvm::StringRef(LLMC_EXPORT_LINK_FLAGS).split(flags, ' ', -1, false);
  for (llvm::StringRef flag : flags)
    command.push_back(flag.str());
  return command;
}

llvm::Error run(std::vector<std::string> command, llvm::StringRef what,
                llvm::StringRef logFile) {
  std::vector<llvm::StringRef> args(command.begin(), command.end());
  std::optional<llvm::StringRef> redirects[] = {std::nullopt, logFile, logFile};
  std::string error;
  int status = llvm::sys::ExecuteAndWait(args[0], args, std::nullopt, redirects,
                                         0, 0, &error);
  if (status == 0)
    return llvm::Error::success();
  std::string output;
  if (auto buffer = llvm::MemoryBuffer::getFile(logFile))
    output = (*buffer)->getBuffer().take_back(4000).str();
  return llvm::createStringError(
      what + " failed (" +
      (error.empty() ? "exit " + std::to_string(status) : error) +
      "): " + llvm::join(command, " ") + "\n" + output);
}

/// The features the kernels may use, without the '+': those of `cpu` (an
/// x86-64 CPU name), or the host's when `cpu` is empty.
llvm::Expected<std::vector<std::string>>
requiredFeatures(const cpu::CpuTargetOptions &resolved, bool host) {
  std::vector<std::string> features;
  if (host) {
    for (llvm::StringRef feature : llvm::split(resolved.features, ','))
      if (feature.consume_front("+"))
        features.push_back(feature.str());
    return features;
  }
  llvm::SmallVector<llvm::StringRef> names;
  llvm::X86::getFeaturesForCPU(resolved.cpu, names);
  for (llvm::StringRef name : names)
    features.push_back(name.str());
  llvm::sort(features);
  return features;
}

} // namespace

namespace {

/// The flags checked, and the files they name that must exist, before
/// anything is read or compiled (a typo costs no compile); the weights'
/// type --precision asks for.
llvm::Expected<kir::DType> checkOptions(const ExportOptions &options) {
  if (options.output.empty())
    return llvm::createStringError("export: -o NAME is required (the binary "
                                   "to write)");
  llvm::Expected<kir::DType> weightType =
      inferenceWeightType(options.precision);
  if (!weightType)
    return weightType.takeError();
  bool cudaTarget = options.target == "cuda";
  if (options.target != "cpu" && !cudaTarget)
    return llvm::createStringError("--target: expected cpu or cuda, got '" +
                                   options.target + "'");
#ifndef LLMC_HAVE_NVRTC
  if (cudaTarget)
    return llvm::createStringError(
        "--target cuda: this llmc was built without the CUDA toolkit "
        "(NVRTC compiles the binary's kernels)");
#endif
  if (cudaTarget && *weightType != kir::DType::F32)
    return llvm::createStringError(
        "--target cuda --precision " + options.precision +
        ": the 16-bit-weight GEMMs (f32 activations x bf16/f16 weights) "
        "are CPU kernels; a CUDA binary is fp32");
  if (cudaTarget && !options.cpu.empty())
    return llvm::createStringError(
        "--cpu: a --target cuda binary has no CPU kernels to compile for a "
        "CPU");
  if (options.batch < 1)
    return llvm::createStringError("--batch: expected a count >= 1, got " +
                                   llvm::Twine(options.batch));
  if (options.maxContext < 0)
    return llvm::createStringError(
        "--max-context: expected a count >= 1 (0: the model's seq_len), got " +
        llvm::Twine(options.maxContext));
  if (options.prefillChunk < 1)
    return llvm::createStringError(
        "--prefill-chunk: expected a count >= 1, got " +
        llvm::Twine(options.prefillChunk));
  if (!options.cpu.empty()) {
    llvm::Triple host(llvm::sys::getProcessTriple());
    if (!host.isX86() ||
        llvm::X86::parseArchX86(options.cpu, /*Only64Bit=*/true) ==
            llvm::X86::CK_None)
      return llvm::createStringError(
          "--cpu " + options.cpu +
          ": not an x86-64 CPU name LLVM knows (e.g. x86-64-v2, x86-64-v3, "
          "x86-64-v4, skylake-avx512, znver4)");
  }
  // The weights are read last, while the payload is written: a missing
  // file is named now rather than after the kernels have compiled.
  if (!options.weights.empty() && !llvm::sys::fs::exists(options.weights))
    return llvm::createStringError(
        "--weights " + options.weights +
        ": no such file (the weights to export: an llmc checkpoint, an "
        "llm.c .bin or a .safetensors file; without --weights, the seeded "
        "GPT-2 initialization)");
  if (!options.weights.empty() && llvm::sys::fs::is_directory(options.weights))
    return llvm::createStringError("--weights " + options.weights +
                                   ": a directory, not a weights file");
  return weightType;
}

/// The model of the artifact (its config, as llmc generate reads it) and
/// the tokenizer's files to carry in the payload.
struct ExportSource {
  kir::Program artifact;
  mlir::llmc::ModelConfig config;
  std::string vocabJson, merges; // empty for the byte tokenizer
};

llvm::Expected<ExportSource> readExportSource(const ExportOptions &options) {
  llvm::Expected<kir::Program> artifact = kir::readArtifact(options.model);
  if (!artifact)
    return artifact.takeError();
  if (artifact->modelJson.empty())
    return llvm::createStringError(
        options.model + " has no model config (a hand-written model): "
                        "llmc export builds @prefill/@decode from one");
  auto config =
      mlir::llmc::parseModelConfigJson(artifact->modelJson, options.model);
  if (!config)
    return config.takeError();
  auto tokenizer = data::loadTokenizer(options.tokenizer);
  if (!tokenizer)
    return tokenizer.takeError();
  ExportSource source{std::move(*artifact), std::move(*config), {}, {}};
  if (options.tokenizer != "byte")
    for (auto [name, bytes] : {std::pair{"vocab.json", &source.vocabJson},
                               std::pair{"merges.txt", &source.merges}}) {
      llvm::SmallString<256> path(options.tokenizer);
      llvm::sys::path::append(path, name);
      auto buffer = llvm::MemoryBuffer::getFile(path);
      if (!buffer)
        return llvm::createStringError(path + ": " +
                                       buffer.getError().message());
      *bytes = (*buffer)->getBuffer().str();
    }
  return source;
}

/// The kernels of both programs, compiled: for the CPU, one object under
/// the table's symbols (`table`: each program's kernel names); for CUDA,
/// each program's modules (its kernels and the attention library: cubins
/// for sm_80 and sm_90, compute_80 PTX, every launch) for the payload, and
/// an empty table.
struct CompiledKernels {
  llvm::SmallVector<char, 0> object;
  std::vector<char> cudaPrefill, cudaDecode;
  std::vector<std::pair<std::string, std::vector<std::string>>> table;
};

llvm::Expected<CompiledKernels>
compileExportKernels(const InferencePrograms &programs, bool cudaTarget,
                     const cpu::CpuTargetOptions &target,
                     llvm::StringRef cpuName, llvm::raw_ostream &log) {
  CompiledKernels compiled;
  std::vector<kir::Kernel> kernels;
  for (auto [name, program] : {std::pair{"prefill", &programs.prefill},
                               std::pair{"decode", &programs.decode}}) {
    compiled.table.push_back({name, {}});
    if (cudaTarget)
      continue;
    for (auto [index, kernel] : llvm::enumerate(program->kernels)) {
      compiled.table.back().second.push_back(kernel.name);
      kernels.push_back(kernel);
      kernels.back().name = exported::kernelSymbol(name, index);
    }
  }
  auto compileStart = std::chrono::steady_clock::now();
  if (cudaTarget) {
#ifdef LLMC_HAVE_NVRTC
    for (auto [program, bytes] :
         {std::pair{&programs.prefill, &compiled.cudaPrefill},
          std::pair{&programs.decode, &compiled.cudaDecode}}) {
      llvm::Expected<cuda::CudaModules> modules =
          cuda::compileCudaModules(*program);
      if (!modules)
        return modules.takeError();
      *bytes = cuda::serializeCudaModules(*modules);
    }
    log << llvm::format("llmc: %zu CUDA kernels (@prefill %zu, @decode %zu) "
                        "and the attention library compiled by NVRTC for "
                        "sm_80, sm_90 and compute_80 PTX in %.2f s\n",
                        programs.prefill.kernels.size() +
                            programs.decode.kernels.size(),
                        programs.prefill.kernels.size(),
                        programs.decode.kernels.size(),
                        secondsSince(compileStart));
#endif
    return compiled;
  }
  llvm::Expected<llvm::SmallVector<char, 0>> object =
      cpu::compileKernelsToObject(kernels, target);
  if (!object)
    return object.takeError();
  compiled.object = std::move(*object);
  log << llvm::format("llmc: %zu kernels (@prefill %zu, @decode %zu) "
                      "compiled for %s in %.2f s\n",
                      kernels.size(), programs.prefill.kernels.size(),
                      programs.decode.kernels.size(), cpuName.str().c_str(),
                      secondsSince(compileStart));
  return compiled;
}

/// The executable: the kernel table compiled and linked with the kernels'
/// object (none for CUDA) and the export runtime by the system's C++
/// driver, in a temporary directory removed on the way out.
llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>>
linkExecutable(const CompiledKernels &compiled, bool cudaTarget,
               const std::vector<std::string> &driver,
               const std::string &archive, llvm::raw_ostream &log) {
  llvm::SmallString<128> dir;
  if (std::error_code error =
          llvm::sys::fs::createUniqueDirectory("llmc-export", dir))
    return llvm::createStringError("cannot create a temporary directory: " +
                                   error.message());
  llvm::scope_exit cleanup(
      [&] { llvm::sys::fs::remove_directories(dir); });
  auto inDir = [&](llvm::StringRef name) {
    llvm::SmallString<128> path(dir);
    llvm::sys::path::append(path, name);
    return std::string(path);
  };
  std::string objectPath = inDir("kernels.o"), tablePath = inDir("table.cpp");
  std::string tableObject = inDir("table.o"), exePath = inDir("binary");
  std::string logPath = inDir("driver.log");
  std::string tableSource = exported::kernelTableSource(compiled.table);
  for (auto [path, bytes] :
       {std::pair{objectPath, llvm::StringRef(compiled.object.data(),
                                              compiled.object.size())},
        std::pair{tablePath, llvm::StringRef(tableSource)}}) {
    std::error_code error;
    llvm::raw_fd_ostream os(path, error);
    if (error)
      return llvm::createStringError(path + ": " + error.message());
    os << bytes;
  }
  std::vector<std::string> compile = driver;
  for (const char *arg : {"-c", "-O1", "-fPIC", "-o"})
    compile.push_back(arg);
  compile.push_back(tableObject);
  compile.push_back(tablePath);
  if (llvm::Error error = run(compile, "compiling the kernel table", logPath))
    return error;
  // LLVM Support (ADT, Error, the command line, the host CPU's features)
  // statically: the binary needs no LLVM or MLIR library.
  std::vector<std::string> link = driver;
  link.insert(link.end(), {"-o", exePath});
  if (!cudaTarget)
    link.push_back(objectPath);
  link.insert(link.end(), {tableObject, archive});
  for (const char *library :
       {"libLLVMTargetParser.a", "libLLVMSupport.a", "libLLVMDemangle.a"}) {
    llvm::SmallString<256> path(LLMC_LLVM_LIBRARY_DIR);
    llvm::sys::path::append(path, library);
    link.push_back(std::string(path));
  }
  // libdl for the CUDA runtime's dlopen of libcuda and cuBLASLt (in libc
  // since glibc 2.34; named for older ones).
  link.insert(link.end(), {"-Wl,--as-needed", LLMC_OPENBLAS_LIBRARY,
                           "-lpthread", "-lm", "-ldl"});
  auto linkStart = std::chrono::steady_clock::now();
  if (llvm::Error error = run(link, "linking the binary", logPath))
    return error;
  log << llvm::format("llmc: linked with %s in %.2f s\n", driver[0].c_str(),
                      secondsSince(linkStart));
  auto executable = llvm::MemoryBuffer::getFile(exePath, /*IsText=*/false,
                                                /*RequiresNullTerminator=*/
                                                false);
  if (!executable)
    return llvm::createStringError(exePath + ": " +
                                   executable.getError().message());
  return std::move(*executable);
}

/// Appends the weights section: each tensor of @prefill's parameters, read
/// from `options.weights` (or initialized from the seed), checked against
/// the model's shape and type, 64-byte aligned in a page-aligned section as
/// the store would hold them, so the binary maps them in place.
llvm::Error writeWeightsSection(runtime::PayloadWriter &writer,
                                const kir::Program &prefill,
                                const ExportOptions &options,
                                runtime::ExportManifest &manifest) {
  writer.begin("weights", 4096);
  if (llvm::Error error = runtime::readProgramWeights(
          prefill, options.weights, options.seed,
          [&](const std::string &name,
              const runtime::HostTensor &tensor) -> llvm::Error {
            const kir::Binding *param = nullptr;
            for (const kir::Binding &binding : prefill.params)
              if (binding.name == name)
                param = &binding;
            const kir::Buffer &buffer = prefill.buffers[param->buffer];
            if (tensor.shape != buffer.shape || tensor.dtype != buffer.dtype)
              return llvm::createStringError(
                  "tensor '" + name + "' is " + kir::dtypeName(tensor.dtype) +
                  kir::formatShape(tensor.shape) + ", the model expects " +
                  kir::dtypeName(buffer.dtype) +
                  kir::formatShape(buffer.shape));
            writer.pad(kir::kArenaAlignment);
            manifest.weights.push_back({name, tensor.dtype, tensor.shape,
                                        writer.sectionSize(),
                                        uint64_t(tensor.bytes.size())});
            writer.write(llvm::ArrayRef<char>(
                reinterpret_cast<const char *>(tensor.bytes.data()),
                tensor.bytes.size()));
            return llvm::Error::success();
          }))
    return error;
  manifest.weightsBytes = writer.sectionSize();
  writer.end();
  manifest.weightsChecksum = writer.checksumOf("weights");
  return llvm::Error::success();
}

/// Writes `options.output` atomically: the executable, then the payload
/// (both programs, the CUDA modules, the tokenizer's files, the weights and
/// the manifest last), and makes it executable.
llvm::Error writeExportedBinary(const ExportOptions &options,
                                const ExportSource &source,
                                const InferencePrograms &programs,
                                const CompiledKernels &compiled,
                                llvm::StringRef executable,
                                runtime::ExportManifest &manifest) {
  const kir::Program &prefill = programs.prefill;
  for (const kir::Binding &param : programs.decode.params)
    if (llvm::none_of(prefill.params, [&](const kir::Binding &other) {
          return other.name == param.name;
        }))
      return llvm::createStringError("@decode has a parameter '" + param.name +
                                     "' that @prefill lacks");
  std::vector<uint8_t> prefillBytes = kir::serializeProgram(prefill);
  std::vector<uint8_t> decodeBytes = kir::serializeProgram(programs.decode);
  auto asChars = [](const std::vector<uint8_t> &bytes) {
    return llvm::ArrayRef<char>(reinterpret_cast<const char *>(bytes.data()),
                                bytes.size());
  };
  bool cudaTarget = options.target == "cuda";
  llvm::Error written = kir::writeFileAtomically(
      options.output, [&](llvm::raw_ostream &os) -> llvm::Error {
        os << executable;
        runtime::PayloadWriter writer(os, executable.size());
        writer.add("prefill", asChars(prefillBytes));
        writer.add("decode", asChars(decodeBytes));
        if (cudaTarget) {
          writer.add("cuda.prefill", compiled.cudaPrefill);
          writer.add("cuda.decode", compiled.cudaDecode);
        }
        if (manifest.tokenizer != "byte") {
          writer.add("tokenizer.vocab", source.vocabJson);
          writer.add("tokenizer.merges", source.merges);
        }
        if (llvm::Error error =
                writeWeightsSection(writer, prefill, options, manifest))
          return error;
        writer.add("manifest", manifest.toJson());
        writer.finish();
        return llvm::Error::success();
      });
  if (written)
    return written;
  if (std::error_code error = llvm::sys::fs::setPermissions(
          options.output, llvm::sys::fs::all_read | llvm::sys::fs::all_exe |
                              llvm::sys::fs::owner_write))
    return llvm::createStringError(options.output + ": " + error.message());
  return llvm::Error::success();
}

} // namespace

llvm::Error llmc::exportBinary(mlir::MLIRContext &context,
                               const ExportOptions &options,
                               llvm::raw_ostream &log) {
  auto started = std::chrono::steady_clock::now();
  llvm::Expected<kir::DType> weightType = checkOptions(options);
  if (!weightType)
    return weightType.takeError();
  bool cudaTarget = options.target == "cuda";
  llvm::Expected<std::string> archive = exportRuntimeArchive();
  if (!archive)
    return archive.takeError();
  llvm::Expected<std::vector<std::string>> driver = compilerDriver();
  if (!driver)
    return driver.takeError();
  llvm::Expected<ExportSource> source = readExportSource(options);
  if (!source)
    return source.takeError();

  mlir::llmc::InferenceShape shape;
  shape.batch = options.batch;
  shape.maxContext =
      options.maxContext ? options.maxContext : source->config.seqLen;
  shape.prefillTokens = std::min(options.prefillChunk, shape.maxContext);
  llvm::Expected<InferencePrograms> programs =
      buildInferencePrograms(context, source->config, shape, *weightType);
  if (!programs)
    return programs.takeError();

  cpu::CpuTargetOptions target;
  target.cpu = options.cpu;
  cpu::CpuTargetOptions resolved = cpu::resolveTarget(target);
  llvm::Expected<std::vector<std::string>> features =
      cudaTarget ? std::vector<std::string>()
                 : requiredFeatures(resolved, options.cpu.empty());
  if (!features)
    return features.takeError();
  llvm::Expected<CompiledKernels> compiled = compileExportKernels(
      *programs, cudaTarget, target, resolved.cpu, log);
  if (!compiled)
    return compiled.takeError();
  llvm::Expected<std::unique_ptr<llvm::MemoryBuffer>> executable =
      linkExecutable(*compiled, cudaTarget, *driver, *archive, log);
  if (!executable)
    return executable.takeError();

  runtime::ExportManifest manifest;
  manifest.llmcVersion = LLMC_GIT_COMMIT;
  manifest.modelName = source->config.name;
  manifest.modelJson = source->artifact.modelJson;
  manifest.precision = options.precision;
  manifest.target = options.target;
  manifest.batch = shape.batch;
  manifest.maxContext = shape.maxContext;
  manifest.prefillChunk = shape.prefillTokens;
  manifest.cpu = resolved.cpu;
  manifest.cpuFeatures = *features;
  manifest.prefillKernels = int64_t(programs->prefill.kernels.size());
  manifest.decodeKernels = int64_t(programs->decode.kernels.size());
  manifest.tokenizer = options.tokenizer == "byte" ? "byte" : "gpt2-bpe";
  if (llvm::Error error = writeExportedBinary(
          options, *source, *programs, *compiled,
          (*executable)->getBuffer(), manifest))
    return error;
  uint64_t size = 0;
  llvm::sys::fs::file_size(options.output, size);
  log << llvm::format("llmc: wrote %s: %.1f MB (executable %.1f MB, weights "
                      "%.1f MB) in %.2f s\n",
                      options.output.c_str(), size / 1e6,
                      (*executable)->getBufferSize() / 1e6,
                      manifest.weightsBytes / 1e6, secondsSince(started));
  return llvm::Error::success();
}

llvm::Error llmc::printExportedBinary(llvm::StringRef path,
                                      llvm::raw_ostream &os) {
  auto payload = runtime::Payload::open(path);
  if (!payload)
    return payload.takeError();
  if (llvm::Error error = (*payload)->verify())
    return error;
  auto manifest = runtime::readManifest(**payload);
  if (!manifest)
    return manifest.takeError();
  runtime::printExportInfo(**payload, *manifest, os);
  return llvm::Error::success();
}

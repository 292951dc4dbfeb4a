// NVRTC through dlopen, its error messages with source lines, and the
// on-disk cache of compiled CUDA binaries.
//
// A cache entry is `<directory>/cuda-<key>.bin.llmc` of the shared on-disk
// cache (ir/kernel/DiskCache.h, magic "LLMCCUB1"), whose payload is
//   u32 cubin count, then per cubin u32 arch, u64 size, bytes;
//   u32 PTX arch, u64 PTX size, PTX text.
// One that fails a check is recompiled and replaced.
#include "codegen/KernelToCuda/Nvrtc.h"

#include "ir/kernel/DiskCache.h"

#include <nvrtc.h> // types only: the functions are looked up with dlsym

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/Endian.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/raw_ostream.h"

#include <dlfcn.h>

#include <chrono>
#include <cstring>
#include <mutex>

using namespace llmc;
using namespace llmc::cuda;

#ifndef LLMC_CUDA_INCLUDE_DIR
#define LLMC_CUDA_INCLUDE_DIR ""
#endif
#ifndef LLMC_CUDA_LIBRARY_DIR
#define LLMC_CUDA_LIBRARY_DIR ""
#endif

//===----------------------------------------------------------------------===//
// Loading libnvrtc
//===----------------------------------------------------------------------===//

namespace {

/// The NVRTC functions llmc calls; each member has the type of the
/// function it is named after (from nvrtc.h).
struct NvrtcApi {
  decltype(&::nvrtcVersion) version;
  decltype(&::nvrtcGetErrorString) getErrorString;
  decltype(&::nvrtcCreateProgram) createProgram;
  decltype(&::nvrtcDestroyProgram) destroyProgram;
  decltype(&::nvrtcCompileProgram) compileProgram;
  decltype(&::nvrtcGetProgramLogSize) getProgramLogSize;
  decltype(&::nvrtcGetProgramLog) getProgramLog;
  decltype(&::nvrtcGetCUBINSize) getCubinSize;
  decltype(&::nvrtcGetCUBIN) getCubin;
  decltype(&::nvrtcGetPTXSize) getPtxSize;
  decltype(&::nvrtcGetPTX) getPtx;
  int major = 0, minor = 0;
};

struct LoadedNvrtc {
  NvrtcApi api;
  std::string error; // empty when api is usable
};

/// Library names tried in order: $LLMC_NVRTC_LIBRARY, the sonames of the
/// CUDA majors llmc supports, the unversioned name, then the same in the
/// toolkit llmc was built against (for machines without it on the loader's
/// path).
std::vector<std::string> candidateLibraries() {
  std::vector<std::string> names;
  if (std::optional<std::string> path =
          llvm::sys::Process::GetEnv("LLMC_NVRTC_LIBRARY"))
    if (!path->empty())
      names.push_back(*path);
  for (const char *name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
    names.push_back(name);
  llvm::StringRef toolkit = LLMC_CUDA_LIBRARY_DIR;
  if (!toolkit.empty())
    for (const char *name : {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"})
      names.push_back((toolkit + "/" + name).str());
  return names;
}

const LoadedNvrtc &loadNvrtc() {
  static LoadedNvrtc loaded;
  static std::once_flag once;
  std::call_once(once, [] {
    void *handle = nullptr;
    std::vector<std::string> names = candidateLibraries();
    for (const std::string &name : names)
      if ((handle = dlopen(name.c_str(), RTLD_NOW | RTLD_LOCAL)))
        break;
    if (!handle) {
      loaded.error = "NVRTC is not installed: none of " +
                     llvm::join(names, ", ") +
                     " could be loaded (install the CUDA toolkit's NVRTC, "
                     "e.g. the cuda-nvrtc package, or set LLMC_NVRTC_LIBRARY "
                     "to libnvrtc.so's path)";
      return;
    }
    std::string missing;
    auto bind = [&](auto &slot, const char *symbol) {
      slot = reinterpret_cast<std::remove_reference_t<decltype(slot)>>(
          dlsym(handle, symbol));
      if (!slot)
        missing += std::string(missing.empty() ? "" : ", ") + symbol;
    };
    NvrtcApi &api = loaded.api;
    bind(api.version, "nvrtcVersion");
    bind(api.getErrorString, "nvrtcGetErrorString");
    bind(api.createProgram, "nvrtcCreateProgram");
    bind(api.destroyProgram, "nvrtcDestroyProgram");
    bind(api.compileProgram, "nvrtcCompileProgram");
    bind(api.getProgramLogSize, "nvrtcGetProgramLogSize");
    bind(api.getProgramLog, "nvrtcGetProgramLog");
    bind(api.getCubinSize, "nvrtcGetCUBINSize");
    bind(api.getCubin, "nvrtcGetCUBIN");
    bind(api.getPtxSize, "nvrtcGetPTXSize");
    bind(api.getPtx, "nvrtcGetPTX");
    if (!missing.empty()) {
      loaded.error = "the loaded libnvrtc lacks " + missing +
                     " (an NVRTC older than CUDA 11.1?)";
      return;
    }
    if (api.version(&api.major, &api.minor) != NVRTC_SUCCESS)
      loaded.error = "nvrtcVersion failed";
  });
  return loaded;
}

llvm::Expected<const NvrtcApi *> getNvrtc() {
  const LoadedNvrtc &loaded = loadNvrtc();
  if (!loaded.error.empty())
    return llvm::createStringError(loaded.error);
  return &loaded.api;
}

//===----------------------------------------------------------------------===//
// Compiling
//===----------------------------------------------------------------------===//

/// The include directory holding cuda_fp16.h, for NVRTCs without built-in
/// copies: $CUDA_HOME/include or $CUDA_PATH/include, else the toolkit llmc
/// was built against.
std::string cudaIncludeDirectory() {
  for (const char *variable : {"CUDA_HOME", "CUDA_PATH"})
    if (std::optional<std::string> home = llvm::sys::Process::GetEnv(variable)) {
      llvm::SmallString<256> path(*home);
      llvm::sys::path::append(path, "include");
      if (llvm::sys::fs::exists(path + "/cuda_fp16.h"))
        return std::string(path);
    }
  return LLMC_CUDA_INCLUDE_DIR;
}

/// Options common to every compilation. No --use_fast_math: expf, logf,
/// division and sqrt stay accurate (KernelToCuda.cpp's numerics contract);
/// --fmad=true is NVRTC's default, written out because it changes results.
std::vector<std::string> baseOptions(const NvrtcOptions &options) {
  std::vector<std::string> list = {"-std=c++17", "--fmad=true"};
  std::string include = cudaIncludeDirectory();
  if (!include.empty())
    list.push_back("-I" + include);
  for (const std::string &extra : options.extraOptions)
    list.push_back(extra);
  return list;
}

/// NVRTC's log, with the source line each "name(LINE): " message points at
/// quoted below it.
std::string annotateLog(llvm::StringRef log, llvm::StringRef source,
                        llvm::StringRef name) {
  llvm::SmallVector<llvm::StringRef> sourceLines;
  source.split(sourceLines, '\n');
  std::string out;
  llvm::raw_string_ostream os(out);
  llvm::SmallVector<llvm::StringRef> logLines;
  log.split(logLines, '\n');
  for (llvm::StringRef line : logLines) {
    if (line.trim().empty())
      continue;
    os << "  " << line << "\n";
    llvm::StringRef rest = line;
    if (!rest.consume_front(name) || !rest.consume_front("("))
      continue;
    unsigned number = 0;
    if (rest.consumeInteger(10, number) || !rest.starts_with(")"))
      continue;
    if (number >= 1 && number <= sourceLines.size())
      os << llvm::formatv("  {0,6} | {1}\n", number,
                          sourceLines[number - 1].rtrim());
  }
  return out;
}

/// One NVRTC program: compile `source` with `options`, then take the cubin
/// (sm_ arch) or the PTX (compute_ arch).
llvm::Error compileOnce(const NvrtcApi &api, llvm::StringRef source,
                        llvm::StringRef name,
                        const std::vector<std::string> &options, bool ptx,
                        std::vector<uint8_t> &out, std::string &warnings) {
  std::string sourceText = source.str(), nameText = name.str();
  nvrtcProgram program;
  nvrtcResult result = api.createProgram(&program, sourceText.c_str(),
                                         nameText.c_str(), 0, nullptr, nullptr);
  if (result != NVRTC_SUCCESS)
    return llvm::createStringError(std::string("nvrtcCreateProgram: ") +
                                   api.getErrorString(result));
  std::vector<const char *> argv;
  for (const std::string &option : options)
    argv.push_back(option.c_str());
  result = api.compileProgram(program, int(argv.size()), argv.data());
  size_t logSize = 0;
  std::string log;
  if (api.getProgramLogSize(program, &logSize) == NVRTC_SUCCESS &&
      logSize > 1) {
    log.resize(logSize);
    api.getProgramLog(program, log.data());
    log.resize(std::strlen(log.c_str()));
  }
  if (result != NVRTC_SUCCESS) {
    api.destroyProgram(&program);
    return llvm::createStringError(
        "NVRTC failed to compile " + name + " (" + llvm::join(options, " ") +
        "): " + api.getErrorString(result) + "\n" +
        annotateLog(log, source, name));
  }
  if (!log.empty() && warnings.find(log) == std::string::npos)
    warnings += log;
  size_t size = 0;
  result = ptx ? api.getPtxSize(program, &size)
               : api.getCubinSize(program, &size);
  if (result == NVRTC_SUCCESS) {
    out.resize(size);
    result = ptx ? api.getPtx(program, reinterpret_cast<char *>(out.data()))
                 : api.getCubin(program, reinterpret_cast<char *>(out.data()));
  }
  api.destroyProgram(&program);
  if (result != NVRTC_SUCCESS)
    return llvm::createStringError(std::string("NVRTC: reading the ") +
                                   (ptx ? "PTX" : "cubin") + " failed: " +
                                   api.getErrorString(result));
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// The cache
//===----------------------------------------------------------------------===//

std::string serializeBinaries(const CudaBinaries &binaries) {
  std::string payload;
  auto u32 = [&](uint32_t value) {
    char bytes[4];
    llvm::support::endian::write32le(bytes, value);
    payload.append(bytes, 4);
  };
  auto u64 = [&](uint64_t value) {
    char bytes[8];
    llvm::support::endian::write64le(bytes, value);
    payload.append(bytes, 8);
  };
  u32(binaries.cubins.size());
  for (const Cubin &cubin : binaries.cubins) {
    u32(cubin.arch);
    u64(cubin.bytes.size());
    payload.append(cubin.bytes.begin(), cubin.bytes.end());
  }
  u32(binaries.ptxArch);
  u64(binaries.ptx.size());
  payload += binaries.ptx;
  return payload;
}

/// The binaries of a checked entry's payload, or nothing.
std::optional<CudaBinaries> parsePayload(llvm::StringRef payload) {
  // The digest matched, so the payload is what a writer wrote; the reads
  // are still bounds-checked.
  size_t at = 0;
  auto take = [&](size_t n) -> std::optional<llvm::StringRef> {
    if (payload.size() - at < n)
      return std::nullopt;
    llvm::StringRef bytes = payload.substr(at, n);
    at += n;
    return bytes;
  };
  auto u32 = [&]() -> std::optional<uint32_t> {
    auto bytes = take(4);
    if (!bytes)
      return std::nullopt;
    return llvm::support::endian::read32le(bytes->data());
  };
  auto u64 = [&]() -> std::optional<uint64_t> {
    auto bytes = take(8);
    if (!bytes)
      return std::nullopt;
    return llvm::support::endian::read64le(bytes->data());
  };
  CudaBinaries binaries;
  std::optional<uint32_t> count = u32();
  if (!count || *count > 64)
    return std::nullopt;
  for (uint32_t i = 0; i < *count; ++i) {
    std::optional<uint32_t> arch = u32();
    std::optional<uint64_t> length = u64();
    std::optional<llvm::StringRef> bytes =
        length ? take(*length) : std::nullopt;
    if (!arch || !bytes)
      return std::nullopt;
    binaries.cubins.push_back({int(*arch), {bytes->bytes_begin(), bytes->bytes_end()}});
  }
  std::optional<uint32_t> ptxArch = u32();
  std::optional<uint64_t> ptxSize = u64();
  std::optional<llvm::StringRef> ptx = ptxSize ? take(*ptxSize) : std::nullopt;
  if (!ptxArch || !ptx || at != payload.size())
    return std::nullopt;
  binaries.ptxArch = int(*ptxArch);
  binaries.ptx = ptx->str();
  return binaries;
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

bool llmc::cuda::nvrtcAvailable(std::string *why) {
  const LoadedNvrtc &loaded = loadNvrtc();
  if (why)
    *why = loaded.error;
  return loaded.error.empty();
}

llvm::Expected<std::pair<int, int>> llmc::cuda::nvrtcVersion() {
  llvm::Expected<const NvrtcApi *> api = getNvrtc();
  if (!api)
    return api.takeError();
  return std::make_pair((*api)->major, (*api)->minor);
}

llvm::Expected<CudaBinaries> llmc::cuda::compileCuda(llvm::StringRef source,
                                                     llvm::StringRef name,
                                                     const NvrtcOptions &options,
                                                     NvrtcStats *stats) {
  NvrtcStats local;
  NvrtcStats &s = stats ? *stats : local;
  s = NvrtcStats();
  llvm::Expected<const NvrtcApi *> loaded = getNvrtc();
  if (!loaded)
    return loaded.takeError();
  const NvrtcApi &api = **loaded;
  std::vector<std::string> common = baseOptions(options);

  // The key covers everything the binaries depend on.
  kir::DiskCache cache(options.cacheDirectory, options.cacheEnabled,
                       "LLMCCUB1", "cuda-", ".bin.llmc");
  if (cache.enabled()) {
    kir::CacheKey key;
    key.add("llmc nvrtc v1");
    key.add(llvm::formatv("nvrtc {0}.{1}", api.major, api.minor).str());
    key.add(name);
    key.add(llvm::join(common, " "));
    for (int arch : options.archs)
      key.add("sm_" + std::to_string(arch));
    key.add("compute_" + std::to_string(options.ptxArch));
    key.add(source);
    s.cachePath = cache.entryPath(key.hex());
    kir::CacheEntry entry = cache.read(s.cachePath);
    if (entry.state == kir::CacheEntry::State::Valid)
      if (std::optional<CudaBinaries> cached = parsePayload(entry.payload)) {
        s.cacheHit = true;
        return std::move(*cached);
      }
    s.corruptEntry = entry.state != kir::CacheEntry::State::Missing;
  }

  auto start = std::chrono::steady_clock::now();
  CudaBinaries binaries;
  for (int arch : options.archs) {
    std::vector<std::string> list = common;
    list.push_back("--gpu-architecture=sm_" + std::to_string(arch));
    Cubin cubin;
    cubin.arch = arch;
    if (llvm::Error error = compileOnce(api, source, name, list, false,
                                        cubin.bytes, binaries.log))
      return error;
    ++s.compilations;
    binaries.cubins.push_back(std::move(cubin));
  }
  if (options.ptxArch > 0) {
    std::vector<std::string> list = common;
    list.push_back("--gpu-architecture=compute_" +
                   std::to_string(options.ptxArch));
    std::vector<uint8_t> ptx;
    if (llvm::Error error =
            compileOnce(api, source, name, list, true, ptx, binaries.log))
      return error;
    ++s.compilations;
    // The PTX size includes its NUL; the string holds the text.
    binaries.ptx.assign(ptx.begin(), ptx.end());
    binaries.ptx.resize(std::strlen(binaries.ptx.c_str()));
    binaries.ptxArch = options.ptxArch;
  }
  s.compileSeconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start)
          .count();
  if (!s.cachePath.empty())
    if (llvm::Error error =
            cache.write(s.cachePath, serializeBinaries(binaries)))
      s.warning = "CUDA binary cache not written: " +
                  llvm::toString(std::move(error));
  return binaries;
}

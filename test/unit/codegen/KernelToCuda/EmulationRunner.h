// Running emitted CUDA kernels on the CPU under CudaEmulation.h: the module
// source is compiled with the host C++ compiler into a shared library,
// loaded, and each kernel launched with its emitted configuration.
#ifndef LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_EMULATIONRUNNER_H
#define LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_EMULATIONRUNNER_H

#include "codegen/KernelToCuda/KernelToCuda.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Program.h"
#include "llvm/Support/raw_ostream.h"

#include <dlfcn.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

#ifndef LLMC_HOST_CXX
#error "LLMC_HOST_CXX (the host C++ compiler) must be defined by the build"
#endif
#ifndef LLMC_SOURCE_DIR
#error "LLMC_SOURCE_DIR must be defined by the build"
#endif

namespace llmc::test {

/// CUDA C++ `source` compiled with the host compiler against
/// CudaEmulation.h into a shared library, loaded; the directory it was
/// built in is removed with it. Empty cuda_fp16.h and cuda_bf16.h stand in
/// for the toolkit's (the emulation header defines their types).
class EmulatedLibrary {
public:
  /// Null, with `error` set (the compiler's output included), on failure.
  static std::unique_ptr<EmulatedLibrary> build(llvm::StringRef source,
                                                std::string &error) {
    std::unique_ptr<EmulatedLibrary> library(new EmulatedLibrary());
    llvm::SmallString<128> dir;
    if (std::error_code ec =
            llvm::sys::fs::createUniqueDirectory("llmc-cuda-emu", dir)) {
      error = "cannot create a temporary directory: " + ec.message();
      return nullptr;
    }
    library->directory = std::string(dir);
    auto write = [&](llvm::StringRef name, llvm::StringRef text) {
      std::error_code ec;
      llvm::raw_fd_ostream os((dir + "/" + name).str(), ec);
      os << text;
      return !ec;
    };
    const char *stub = "// Empty: CudaEmulation.h defines the types.\n";
    if (!write("module.cpp", source) || !write("cuda_fp16.h", stub) ||
        !write("cuda_bf16.h", stub)) {
      error = "cannot write the emulation sources to " + library->directory;
      return nullptr;
    }
    std::string path = library->directory + "/module.so";
    std::string log = library->directory + "/compile.log";
    std::string header = std::string(LLMC_SOURCE_DIR) +
                         "/test/unit/codegen/KernelToCuda/CudaEmulation.h";
    std::vector<std::string> args = {LLMC_HOST_CXX, "-std=c++17", "-O1",
                                     "-shared", "-fPIC", "-w",
                                     "-I" + library->directory, "-include",
                                     header, "-o", path,
                                     library->directory + "/module.cpp"};
    std::vector<llvm::StringRef> argv(args.begin(), args.end());
    std::optional<llvm::StringRef> redirects[] = {std::nullopt,
                                                   llvm::StringRef(log),
                                                   llvm::StringRef(log)};
    std::string message;
    int rc = llvm::sys::ExecuteAndWait(args[0], argv, std::nullopt, redirects,
                                       0, 0, &message);
    if (rc != 0) {
      auto text = llvm::MemoryBuffer::getFile(log);
      error = "host compile of the CUDA source failed (" + message + "):\n" +
              (text ? (*text)->getBuffer().str() : std::string());
      return nullptr;
    }
    library->handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!library->handle) {
      error = std::string("dlopen: ") + dlerror();
      return nullptr;
    }
    return library;
  }

  /// The symbol `name` (an extern "C" function), or null.
  void *lookup(const std::string &name) const {
    return dlsym(handle, name.c_str());
  }

  ~EmulatedLibrary() {
    if (handle)
      dlclose(handle);
    if (!directory.empty())
      llvm::sys::fs::remove_directories(directory);
  }

private:
  EmulatedLibrary() = default;
  std::string directory;
  void *handle = nullptr;
};

/// Kernels of one emitted module, compiled for emulation. Launch wrappers
/// `llmc_emu_run_<name>(args, grid, block)` are appended to the source, one
/// per kernel, so the test can call each with untyped operand pointers.
class EmulatedModule {
public:
  using RunFn = void (*)(void *const *args, const long long *grid,
                         const int *block);

  /// Compiles `kernels`' module. Returns null and sets `error` on failure
  /// (the compiler's output included).
  static std::unique_ptr<EmulatedModule>
  build(llvm::ArrayRef<kir::Kernel> kernels, std::string &error) {
    std::unique_ptr<EmulatedModule> module(new EmulatedModule());
    std::string source = cuda::emitCudaModule(kernels);
    source += "\n// Launch wrappers for the emulation test.\n";
    for (const kir::Kernel &kernel : kernels) {
      cuda::CudaKernel emitted = cuda::emitCudaKernel(kernel);
      module->launches[kernel.name] = emitted.launch;
      source += "extern \"C\" void llmc_emu_run_" + kernel.name +
                "(void *const *args, const long long *grid, const int "
                "*block) {\n  llmc_emu::launch(grid, block, [&] { " +
                kernel.name + "(";
      for (size_t i = 0; i < kernel.operands.size(); ++i)
        source += (i ? ", " : "") + std::string("llmc_emu::AnyPtr{args[") +
                  std::to_string(i) + "]}";
      source += "); });\n}\n";
    }
    module->library = EmulatedLibrary::build(source, error);
    if (!module->library)
      return nullptr;
    for (const kir::Kernel &kernel : kernels) {
      void *fn = module->library->lookup("llmc_emu_run_" + kernel.name);
      if (!fn) {
        error = "no launch wrapper for " + kernel.name;
        return nullptr;
      }
      module->functions[kernel.name] = reinterpret_cast<RunFn>(fn);
    }
    return module;
  }

  /// Launches `name` with its emitted configuration (or `gridOverride`
  /// blocks, to check that any grid covers the domain).
  void run(const std::string &name, const std::vector<void *> &operands,
           long long gridOverride = 0) const {
    const cuda::CudaLaunch &launch = launches.at(name);
    long long grid[3] = {launch.grid[0], launch.grid[1], launch.grid[2]};
    if (gridOverride > 0)
      grid[0] = gridOverride;
    functions.at(name)(operands.data(), grid, launch.block);
  }

  const cuda::CudaLaunch &launch(const std::string &name) const {
    return launches.at(name);
  }

private:
  EmulatedModule() = default;
  std::unique_ptr<EmulatedLibrary> library;
  std::map<std::string, RunFn> functions;
  std::map<std::string, cuda::CudaLaunch> launches;
};

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_EMULATIONRUNNER_H

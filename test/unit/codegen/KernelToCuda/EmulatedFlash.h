// The flash attention library module (codegen/KernelToCuda/FlashAttention.h)
// compiled with the host compiler against CudaEmulation.h, with a launch
// wrapper per kernel that takes the kernel's one argument block.
#ifndef LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_EMULATEDFLASH_H
#define LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_EMULATEDFLASH_H

#include "test/unit/codegen/KernelToCuda/EmulationRunner.h"

#include "codegen/KernelToCuda/FlashAttention.h"

namespace llmc::test {

class EmulatedFlash {
public:
  using RunFn = void (*)(const void *args, const long long *grid,
                         const int *block);

  /// Null, with `error` set, when the host compile fails.
  static std::unique_ptr<EmulatedFlash>
  build(llvm::ArrayRef<cuda::FlashAttentionVariant> variants,
        std::string &error) {
    // CudaEmulation.h has the xor and down shuffles; the kernels also
    // broadcast a lane with __shfl_sync.
    std::string source =
        "template <typename T>\n"
        "inline T __shfl_sync(unsigned mask, T value, int lane, int = 32) {\n"
        "  return llmc_emu_shuffle(mask, value, lane);\n}\n";
    source += cuda::emitFlashAttentionModule(variants);
    std::vector<std::string> names;
    for (const cuda::FlashAttentionVariant &variant : variants)
      for (auto [name, type] :
           {std::pair{cuda::flashForwardName(variant), "llmc_attn_fwd_args"},
            std::pair{cuda::flashBackwardDkDvName(variant),
                      "llmc_attn_bwd_args"},
            std::pair{cuda::flashBackwardDqName(variant),
                      "llmc_attn_bwd_args"}}) {
        source += "extern \"C\" void run_" + name +
                  "(const void *args, const long long *grid, const int "
                  "*block) {\n  llmc_emu::launch(grid, block, [&] { " +
                  name + "(*(const " + type + " *)args); });\n}\n";
        names.push_back(name);
      }
    std::unique_ptr<EmulatedFlash> module(new EmulatedFlash());
    module->library = EmulatedLibrary::build(source, error);
    if (!module->library)
      return nullptr;
    for (const std::string &name : names) {
      void *fn = module->library->lookup("run_" + name);
      if (!fn) {
        error = "no launch wrapper for " + name;
        return nullptr;
      }
      module->functions[name] = reinterpret_cast<RunFn>(fn);
    }
    return module;
  }

  /// Runs kernel `name` on `args` (its argument block) with `launch`.
  void run(const std::string &name, const void *args,
           const cuda::CudaLaunch &launch) const {
    long long grid[3] = {launch.grid[0], launch.grid[1], launch.grid[2]};
    functions.at(name)(args, grid, launch.block);
  }

private:
  EmulatedFlash() = default;
  std::unique_ptr<EmulatedLibrary> library;
  std::map<std::string, RunFn> functions;
};

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_EMULATEDFLASH_H

// The table an exported binary finds its kernels by: `llmc export` compiles
// every kernel of @prefill and @decode into one object under the symbol
// kernelSymbol(program, index) and generates this table (C++ source,
// kernelTableSource) mapping each program's kernel names to those entry
// points; the binary's main (Main.cpp) reads it. One layout for both.
#ifndef LLMC_TOOLS_EXPORTED_KERNELTABLE_H
#define LLMC_TOOLS_EXPORTED_KERNELTABLE_H

#include "runtime/Cpu/CpuKernels.h"

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"

#include <cstdint>
#include <string>

namespace llmc::exported {

/// One kernel: its program ("prefill", "decode"), its kir::Kernel::name and
/// its entry point. Keep in step with kernelTableSource.
struct KernelEntry {
  const char *program;
  const char *name;
  cpu::CpuKernelFn fn;
};

/// The symbol of kernel `index` of `program` in the exported object.
std::string kernelSymbol(llvm::StringRef program, size_t index);

/// C++ source defining llmc_export_kernels (the entries of `programs`'
/// kernels, each list in kernel order) and llmc_export_kernel_count.
std::string kernelTableSource(
    llvm::ArrayRef<std::pair<std::string, std::vector<std::string>>> programs);

} // namespace llmc::exported

extern "C" {
extern const llmc::exported::KernelEntry llmc_export_kernels[];
extern const int64_t llmc_export_kernel_count;
}

#endif // LLMC_TOOLS_EXPORTED_KERNELTABLE_H

// Loads compiled CPU kernels (an ELF object from codegen/KernelToCpu) into
// the process and hands out their entry points.
#ifndef LLMC_RUNTIME_CPU_CPUKERNELS_H
#define LLMC_RUNTIME_CPU_CPUKERNELS_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

namespace llvm::orc {
class LLJIT;
} // namespace llvm::orc

namespace llmc::cpu {

/// A kernel's entry point: runs rows [rowBegin, rowEnd); operands[i] is the
/// base of the buffer of the kernel's operand i. Disjoint row ranges may run
/// concurrently.
using CpuKernelFn = void (*)(void *const *operands, int64_t rowBegin,
                             int64_t rowEnd);

/// The kernels of one object, linked into this process by an ORC LLJIT.
/// The code stays valid as long as this object lives.
class CpuKernels {
public:
  /// Links `object` (copied): an ELF object, or a bundle of them
  /// (bundleObjects). `name` says where it came from, in errors.
  static llvm::Expected<std::unique_ptr<CpuKernels>>
  load(llvm::ArrayRef<char> object, llvm::StringRef name = "llmc-kernels");

  /// The entry point of kernel `name` (its kir::Kernel::name).
  llvm::Expected<CpuKernelFn> lookup(llvm::StringRef name) const;

  /// The JIT memory the linked code and its data occupy: one (address,
  /// bytes) range per allocation of the JIT's memory manager, whole pages.
  using Ranges = std::vector<std::pair<const void *, int64_t>>;
  const Ranges &memory() const { return *ranges; }

  ~CpuKernels();

private:
  CpuKernels(std::unique_ptr<llvm::orc::LLJIT> jit,
             std::shared_ptr<Ranges> ranges);
  std::unique_ptr<llvm::orc::LLJIT> jit;
  std::shared_ptr<Ranges> ranges; // filled by the JIT's memory manager
};

/// Several objects (the runs codegen compiled on threads of their own) as
/// one payload, which CpuKernels::load links as a whole and the kernel
/// cache stores as one entry:
///   8 bytes  magic "LLMCOBJS"
///   8 bytes  the number of objects n, little-endian
///   8n bytes their sizes, little-endian
///   the objects, one after another
/// One object is returned as it is.
llvm::SmallVector<char, 0>
bundleObjects(llvm::ArrayRef<llvm::SmallVector<char, 0>> objects);

/// The objects of a payload: a bundle's, or the payload itself when it is
/// not one. A bundle whose sizes do not add up is an error.
llvm::Expected<std::vector<llvm::ArrayRef<char>>>
unbundleObjects(llvm::ArrayRef<char> payload);

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_CPUKERNELS_H

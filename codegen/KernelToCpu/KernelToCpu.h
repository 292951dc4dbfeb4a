// The CPU emitter: kernel IR -> MLIR (scf/arith/math/vector, LLVM-dialect
// memory ops) -> LLVM IR optimized for the host -> an ELF object in memory.
//
// Every kernel becomes one function with the C ABI
//   void NAME(void *const *operands, int64_t rowBegin, int64_t rowEnd);
// that runs rows [rowBegin, rowEnd) of the kernel; operands[i] is the base
// of the buffer of Kernel::operands[i]. Disjoint row ranges may run on
// different threads at once. runtime/Cpu loads the object.
#ifndef LLMC_CODEGEN_KERNELTOCPU_KERNELTOCPU_H
#define LLMC_CODEGEN_KERNELTOCPU_KERNELTOCPU_H

#include "ir/kernel/KernelIR.h"

#include "mlir/IR/OwningOpRef.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/SmallVector.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

// Declared only, so that users of the object path need no MLIR headers.
namespace mlir {
class MLIRContext;
class ModuleOp;
} // namespace mlir

namespace llmc::cpu {

/// What the code is generated for. The defaults describe the host.
struct CpuTargetOptions {
  /// LLVM CPU name; empty: the host's (sys::getHostCPUName), and then an
  /// empty `features` means the host's too (sys::getHostCPUFeatures).
  std::string cpu;
  std::string features; // "+avx2,+fma,..."
  /// f32 lanes of the column loops; 0: 16 with AVX-512, 8 with AVX, else 4.
  int vectorWidth = 0;
  /// Vectors per iteration of a column loop that reduces: independent
  /// accumulators hide the latency of the adds.
  int reductionUnroll = 4;
};

/// The options with the host filled in (see `cpu`) and the vector width
/// decided.
CpuTargetOptions resolveTarget(const CpuTargetOptions &options);

/// One func.func per kernel (names and C ABI above), in scf/arith/math/vector
/// with llvm.load/store/getelementptr for memory. The kernels must pass
/// kir::verifyKernel.
mlir::OwningOpRef<mlir::ModuleOp>
buildCpuKernelModule(mlir::MLIRContext &context,
                     llvm::ArrayRef<kir::Kernel> kernels,
                     const CpuTargetOptions &options = {});

/// Rewrites a module from buildCpuKernelModule into the LLVM dialect:
/// polynomial approximations of the transcendental functions, bf16
/// expansion, then scf/vector/math/arith/cf/func to LLVM.
llvm::Error lowerToLlvmDialect(mlir::ModuleOp module);

/// Translates an LLVM-dialect module to LLVM IR and runs the O3 pipeline for
/// the target; returns the optimized IR as text.
llvm::Expected<std::string> lowerToLlvmIr(mlir::ModuleOp module,
                                          const CpuTargetOptions &options = {});

/// The whole path: kernels to an ELF relocatable object for the target.
llvm::Expected<llvm::SmallVector<char, 0>>
compileKernelsToObject(llvm::ArrayRef<kir::Kernel> kernels,
                       const CpuTargetOptions &options = {});

/// compileKernelsToObject over up to `parts` runs of consecutive kernels,
/// balanced by instruction count, each compiled on a thread of its own
/// (its own MLIR and LLVM context and target machine): one object per run,
/// in kernel order. Each kernel is the same function as in the single
/// object (the kernels call no code of each other); the runs depend only
/// on the kernels and `parts`, not on timing. runtime/Cpu links them as one
/// (cpu::bundleObjects).
llvm::Expected<std::vector<llvm::SmallVector<char, 0>>>
compileKernelsToObjects(llvm::ArrayRef<kir::Kernel> kernels, int parts,
                        const CpuTargetOptions &options = {});

/// The phases printCpuPhase knows, in pipeline order: "cpu-mlir" (the kernel
/// module), "cpu-llvm-dialect", "cpu-llvm-ir" (after O3), "cpu-asm".
llvm::ArrayRef<llvm::StringRef> cpuPhaseNames();

/// Prints the kernels as they are after `phase`, for
/// `llmc compile --compile-to=<phase>`. Fails on an unknown phase or a
/// kernel that does not verify.
llvm::Error printCpuPhase(llvm::raw_ostream &os,
                          llvm::ArrayRef<kir::Kernel> kernels,
                          llvm::StringRef phase,
                          const CpuTargetOptions &options = {});

} // namespace llmc::cpu

#endif // LLMC_CODEGEN_KERNELTOCPU_KERNELTOCPU_H

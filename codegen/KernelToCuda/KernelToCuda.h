// The CUDA emitter: kernel IR -> CUDA C++ source (one `extern "C"
// __global__` function per kernel) plus the launch configuration it was
// written for. NVRTC compiles the source (codegen/KernelToCuda/Nvrtc.h); this file
// needs neither MLIR nor the CUDA toolkit.
//
// The ABI of an emitted kernel NAME (kir::Kernel::name):
//
//   extern "C" __global__ void NAME(T0 *op0, T1 *op1, ...);
//
// one pointer per kir::Kernel::operands[i], the base (element 0) of that
// operand's buffer, exactly the pointers the CPU kernels receive; offsets
// and strides are constants in the source. Tn is the storage type (float,
// __half, __nv_bfloat16, int, long long). The kernel runs the whole domain.
//
// Launch (cuLaunchKernel): grid = {launch.grid[0], launch.grid[1],
// launch.grid[2]}, block = {launch.block[0..2]}, sharedMemBytes =
// launch.sharedBytes (dynamic shared memory; 0 today: the few shared
// arrays are static). Buffer bases must be 16-byte aligned (cuMemAlloc's
// and the arena's are): 128-bit accesses rely on it. Every kernel loops
// over its work with a grid stride, so ANY grid.x >= 1 computes the whole
// domain (launch.grid is the emitter's choice: a block per row, a warp per
// row, or enough blocks to cover the elements, capped at 65535);
// the block shape must be exactly launch.block, which the code assumes.
//
// Usage (runtime side):
//   std::string source = llmc::cuda::emitCudaModule(program.kernels);
//   // compile `source` once with llmc::cuda::compileCuda (Nvrtc.h), then
//   // per kernel step:
//   llmc::cuda::CudaLaunch launch =
//       llmc::cuda::chooseLaunch(program.kernels[step.kernel]);
//   cuModuleGetFunction(&fn, module, kernel.name.c_str());
//   cuLaunchKernel(fn, launch.grid[0], launch.grid[1], launch.grid[2],
//                  launch.block[0], launch.block[1], launch.block[2],
//                  launch.sharedBytes, stream, argPointers, nullptr);
// A GEMM epilogue (kir::GemmStep::epilogue) is an ordinary kernel over C's
// rows: launch it the same way on the whole of C after the GEMM.
//
// Changing the emitted code changes cached binaries: bump
// kCudaCodegenVersion with it.
#ifndef LLMC_CODEGEN_KERNELTOCUDA_KERNELTOCUDA_H
#define LLMC_CODEGEN_KERNELTOCUDA_KERNELTOCUDA_H

#include "ir/kernel/CudaModule.h"
#include "ir/kernel/KernelIR.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::kir {
struct Program;
} // namespace llmc::kir

namespace llmc::cuda {

/// The version of the code this emitter writes; part of cache keys.
constexpr int kCudaCodegenVersion = 2; // 2: RoundF16, RoundBF16

// CudaLaunch, how a kernel is launched, is a contract type
// (ir/kernel/CudaModule.h).

/// How a kernel's work is mapped to threads (for people and tests).
enum class CudaSchedule : uint8_t {
  Pointwise, // no reductions: a grid-stride loop over elements
  WarpRow,   // reductions, short rows: one warp per row, shuffles only
  BlockRow,  // reductions, long rows: one block per row, shuffles + shared
};

const char *scheduleName(CudaSchedule schedule);

/// One emitted kernel.
struct CudaKernel {
  std::string name;   // the __global__ function's name (kir::Kernel::name)
  std::string source; // the function alone; it needs cudaPrelude() first
  CudaLaunch launch;
  CudaSchedule schedule = CudaSchedule::Pointwise;
  int vectorWidth = 1; // elements per 128-bit access (Pointwise), else 1
};

/// The code every kernel relies on: the fp16/bf16 headers, dtype loads and
/// stores, exact math wrappers, warp/block reductions, Philox4x32-10;
/// compiles with NVRTC and test/unit/codegen/KernelToCuda/CudaEmulation.h.
const std::string &cudaPrelude();

/// The launch emitCudaKernel chooses for `kernel` (without emitting it).
CudaLaunch chooseLaunch(const kir::Kernel &kernel);

/// Emits one kernel. It must pass kir::verifyKernel.
CudaKernel emitCudaKernel(const kir::Kernel &kernel);

/// The multi-tensor kernel `name` of a batch (ABI: cuda::CudaKernelBatch)
/// whose members share `flat`'s body: `flat` is a member's kernel over the
/// one-dimensional domain [kMultiTensorChunk] with offsets 0, contiguous
/// operands at stride 1 and broadcast ones at stride 0. Sets `launch`'s
/// block and `vectorWidth` (elements per 128-bit access on aligned
/// members); the caller sets the grid.
std::string emitMultiTensorKernel(const kir::Kernel &flat,
                                  const std::string &name, CudaLaunch &launch,
                                  int &vectorWidth);

/// The two kernels of a Sum batch (ABI: cuda::CudaKernelBatch), `name`
/// then `totalName`, whose members' reading kernels share `flat`'s body:
/// `flat` is such a kernel over [kMultiTensorChunk] as for
/// emitMultiTensorKernel, with one ReduceSum (f32) whose value its one
/// store writes (a broadcast operand: the member's total). Sets both
/// launches' blocks and `vectorWidth`; the caller sets the grids.
std::string emitMultiTensorSumKernels(const kir::Kernel &flat,
                                      const std::string &name,
                                      const std::string &totalName,
                                      CudaLaunch &launch, int &vectorWidth,
                                      CudaLaunch &totalLaunch);

/// One translation unit: the prelude, then every kernel's function.
std::string emitCudaModule(llvm::ArrayRef<kir::Kernel> kernels);
std::string emitCudaModule(const kir::Program &program);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_KERNELTOCUDA_H

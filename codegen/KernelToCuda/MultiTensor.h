// Multi-tensor launches on CUDA: kernel steps of a program with the same
// body over different tensors (the AdamW update of every parameter, the
// zeroing of every gradient, the sum of squares of every gradient) run as
// one launch of one kernel (a sum: two) that walks a device table of the
// members' addresses and sizes (cuda::CudaKernelBatch,
// ir/kernel/CudaModule.h), with 128-bit accesses on aligned members. The
// kernel IR stays as it is (one kernel per tensor, as the CPU backend runs
// it); only the CUDA compiler and executor group the launches.
//
// Which steps: consecutive kernel steps (a window), none of which writes
// memory another step of the window reads or writes (so they may run in
// any order), each either
//  - elementwise over its whole domain (no reductions, no index
//    arithmetic, no random numbers, no scatter), each operand read or
//    written at the flat element index or broadcast from one element; or
//  - a sum member (CudaKernelBatch::Kind::Sum): one kernel summing an
//    elementwise function of such operands over its whole domain into one
//    element, or one summing each row into an f32 temporary that only the
//    next kernel of the member reads, a kernel of the window totalling it
//    into one element (the gradient norm's sums of squares of matrices).
// In a window, steps (members) with the same body and operand types form a
// batch (two or more), launched where its first step was; a Sum batch
// leaves the row temporaries unwritten and sums in chunks with no atomics,
// in an order that depends on the table and block shape only (the same
// bits on every run), not the CPU's order.
#ifndef LLMC_CODEGEN_KERNELTOCUDA_MULTITENSOR_H
#define LLMC_CODEGEN_KERNELTOCUDA_MULTITENSOR_H

#include "ir/kernel/CudaModule.h"
#include "ir/kernel/Program.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string>
#include <vector>

namespace llmc::cuda {

struct KernelBatches {
  std::vector<CudaKernelBatch> batches;
  /// The batches' kernels (CUDA C++ after cudaPrelude(), as
  /// emitCudaModule writes it): append to the program's module.
  std::string source;
};

/// The multi-tensor launches of `program` and their source.
KernelBatches planKernelBatches(const kir::Program &program);

/// Kernel launches one run of `program` makes (its kernel steps and
/// epilogue kernels after GEMMs, counted as launched on their own) when
/// `batches` run as one launch each (a Sum batch: two).
int64_t countKernelLaunches(const kir::Program &program,
                            llvm::ArrayRef<CudaKernelBatch> batches);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_MULTITENSOR_H

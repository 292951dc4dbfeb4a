// Flash attention on the tensor cores (mma.sync m16n8k16, f16/bf16 inputs,
// f32 accumulation): the CUDA C++ templates and their tile shapes. Internal
// to FlashAttention.cpp, which emits them after its common part (argument
// blocks, conversions, views, masking, lse and the backward's p, ds, delta
// and row statistics) when a variant uses tensor cores (usesTensorCores in
// FlashAttention.h), and writes their extern "C" kernels.
#ifndef LLMC_CODEGEN_KERNELTOCUDA_FLASHATTENTIONTC_H
#define LLMC_CODEGEN_KERNELTOCUDA_FLASHATTENTIONTC_H

#include "codegen/KernelToCuda/FlashAttention.h"

namespace llmc::cuda::tc {

/// Warps per block; every warp owns 16 rows (queries or keys) of a tile,
/// the instruction's M.
constexpr int kWarps = 4;
/// Forward: query rows per block (a warp's 16 each) and keys per tile.
constexpr int kForwardRows = 16 * kWarps;
constexpr int kForwardKeys = 64;
/// dk/dv: keys per block (a warp's 16 each) and query rows per tile.
constexpr int kDkDvKeys = 16 * kWarps;
constexpr int kDkDvRows = 32;
/// dq: query rows per block (a warp's 16 each) and keys per tile.
constexpr int kDqRows = 16 * kWarps;
constexpr int kDqKeys = 32;

/// The templates llmc_fa_tc_forward, llmc_fa_tc_backward_dkdv and
/// llmc_fa_tc_backward_dq<D, T> (they use FlashAttention.cpp's common
/// part); FlashAttention.cpp writes the extern "C" kernels over them.
const char *templateSource();

} // namespace llmc::cuda::tc

#endif // LLMC_CODEGEN_KERNELTOCUDA_FLASHATTENTIONTC_H

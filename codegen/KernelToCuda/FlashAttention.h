// Flash attention for the CUDA backend: CUDA C++ source of the forward
// kernel (kir::AttentionStep) and the two backward kernels
// (kir::AttentionGradStep), from one template parameterized by head size
// and storage dtype (f32, f16, bf16; f32 accumulation), plus their launch
// shapes and argument blocks. Like KernelToCuda.h it needs neither MLIR nor
// the CUDA toolkit; NVRTC compiles the source (codegen/KernelToCuda/Nvrtc.h).
//
// Kernel ABI: each kernel takes ONE argument, an argument block passed by
// value (AttentionForwardArgs / AttentionBackwardArgs in the contract,
// ir/kernel/CudaModule.h, declared with
// the same layout in the source as llmc_attn_fwd_args / llmc_attn_bwd_args):
//   extern "C" __global__ void llmc_flash_fwd_d64_f32(llmc_attn_fwd_args);
//   extern "C" __global__ void llmc_flash_bwd_dkdv_d64_f32(llmc_attn_bwd_args);
//   extern "C" __global__ void llmc_flash_bwd_dq_d64_f32(llmc_attn_bwd_args);
// Views are in elements of the storage type, with a stride per dimension
// [batch, head, seq, headDim] (lse: [batch, head, seq], always f32).
//
// The backward is deterministic: one warp owns each key (dk, dv) and each
// query row (dq) and sums over the other side in a fixed order; no atomics.
//
// Two implementations share that ABI: CUDA-core kernels (any head size up
// to kMaxFlashHeadDim, f32 compute) and tensor-core ones
// (FlashAttentionTc.cpp: mma.sync m16n8k16 on f16/bf16 inputs, f32
// accumulation, head sizes 64 and 128). usesTensorCores picks; the names
// and launch shapes follow the pick
// ("llmc_flash_tc_fwd_d64_bf16" for the tensor-core forward).
#ifndef LLMC_CODEGEN_KERNELTOCUDA_FLASHATTENTION_H
#define LLMC_CODEGEN_KERNELTOCUDA_FLASHATTENTION_H

#include "ir/kernel/CudaModule.h"
#include "ir/kernel/KernelIR.h"
#include "codegen/KernelToCuda/KernelToCuda.h"

#include "llvm/ADT/ArrayRef.h"

#include <cstdint>
#include <string>

namespace llmc::cuda {

/// Bump with any change to the emitted attention code (cache keys).
constexpr int kFlashAttentionVersion = 4;

/// One instantiation of the kernels: head size and storage type of q, k,
/// v, out (and dout, dq, dk, dv).
struct FlashAttentionVariant {
  int64_t headDim = 64;
  kir::DType dtype = kir::DType::F32;
  /// The CUDA-core kernels even where tensor cores apply (tests, benches).
  bool scalar = false;

  bool operator==(const FlashAttentionVariant &other) const {
    return headDim == other.headDim && dtype == other.dtype &&
           scalar == other.scalar;
  }
};

/// Head sizes the template supports: 1 to kMaxFlashHeadDim (shared memory
/// holds f32 tiles of [32, headDim + 1]).
constexpr int64_t kMaxFlashHeadDim = 128;

/// Whether `variant` can be emitted; if not, `why` says why.
bool isSupported(const FlashAttentionVariant &variant, std::string *why);

/// Whether `variant` runs on the tensor cores: f16 or bf16 storage, head
/// size 64 or 128, and not `scalar`.
bool usesTensorCores(const FlashAttentionVariant &variant);

/// Kernel names: "llmc_flash_fwd_d64_f32", "llmc_flash_bwd_dkdv_d64_f32",
/// "llmc_flash_bwd_dq_d64_f32"; "llmc_flash_tc_fwd_d64_bf16" and so on
/// where usesTensorCores.
std::string flashForwardName(const FlashAttentionVariant &variant);
std::string flashBackwardDkDvName(const FlashAttentionVariant &variant);
std::string flashBackwardDqName(const FlashAttentionVariant &variant);

/// One translation unit with the argument structs, the shared templates and
/// the three kernels of every variant (duplicates are emitted once).
/// Self-contained: it needs no prelude, and compiles with NVRTC and with
/// test/unit/codegen/KernelToCuda/CudaEmulation.h.
std::string emitFlashAttentionModule(
    llvm::ArrayRef<FlashAttentionVariant> variants);

// The argument blocks (AttentionViewArgs, AttentionForwardArgs,
// AttentionBackwardArgs) are contract types: ir/kernel/CudaModule.h.

/// Launch shapes of `variant`'s kernels (grid over query or key tiles x
/// batch*heads; 128 threads, static shared memory only).
CudaLaunch flashForwardLaunch(const FlashAttentionVariant &variant,
                              int64_t batch, int64_t heads, int64_t seq);
CudaLaunch flashBackwardDkDvLaunch(const FlashAttentionVariant &variant,
                                   int64_t batch, int64_t heads, int64_t seq);
CudaLaunch flashBackwardDqLaunch(const FlashAttentionVariant &variant,
                                 int64_t batch, int64_t heads, int64_t seq);

} // namespace llmc::cuda

#endif // LLMC_CODEGEN_KERNELTOCUDA_FLASHATTENTION_H

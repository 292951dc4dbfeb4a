// The 2:4 sparse tensor-core GEMM's CUDA C++ source and launch shape.
#include "codegen/KernelToCuda/SparseGemm.h"

using namespace llmc::cuda;

std::string llmc::cuda::sparseGemmName(bool f16) {
  return f16 ? "llmc_sparse_gemm_f16" : "llmc_sparse_gemm_bf16";
}

SparseGemmArgs llmc::cuda::sparseGemmArgs(int64_t m, int64_t n, int64_t k,
                                          const void *values,
                                          const void *meta, const void *x,
                                          int64_t ldx, float *y,
                                          int64_t ldy) {
  SparseGemmArgs args{values, meta, x, y, m, n, k, ldx, ldy, 0, 0};
  args.rowTiles = (n + kSparseGemmRowsPerWarp - 1) / kSparseGemmRowsPerWarp;
  args.kTiles = (k + 31) / 32;
  return args;
}

CudaLaunch llmc::cuda::sparseGemmLaunch(int64_t n, int64_t m) {
  CudaLaunch launch;
  int64_t rowTiles = (n + kSparseGemmRowsPerWarp - 1) / kSparseGemmRowsPerWarp;
  launch.grid[0] = (rowTiles + kSparseGemmWarps - 1) / kSparseGemmWarps;
  launch.grid[1] =
      (m + kSparseGemmTokensPerBlock - 1) / kSparseGemmTokensPerBlock;
  launch.block[0] = int(32 * kSparseGemmWarps);
  return launch;
}

// The kernel. Each warp owns one 16-row tile of W (the instruction's A:
// W's rows are the product's M, so that a decode step's single x row
// wastes 7 of the instruction's 8 B columns, not 15 of 16 A rows) and up
// to 4 tiles of 8 x rows (its N); it walks k in steps of 32, each lane
// loading its A fragment (16 bytes) and metadata word (4 bytes) of the
// tile, which TensorCoreTwoOfFour stores in exactly the order the lanes
// read them (a warp reads 576 contiguous bytes), and its B fragments
// straight from x: register r of lane 4 g + t is x[token g][32 kt + 8 r +
// 2 t ..+1], one 4-byte load (hence ldx even). Tokens and k past the ends
// read zeros; W's padding is zero values at valid positions. No shared
// memory and no block barrier: a warp whose tile is past W's end returns
// as a whole, and every lane of a live warp reaches every mma.sp (the
// token tiles past m are skipped by the whole warp).
//
// Not tuned: x is re-read from L1/L2 by each warp instead of staged in
// shared memory, and k is not split across warps, so a decode of a small
// W has few warps in flight (docs/sparsity.md, "2:4 on CUDA").
static const char *kSource = R"cuda(
// 2:4 sparse y = x W^T on the sparse tensor cores (mma.sp m16n8k32).
// W [n, k] 2:4 (TensorCoreTwoOfFour order, runtime/Weights/Sparsity.h), x [m, k]
// bf16/f16 at row stride ldx (even), y [m, n] f32 at row stride ldy.
struct llmc_sparse_gemm_args {
  const unsigned *values;
  const unsigned *meta;
  const unsigned short *x;
  float *y;
  long long m, n, k, ldx, ldy, rowTiles, kTiles;
};

struct alignas(16) llmc_sp_frag {
  unsigned r[4];
};

// d += A (16x32, 2:4: a, metadata e, sparsity selector 0) x B (32x8: b),
// f32 accumulation. PTX ISA 9.7.14.6 (mma.sp) and 9.7.14.6.2.2 (fragments
// of sparse mma.m16n8k32 with .f16/.bf16): A registers r = 0..3 hold row
// groupID + 8 (r % 2), the 4-column chunk threadID_in_group + 4 (r / 2);
// B register r holds rows 8 r + 2 threadID_in_group ..+1 of column
// groupID; d holds rows groupID (d0, d1) and groupID + 8 (d2, d3), columns
// 2 threadID_in_group ..+1.
template <bool F16>
__device__ __forceinline__ void llmc_mma_sp_16832(float d[4],
                                                  const unsigned a[4],
                                                  const unsigned b[4],
                                                  unsigned e) {
#ifdef __CUDA_ARCH__
#define LLMC_MMA_SP_16832(T)                                                   \
  asm volatile("mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32." \
               T "." T ".f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "           \
               "{%8, %9, %10, %11}, {%0, %1, %2, %3}, %12, 0x0;\n"           \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]),      \
                 "r"(b[1]), "r"(b[2]), "r"(b[3]), "r"(e))
  if (F16)
    LLMC_MMA_SP_16832("f16");
  else
    LLMC_MMA_SP_16832("bf16");
#undef LLMC_MMA_SP_16832
#else
  // The host emulation (test/unit/codegen/KernelToCuda/CudaEmulation.h).
  llmc_emu_mma_sp_m16n8k32(F16, d, a, b, e, 0);
#endif
}

template <bool F16>
__device__ __forceinline__ void llmc_sparse_gemm(const llmc_sparse_gemm_args &p) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const long long rowTile = (long long)blockIdx.x * 4 + warp;
  if (rowTile >= p.rowTiles)
    return; // the whole warp
  const int g = lane >> 2, t = lane & 3;
  const long long token0 = (long long)blockIdx.y * 32;
  float acc[4][4];
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i)
      acc[j][i] = 0.0f;
  const llmc_sp_frag *values =
      reinterpret_cast<const llmc_sp_frag *>(p.values) +
      rowTile * p.kTiles * 32 + lane;
  const unsigned *meta = p.meta + rowTile * p.kTiles * 16 + 2 * g + (lane & 1);
  for (long long kt = 0; kt < p.kTiles; ++kt) {
    const llmc_sp_frag a = values[kt * 32];
    const unsigned e = meta[kt * 16];
    for (int j = 0; j < 4; ++j) {
      if (token0 + 8 * j >= p.m)
        break; // uniform across the warp
      const long long token = token0 + 8 * j + g;
      unsigned b[4];
      for (int r = 0; r < 4; ++r) {
        const long long col = kt * 32 + 8 * r + 2 * t;
        // k is a multiple of 4: col < k means col + 1 < k too.
        b[r] = token < p.m && col < p.k
                   ? *reinterpret_cast<const unsigned *>(p.x + token * p.ldx +
                                                          col)
                   : 0u;
      }
      llmc_mma_sp_16832<F16>(acc[j], a.r, b, e);
    }
  }
  for (int j = 0; j < 4; ++j)
    for (int i = 0; i < 4; ++i) {
      const long long row = rowTile * 16 + g + 8 * (i >> 1);
      const long long token = token0 + 8 * j + 2 * t + (i & 1);
      if (row < p.n && token < p.m)
        p.y[token * p.ldy + row] = acc[j][i];
    }
}

extern "C" __global__ void __launch_bounds__(128)
llmc_sparse_gemm_bf16(const llmc_sparse_gemm_args p) {
  llmc_sparse_gemm<false>(p);
}

extern "C" __global__ void __launch_bounds__(128)
llmc_sparse_gemm_f16(const llmc_sparse_gemm_args p) {
  llmc_sparse_gemm<true>(p);
}
)cuda";

std::string llmc::cuda::emitSparseGemmModule() {
  return "// llmc 2:4 sparse GEMM, version " +
         std::to_string(kSparseGemmVersion) + kSource;
}

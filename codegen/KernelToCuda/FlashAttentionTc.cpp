// Flash attention on the tensor cores: forward and deterministic backward
// built on mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}, FlashAttention-2
// style (a warp owns 16 rows, the other side streams through shared memory,
// online softmax in f32 registers, P rounded to the storage type for the
// second product).
#include "codegen/KernelToCuda/FlashAttentionTc.h"

namespace {

// Fragments (PTX ISA 9.7.14.5.8, "Matrix Fragments for mma.m16n8k16 with
// floating point type"), g = lane / 4, t = lane % 4, two 16-bit elements
// per 32-bit register, the first in the low half:
//   A (16 x 16, row): a0 = A[g][2t..2t+1], a1 = A[g+8][2t..2t+1],
//                     a2 = A[g][2t+8..2t+9], a3 = A[g+8][2t+8..2t+9];
//   B (16 x 8, col):  b0 = B[2t..2t+1][g], b1 = B[2t+8..2t+9][g];
//   C, D (16 x 8 f32): d0, d1 = D[g][2t], D[g][2t+1]; d2, d3 = row g + 8.
// So the accumulators of two adjacent n-tiles (columns 16 kk .. 16 kk + 15)
// are, element for element, the A fragment of k-step kk of a product that
// takes them as its left operand: P V takes the scores' registers packed in
// pairs, with no shuffle (FlashAttention-2's trick).
//
// Shared tiles hold 32-bit pairs laid out for the B fragment that reads
// them: pairs along the head dimension (K for Q K^T, Q and dO for K Q^T
// and V dO^T) or along the sequence (V for P V, dO for P^T dO, Q for
// dS^T Q, K for dS K), so that every B register is one 32-bit load. Rows
// are padded by 4 words: the 32 lanes of a fragment load (row 8 j + g,
// word 8 kk + t) then hit 32 different banks.
//
// Forward (one block: 64 query rows of one (batch, head), a warp 16):
// Q fragments stay in registers; per key tile of 64 the warp computes S =
// Q K^T (8 n-tiles x D/16 k-steps), masks (keys past each row's visible
// prefix, llmc_fa_visible: causal, KV cache, positions), takes the row
// max over its 4 lanes (two xor shuffles), rescales its running sum and
// output, and adds P V with P rounded to the storage type. The running
// sum is per lane (its columns) until the end. A warp whose rows see none
// of a tile skips its products (the block still loads it).
//
// Backward (kir::AttentionGradStep), deterministic, no atomics: P = exp(S
// scale - lse) recomputed, delta = dout . out per row (from the stored
// out, as the scalar kernels do).
//   dk/dv: a block owns 64 keys (a warp 16: K and V fragments in
//   registers) and walks query tiles of 32 in order: S^T = K Q^T, dP^T = V
//   dO^T, dS^T = P^T (dP^T - delta), then dV += P^T dO and dK += dS^T Q
//   with P^T and dS^T rounded to the storage type as A fragments.
//   dq: a block owns 64 query rows (a warp 16: Q and dO fragments in
//   registers) and walks key tiles of 32 in order: S, dP, dS, dQ += dS K.
//
// Pitfalls: a row whose visible keys so far are all masked has max -inf;
// its probabilities are 0 and its rescale 1 (exp(-inf - -inf) is NaN).
// The mma is warp-collective (.sync.aligned): every skip is uniform
// across the warp, every __syncthreads uniform across the block.
const char *kSource = R"cuda(
template <typename T> struct llmc_fa_tc_is_f16 { static const bool value = false; };
template <> struct llmc_fa_tc_is_f16<llmc_fa_f16> { static const bool value = true; };

// d += A (16x16) B (16x8), f32 accumulators (fragments above).
template <bool F16>
__device__ __forceinline__ void llmc_fa_mma(float d[4], const unsigned a[4],
                                            unsigned b0, unsigned b1) {
#ifdef __CUDA_ARCH__
#define LLMC_FA_MMA_16816(T)                                                   \
  asm volatile("mma.sync.aligned.m16n8k16.row.col.f32." T "." T ".f32 "      \
               "{%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "               \
               "{%0, %1, %2, %3};\n"                                          \
               : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])              \
               : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1))
  if (F16)
    LLMC_FA_MMA_16816("f16");
  else
    LLMC_FA_MMA_16816("bf16");
#undef LLMC_FA_MMA_16816
#else
  // The host emulation (test/unit/codegen/KernelToCuda/CudaEmulation.h).
  const unsigned b[2] = {b0, b1};
  llmc_emu_mma_m16n8k16(F16, d, a, b);
#endif
}

// Two f32 values rounded to the storage type (nearest even) and packed,
// `lo` in bits 0..15: cvt.rn.{f16x2,bf16x2}.f32 d, hi, lo puts its first
// source in the upper half.
template <bool F16>
__device__ __forceinline__ unsigned llmc_fa_pack(float lo, float hi) {
#ifdef __CUDA_ARCH__
  unsigned packed;
  if (F16)
    asm("cvt.rn.f16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  else
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;\n" : "=r"(packed) : "f"(hi), "f"(lo));
  return packed;
#else
  if (F16) {
    llmc_fa_f16 l, h;
    llmc_fa_from_float(lo, &l);
    llmc_fa_from_float(hi, &h);
    return (unsigned)l.bits | ((unsigned)h.bits << 16);
  }
  llmc_fa_bf16 l, h;
  llmc_fa_from_float(lo, &l);
  llmc_fa_from_float(hi, &h);
  return (unsigned)l.bits | ((unsigned)h.bits << 16);
#endif
}

// Elements (b, h, t, d) and (b, h, t2, d2) of a 16-bit view as one pair
// (the first low); zero where its row is past `rows`.
__device__ __forceinline__ unsigned llmc_fa_pair(const void *base,
    const llmc_attn_view &v, int b, int h, int t, int d, int t2, int d2,
    int rows) {
  const unsigned short *p = (const unsigned short *)base;
  unsigned lo = t < rows ? p[llmc_fa_at(v, b, h, t, d)] : 0u;
  unsigned hi = t2 < rows ? p[llmc_fa_at(v, b, h, t2, d2)] : 0u;
  return lo | (hi << 16);
}

// The A fragments of 16 rows (r0 ..) x D of a view, for the D/16 k-steps.
template <int D>
__device__ __forceinline__ void llmc_fa_rows_frag(unsigned frag[][4],
    const void *base, const llmc_attn_view &v, int b, int h, int r0,
    int rows, int lane) {
  const int g = lane / 4, t = lane % 4;
  #pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
    #pragma unroll
    for (int r = 0; r < 4; ++r) {
      int row = r0 + g + 8 * (r & 1), col = 16 * kk + 2 * t + 8 * (r >> 1);
      frag[kk][r] = llmc_fa_pair(base, v, b, h, row, col, row, col + 1, rows);
    }
}

// Shared tiles of rows r0 .. r0 + ROWS - 1 of a view (zero from row
// `rows` on), by the whole block: pairs along the head dimension,
// tile[r][c] = (row r0 + r, dims 2c, 2c + 1), or along the rows,
// tile[d][c] = (rows r0 + 2c, r0 + 2c + 1, dim d).
template <int D, int ROWS>
__device__ __forceinline__ void llmc_fa_tile_along_d(
    unsigned (*tile)[D / 2 + 4], const void *base, const llmc_attn_view &v,
    int b, int h, int r0, int rows) {
  for (int i = threadIdx.x; i < ROWS * D / 2; i += blockDim.x) {
    int r = i / (D / 2), c = i % (D / 2);
    tile[r][c] = llmc_fa_pair(base, v, b, h, r0 + r, 2 * c, r0 + r, 2 * c + 1,
                              rows);
  }
}
template <int D, int ROWS>
__device__ __forceinline__ void llmc_fa_tile_along_rows(
    unsigned (*tile)[ROWS / 2 + 4], const void *base, const llmc_attn_view &v,
    int b, int h, int r0, int rows) {
  for (int i = threadIdx.x; i < D * ROWS / 2; i += blockDim.x) {
    int d = i / (ROWS / 2), c = i % (ROWS / 2);
    tile[d][c] = llmc_fa_pair(base, v, b, h, r0 + 2 * c, d, r0 + 2 * c + 1, d,
                              rows);
  }
}

// The accumulators of n-tiles 2 kk and 2 kk + 1 as the A fragment of
// k-step kk, rounded to the storage type.
template <bool F16>
__device__ __forceinline__ void llmc_fa_acc_to_a(unsigned a[4],
                                                 const float lo[4],
                                                 const float hi[4]) {
  a[0] = llmc_fa_pack<F16>(lo[0], lo[1]);
  a[1] = llmc_fa_pack<F16>(lo[2], lo[3]);
  a[2] = llmc_fa_pack<F16>(hi[0], hi[1]);
  a[3] = llmc_fa_pack<F16>(hi[2], hi[3]);
}

// acc[j] = A (16 x D: `frag`) B (D x 8: rows 8 j .. 8 j + 7 of `tile`,
// pairs along d, transposed) for the n-tiles j < N: S = Q K^T and its kin.
template <bool F16, int D, int N>
__device__ __forceinline__ void llmc_fa_product_over_d(
    float acc[][4], const unsigned frag[][4], const unsigned (*tile)[D / 2 + 4],
    int lane) {
  const int g = lane / 4, t = lane % 4;
  #pragma unroll
  for (int j = 0; j < N; ++j) {
    #pragma unroll
    for (int e = 0; e < 4; ++e)
      acc[j][e] = 0.0f;
    #pragma unroll
    for (int kk = 0; kk < D / 16; ++kk)
      llmc_fa_mma<F16>(acc[j], frag[kk], tile[8 * j + g][8 * kk + t],
                       tile[8 * j + g][8 * kk + 4 + t]);
  }
}

// acc (16 x D) += left (16 x K, accumulators rounded to the storage type)
// B (K x D: `tile`, pairs along K): P V and its kin.
template <bool F16, int D, int K>
__device__ __forceinline__ void llmc_fa_product_over_rows(
    float acc[][4], const float left[][4], const unsigned (*tile)[K / 2 + 4],
    int lane) {
  const int g = lane / 4, t = lane % 4;
  #pragma unroll
  for (int kk = 0; kk < K / 16; ++kk) {
    unsigned a[4];
    llmc_fa_acc_to_a<F16>(a, left[2 * kk], left[2 * kk + 1]);
    #pragma unroll
    for (int j = 0; j < D / 8; ++j)
      llmc_fa_mma<F16>(acc[j], a, tile[8 * j + g][8 * kk + t],
                       tile[8 * j + g][8 * kk + 4 + t]);
  }
}

template <int D, typename T>
__device__ void llmc_fa_tc_forward(const llmc_attn_fwd_args &a) {
  constexpr bool F16 = llmc_fa_tc_is_f16<T>::value;
  constexpr int WARPS = 4, ROWS = 16 * WARPS, KEYS = 64;
  constexpr int DK = D / 16, NK = KEYS / 8, ND = D / 8;
  __shared__ unsigned ks[KEYS][D / 2 + 4];  // K, pairs along d
  __shared__ unsigned vt[D][KEYS / 2 + 4];  // V^T, pairs along keys
  const int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int seq = a.seq, keys = a.kvSeq > 0 ? a.kvSeq : seq;
  const int q0 = blockIdx.x * ROWS, r0 = q0 + 16 * warp;

  unsigned qf[DK][4];
  llmc_fa_rows_frag<D>(qf, a.q, a.vq, b, h, r0, seq, lane);
  // Keys rows g and g + 8 see; the most any row of the warp, of the block.
  int limit[2];
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    int row = r0 + g + 8 * i;
    limit[i] = row < seq ? llmc_fa_visible(a, b, row, keys) : 0;
  }
  int keyEnd = 0, warpEnd = 0;
    for (int r = 0; r < ROWS && q0 + r < seq; ++r) {
    int visible = llmc_fa_visible(a, b, q0 + r, keys);
    keyEnd = llmc_fa_max(keyEnd, visible);
    if (r / 16 == warp)
      warpEnd = llmc_fa_max(warpEnd, visible);
  }
  float o[ND][4], m[2], l[2];
  #pragma unroll
  for (int j = 0; j < ND; ++j)
    #pragma unroll
    for (int e = 0; e < 4; ++e)
      o[j][e] = 0.0f;
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    m[i] = -llmc_fa_inf();
    l[i] = 0.0f;
  }
  for (int k0 = 0; k0 < keyEnd; k0 += KEYS) {
    __syncthreads(); // the previous tile is consumed
    llmc_fa_tile_along_d<D, KEYS>(ks, a.k, a.vk, b, h, k0, keyEnd);
    llmc_fa_tile_along_rows<D, KEYS>(vt, a.v, a.vv, b, h, k0, keyEnd);
    __syncthreads();
    if (k0 >= warpEnd)
      continue; // no row of this warp sees the tile (uniform in the warp)
    float s[NK][4];
    llmc_fa_product_over_d<F16, D, NK>(s, qf, ks, lane);
    #pragma unroll
    for (int i = 0; i < 2; ++i) { // rows g and g + 8
      float tileMax = -llmc_fa_inf();
      #pragma unroll
      for (int j = 0; j < NK; ++j)
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
          int key = k0 + 8 * j + 2 * t + e;
          float score = key < limit[i] ? s[j][2 * i + e] * a.scale
                                       : -llmc_fa_inf();
          s[j][2 * i + e] = score;
          tileMax = fmaxf(tileMax, score);
        }
      tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 1));
      tileMax = fmaxf(tileMax, __shfl_xor_sync(0xffffffffu, tileMax, 2));
      float newMax = fmaxf(m[i], tileMax);
      bool none = newMax == -llmc_fa_inf(); // uniform in the row's 4 lanes
      float rescale = none ? 1.0f : expf(m[i] - newMax);
      float sum = 0.0f;
      #pragma unroll
      for (int j = 0; j < NK; ++j)
        #pragma unroll
        for (int e = 0; e < 2; ++e) {
          float p = none ? 0.0f : expf(s[j][2 * i + e] - newMax);
          s[j][2 * i + e] = p;
          sum += p;
        }
      l[i] = l[i] * rescale + sum;
      #pragma unroll
      for (int j = 0; j < ND; ++j) {
        o[j][2 * i] *= rescale;
        o[j][2 * i + 1] *= rescale;
      }
      m[i] = newMax;
    }
    llmc_fa_product_over_rows<F16, D, KEYS>(o, s, vt, lane);
  }
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 1);
    l[i] += __shfl_xor_sync(0xffffffffu, l[i], 2);
    int row = r0 + g + 8 * i;
    if (row >= seq)
      continue;
    float inverse = llmc_fa_inverse(l[i]);
    #pragma unroll
    for (int j = 0; j < ND; ++j)
      #pragma unroll
      for (int e = 0; e < 2; ++e)
        llmc_fa_store<T>(a.out, llmc_fa_at(a.vout, b, h, row, 8 * j + 2 * t + e),
                         o[j][2 * i + e] * inverse);
    if (t == 0)
      a.lse[llmc_fa_at(a.vlse, b, h, row, 0)] = llmc_fa_lse(m[i], l[i]);
  }
}

template <int D, typename T>
__device__ void llmc_fa_tc_backward_dkdv(const llmc_attn_bwd_args &a) {
  constexpr bool F16 = llmc_fa_tc_is_f16<T>::value;
  constexpr int WARPS = 4, KEYS = 16 * WARPS, ROWS = 32;
  constexpr int DK = D / 16, NR = ROWS / 8, ND = D / 8;
  __shared__ unsigned qs[ROWS][D / 2 + 4];   // Q, pairs along d
  __shared__ unsigned dos[ROWS][D / 2 + 4];  // dO, pairs along d
  __shared__ unsigned qt[D][ROWS / 2 + 4];   // Q^T, pairs along rows
  __shared__ unsigned dot[D][ROWS / 2 + 4];  // dO^T, pairs along rows
  __shared__ float lses[ROWS], deltas[ROWS];
  const int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int seq = a.seq, s0 = blockIdx.x * KEYS, w0 = s0 + 16 * warp;

  unsigned kf[DK][4], vf[DK][4];
  llmc_fa_rows_frag<D>(kf, a.k, a.vk, b, h, w0, seq, lane);
  llmc_fa_rows_frag<D>(vf, a.v, a.vv, b, h, w0, seq, lane);
  float dk[ND][4], dv[ND][4];
  #pragma unroll
  for (int j = 0; j < ND; ++j)
    #pragma unroll
    for (int e = 0; e < 4; ++e)
      dk[j][e] = dv[j][e] = 0.0f;
  // With a causal mask only rows t >= s see key s.
  for (int t0 = a.causal ? s0 : 0; t0 < seq; t0 += ROWS) {
    __syncthreads(); // the previous tile is consumed
    llmc_fa_tile_along_d<D, ROWS>(qs, a.q, a.vq, b, h, t0, seq);
    llmc_fa_tile_along_d<D, ROWS>(dos, a.dout, a.vdout, b, h, t0, seq);
    llmc_fa_tile_along_rows<D, ROWS>(qt, a.q, a.vq, b, h, t0, seq);
    llmc_fa_tile_along_rows<D, ROWS>(dot, a.dout, a.vdout, b, h, t0, seq);
    llmc_fa_row_stats<D, T, WARPS, ROWS>(a, b, h, t0, deltas, lses);
    __syncthreads();
    if (w0 >= seq || (a.causal && w0 >= t0 + ROWS))
      continue; // this warp's keys see none of the tile (uniform)
    float st[NR][4], dpt[NR][4]; // S^T, dP^T: keys x query rows
    llmc_fa_product_over_d<F16, D, NR>(st, kf, qs, lane);
    llmc_fa_product_over_d<F16, D, NR>(dpt, vf, dos, lane);
    #pragma unroll
    for (int j = 0; j < NR; ++j) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        int key = w0 + g + 8 * (e / 2), r = 8 * j + 2 * t + e % 2, row = t0 + r;
        bool visible = llmc_fa_sees(a, row, key);
        float p = llmc_fa_p(a, visible, st[j][e], lses[r]);
        st[j][e] = p;                                          // P^T
        dpt[j][e] = llmc_fa_ds(visible, p, dpt[j][e], deltas[r]); // dS^T
      }
    }
    llmc_fa_product_over_rows<F16, D, ROWS>(dv, st, dot, lane);
    llmc_fa_product_over_rows<F16, D, ROWS>(dk, dpt, qt, lane);
  }
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    int key = w0 + g + 8 * i;
    if (key >= seq)
      continue;
    #pragma unroll
    for (int j = 0; j < ND; ++j)
      #pragma unroll
      for (int e = 0; e < 2; ++e) {
        int d = 8 * j + 2 * t + e;
        llmc_fa_store<T>(a.dk, llmc_fa_at(a.vdk, b, h, key, d),
                         dk[j][2 * i + e] * a.scale);
        llmc_fa_store<T>(a.dv, llmc_fa_at(a.vdv, b, h, key, d), dv[j][2 * i + e]);
      }
  }
}

template <int D, typename T>
__device__ void llmc_fa_tc_backward_dq(const llmc_attn_bwd_args &a) {
  constexpr bool F16 = llmc_fa_tc_is_f16<T>::value;
  constexpr int WARPS = 4, ROWS = 16 * WARPS, KEYS = 32;
  constexpr int DK = D / 16, NK = KEYS / 8, ND = D / 8;
  __shared__ unsigned ks[KEYS][D / 2 + 4];  // K, pairs along d
  __shared__ unsigned vs[KEYS][D / 2 + 4];  // V, pairs along d
  __shared__ unsigned kt[D][KEYS / 2 + 4];  // K^T, pairs along keys
  __shared__ float lses[ROWS], deltas[ROWS];
  const int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int g = lane / 4, t = lane % 4;
  const int seq = a.seq, q0 = blockIdx.x * ROWS, r0 = q0 + 16 * warp;

  unsigned qf[DK][4], dof[DK][4];
  llmc_fa_rows_frag<D>(qf, a.q, a.vq, b, h, r0, seq, lane);
  llmc_fa_rows_frag<D>(dof, a.dout, a.vdout, b, h, r0, seq, lane);
  llmc_fa_row_stats<D, T, WARPS, ROWS>(a, b, h, q0, deltas, lses);
  float dq[ND][4];
  #pragma unroll
  for (int j = 0; j < ND; ++j)
    #pragma unroll
    for (int e = 0; e < 4; ++e)
      dq[j][e] = 0.0f;
  int keyEnd = a.causal ? llmc_fa_min(seq, q0 + ROWS) : seq;
  for (int k0 = 0; k0 < keyEnd; k0 += KEYS) {
    __syncthreads(); // the previous tile is consumed (and the row stats written)
    llmc_fa_tile_along_d<D, KEYS>(ks, a.k, a.vk, b, h, k0, seq);
    llmc_fa_tile_along_d<D, KEYS>(vs, a.v, a.vv, b, h, k0, seq);
    llmc_fa_tile_along_rows<D, KEYS>(kt, a.k, a.vk, b, h, k0, seq);
    __syncthreads();
    if (r0 >= seq || (a.causal && k0 > r0 + 15))
      continue; // no row of this warp sees the tile (uniform)
    float s[NK][4], dp[NK][4];
    llmc_fa_product_over_d<F16, D, NK>(s, qf, ks, lane);
    llmc_fa_product_over_d<F16, D, NK>(dp, dof, vs, lane);
    #pragma unroll
    for (int j = 0; j < NK; ++j) {
      #pragma unroll
      for (int e = 0; e < 4; ++e) {
        int r = 16 * warp + g + 8 * (e / 2), row = q0 + r;
        int key = k0 + 8 * j + 2 * t + e % 2;
        bool visible = llmc_fa_sees(a, row, key);
        float p = llmc_fa_p(a, visible, s[j][e], lses[r]);
        dp[j][e] = llmc_fa_ds(visible, p, dp[j][e], deltas[r]); // dS
      }
    }
    llmc_fa_product_over_rows<F16, D, KEYS>(dq, dp, kt, lane);
  }
  #pragma unroll
  for (int i = 0; i < 2; ++i) {
    int row = r0 + g + 8 * i;
    if (row >= seq)
      continue;
    #pragma unroll
    for (int j = 0; j < ND; ++j)
      #pragma unroll
      for (int e = 0; e < 2; ++e)
        llmc_fa_store<T>(a.dq, llmc_fa_at(a.vdq, b, h, row, 8 * j + 2 * t + e),
                         dq[j][2 * i + e] * a.scale);
  }
}
)cuda";

} // namespace

const char *llmc::cuda::tc::templateSource() { return kSource; }

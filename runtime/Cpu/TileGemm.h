// Attention's per-head products on register tiles: the CPU executor's
// Q K^T, P V and their gradients (runtime/Cpu/CpuExecutor.cpp, runAttention and
// runAttentionGrad), f32, each on the thread that runs the head.
//
// A BLAS call packs both operands into its own layout before it
// multiplies. Attention's products have a short side (the head dimension,
// 64 in GPT-2) and are many (per head, per block of query rows), so the
// packing is a large share of each call, and these tiles run such
// products faster than OpenBLAS on one core. Here nothing is packed per
// call: a tile of C (8 rows x 32 columns on AVX-512F, 6 x 16 on AVX2+FMA)
// lives in registers while the k loop broadcasts A's elements from where
// they lie (A's rows, or its columns: P^T and dS^T are read from P and dS
// as stored) and loads a segment of one of B's rows. B is read in place
// when its rows are few (a block of dO or Q) and packed once per head into
// column panels when the products walk down all of it for every block of
// query rows (K, V, K^T, V^T). Products and sums are f32 FMAs in k order
// per element, then one alpha and the old C.
#ifndef LLMC_RUNTIME_CPU_TILEGEMM_H
#define LLMC_RUNTIME_CPU_TILEGEMM_H

#include "runtime/Cpu/CpuIsa.h"

#include <cstdint>

namespace llmc::cpu {

/// An f32 matrix in place: element (i, p) at data[i * rowStride + p *
/// colStride]; one of the strides is 1.
struct TileMatrix {
  const float *data;
  int64_t rowStride, colStride;
};

/// An f32 matrix B [k x n] in column panels: element (p, j) at
/// data[(j / kTilePanel) * panelStride + p * rowStride + j % kTilePanel].
/// A row-major matrix is {data, its row stride, kTilePanel}; packed panels
/// (packTilePanels) are {data, kTilePanel, k * kTilePanel}.
constexpr int64_t kTilePanel = 32;
struct TilePanels {
  const float *data;
  int64_t rowStride, panelStride;
};

/// c[i * ldc + j] = alpha * sum_p A(i, p) * B(p, j) (+ c[i * ldc + j] when
/// `accumulate`) for i < m, j < n, p < k. Reads only those elements of A,
/// B and C. `isa` must be one this CPU runs (cpuRuns).
void tileGemm(CpuIsa isa, int64_t m, int64_t n, int64_t k, TileMatrix a,
              TilePanels b, float *c, int64_t ldc, float alpha,
              bool accumulate);

/// Packs B [k x n] (element (p, j) of `b`) into panels of kTilePanel
/// columns at `out` (k * n rounded up to whole panels floats; columns past
/// n are zero): B's rows are read once, contiguous in the panels however
/// far apart they lie in memory. A B that tileGemm walks down more than
/// once (K^T for every block of query rows) is packed first: rows a page
/// or more apart defeat the hardware prefetchers. Transposing B (K^T from
/// K as stored) runs on 8 x 8 blocks on AVX2.
void packTilePanels(CpuIsa isa, TileMatrix b, int64_t k, int64_t n, float *out);

/// The floats packTilePanels writes for B [k x n].
inline int64_t tilePanelFloats(int64_t k, int64_t n) {
  return k * ((n + kTilePanel - 1) / kTilePanel * kTilePanel);
}

/// The panels packTilePanels wrote at `packed` for B [k x n].
inline TilePanels packedTilePanels(const float *packed, int64_t k) {
  return {packed, kTilePanel, k * kTilePanel};
}

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_TILEGEMM_H

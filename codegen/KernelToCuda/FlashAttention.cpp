// Flash attention kernels as CUDA C++ source: one template per kernel kind,
// instantiated per head size and storage dtype.
#include "codegen/KernelToCuda/FlashAttention.h"
#include "codegen/KernelToCuda/FlashAttentionTc.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <set>
#include <tuple>

using namespace llmc;
using namespace llmc::cuda;

namespace {

// Tile shapes, shared by the source and the launch functions. Each block
// has kWarps warps of 32 threads, as the tensor-core kernels' blocks do.
constexpr int kWarps = tc::kWarps;
constexpr int kForwardRowsPerWarp = 4; // query rows a warp owns (forward)
constexpr int kForwardRows = kWarps * kForwardRowsPerWarp;
constexpr int kDkDvKeysPerWarp = 2;    // keys a warp owns (dk, dv)
constexpr int kDkDvKeys = kWarps * kDkDvKeysPerWarp;
constexpr int kDqRowsPerWarp = 2;      // query rows a warp owns (dq)
constexpr int kDqRows = kWarps * kDqRowsPerWarp;

const char *storageType(kir::DType dtype) {
  switch (dtype) {
  case kir::DType::F16:
    return "llmc_fa_f16";
  case kir::DType::BF16:
    return "llmc_fa_bf16";
  default:
    return "float";
  }
}

std::string suffix(const FlashAttentionVariant &variant) {
  return llvm::formatv("d{0}_{1}", variant.headDim,
                       kir::dtypeName(variant.dtype))
      .str();
}

// The part of the module every variant shares: argument blocks (the same
// layout as AttentionForwardArgs / AttentionBackwardArgs: 8-byte fields,
// then 4-byte ones), storage conversions, warp reductions, the masks (which
// keys a row sees), a forward row's lse, the backward's p, ds, delta and
// row statistics (the tensor-core templates use these too), and the three
// CUDA-core kernel templates.
//
// Forward (per block: kForwardRows query rows of one (batch, head); a warp
// owns kForwardRowsPerWarp rows): each row sees a prefix of the kvSeq keys
// (all, or with the causal mask up to positions[b][t], else t + kvSeq -
// seq, as AttentionStep defines it), and the block walks the longest of
// its rows' prefixes only, so decoding reads the cache's filled part; key
// tiles of 32 rows go through shared
// memory; for each tile, lane j scores key j against a row, the warp takes
// the tile's max and sum (online softmax: the running max m, the running
// sum l and the accumulator are rescaled by exp(m_old - m_new)), and each
// lane accumulates its dims d = lane + 32 i of p V. out = acc / l and
// lse = m + log(l), as AttentionStep defines them.
//
// Backward (kir::AttentionGradStep): p = exp(scale q.k - lse) is recomputed.
// dk/dv: a block owns kDkDvKeys keys (a warp kDkDvKeysPerWarp of them) and
// walks the query tiles in order; lane i scores query row i, the warp then
// sums p dout and ds q over the tile's rows into the lanes' dims.
// dq: a block owns kDqRows query rows and walks the key tiles in order.
// delta = dout.out is recomputed per tile and row (headDim products),
// cheaper than a scratch buffer and a third launch at these sizes.
//
// Pitfalls: a row whose keys so far are all masked has m = -inf; its
// update is skipped (exp(-inf - -inf) would be NaN). Shared tiles are
// [rows][headDim + 1] where lanes walk rows, so 32 lanes hit 32 banks.
const char *kCommonSource = R"cuda(
struct llmc_attn_view { long long offset, batch, head, seq, dim; };
struct llmc_attn_fwd_args {
  const void *q, *k, *v;
  void *out;
  float *lse;
  const int *positions; // null: none
  llmc_attn_view vq, vk, vv, vout, vlse, vpos;
  int batch, heads, seq, causal;
  float scale;
  int kvSeq; // keys in k and v; 0: seq
};
struct llmc_attn_bwd_args {
  const void *dout, *q, *k, *v, *out;
  const float *lse;
  void *dq, *dk, *dv;
  llmc_attn_view vdout, vq, vk, vv, vout, vlse, vdq, vdk, vdv;
  int batch, heads, seq, causal;
  float scale;
  int pad;
};

struct llmc_fa_f16 { unsigned short bits; };
struct llmc_fa_bf16 { unsigned short bits; };

__device__ inline float llmc_fa_bits_to_float(unsigned bits) {
  union { unsigned u; float f; } c;
  c.u = bits;
  return c.f;
}
__device__ inline unsigned llmc_fa_float_to_bits(float value) {
  union { unsigned u; float f; } c;
  c.f = value;
  return c.u;
}

__device__ inline float llmc_fa_inf() { return llmc_fa_bits_to_float(0x7f800000u); }
__device__ inline int llmc_fa_min(int x, int y) { return x < y ? x : y; }
__device__ inline int llmc_fa_max(int x, int y) { return x > y ? x : y; }

__device__ inline float llmc_fa_to_float(float x) { return x; }
__device__ inline float llmc_fa_to_float(llmc_fa_bf16 x) {
  return llmc_fa_bits_to_float((unsigned)x.bits << 16);
}
__device__ inline float llmc_fa_to_float(llmc_fa_f16 x) {
  unsigned h = x.bits;
  unsigned sign = (h & 0x8000u) << 16;
  unsigned exponent = (h >> 10) & 0x1fu, mantissa = h & 0x3ffu;
  if (exponent == 0) { // zero or subnormal: mantissa * 2^-24
    float value = (float)mantissa * 5.9604644775390625e-8f;
    return sign ? -value : value;
  }
  if (exponent == 31) // infinity or NaN
    return llmc_fa_bits_to_float(sign | 0x7f800000u | (mantissa << 13));
  return llmc_fa_bits_to_float(sign | ((exponent + 112) << 23) | (mantissa << 13));
}

__device__ inline void llmc_fa_from_float(float value, float *out) { *out = value; }
__device__ inline void llmc_fa_from_float(float value, llmc_fa_bf16 *out) {
  unsigned u = llmc_fa_float_to_bits(value);
  if ((u & 0x7fffffffu) > 0x7f800000u) { // NaN stays NaN (quiet)
    out->bits = (unsigned short)((u >> 16) | 0x40u);
    return;
  }
  u += 0x7fffu + ((u >> 16) & 1u); // round to nearest even
  out->bits = (unsigned short)(u >> 16);
}
__device__ inline void llmc_fa_from_float(float value, llmc_fa_f16 *out) {
  unsigned u = llmc_fa_float_to_bits(value);
  unsigned sign = (u >> 16) & 0x8000u, a = u & 0x7fffffffu;
  unsigned result;
  if (a > 0x7f800000u) { // NaN: quiet, top payload bits kept
    result = 0x7e00u | ((a >> 13) & 0x3ffu);
  } else if (a >= 0x477ff000u) { // rounds to 65536 or more: infinity
    result = 0x7c00u;
  } else if (a < 0x38800000u) { // below 2^-14: a subnormal (or zero)
    result = (unsigned)rintf(llmc_fa_bits_to_float(a) * 16777216.0f);
  } else {
    unsigned rebased = a - 0x38000000u; // exponent bias 127 -> 15
    result = rebased >> 13;
    unsigned rest = rebased & 0x1fffu;
    if (rest > 0x1000u || (rest == 0x1000u && (result & 1u)))
      ++result;
  }
  out->bits = (unsigned short)(sign | result);
}

template <typename T>
__device__ inline float llmc_fa_load(const void *base, long long index) {
  return llmc_fa_to_float(((const T *)base)[index]);
}
template <typename T>
__device__ inline void llmc_fa_store(void *base, long long index, float value) {
  llmc_fa_from_float(value, ((T *)base) + index);
}

__device__ inline float llmc_fa_warp_max(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
  return value;
}
__device__ inline float llmc_fa_warp_sum(float value) {
  for (int offset = 16; offset > 0; offset >>= 1)
    value += __shfl_xor_sync(0xffffffffu, value, offset);
  return value;
}

// Element index of (b, h, t, d) in a view.
__device__ inline long long llmc_fa_at(const llmc_attn_view &view, int b,
                                       int h, long long t, long long d) {
  return view.offset + b * view.batch + h * view.head + t * view.seq +
         d * view.dim;
}

// How many keys (a prefix of the `keys`) query t of batch b sees: all of
// them without the causal mask, else up to its position in the cache
// (positions[b][t], or t + keys - seq), clamped to [0, keys].
__device__ inline int llmc_fa_visible(const llmc_attn_fwd_args &a, int b,
                                      int t, int keys) {
  if (!a.causal)
    return keys;
  long long last =
      a.positions ? (long long)a.positions[a.vpos.offset + b * a.vpos.batch +
                                           t * a.vpos.seq]
                  : (long long)t + keys - a.seq;
  return last < 0 ? 0 : last >= keys ? keys : (int)(last + 1);
}

// A forward row's results from its running max m and sum l: out is acc
// times llmc_fa_inverse(l), lse = m + log(l). A row that sees no key (a
// position before the cache) has l = 0: out 0, lse -inf.
__device__ inline float llmc_fa_inverse(float l) { return l > 0.0f ? 1.0f / l : 0.0f; }
__device__ inline float llmc_fa_lse(float m, float l) {
  return l > 0.0f ? m + logf(l) : -llmc_fa_inf();
}

// The backward's masking and softmax: whether query row `row` sees key
// `key`, p = exp(scale q.k - lse) recomputed, and ds = p (dp - delta),
// both 0 where the key is not seen.
__device__ inline bool llmc_fa_sees(const llmc_attn_bwd_args &a, int row,
                                    int key) {
  return key < a.seq && row < a.seq && (!a.causal || key <= row);
}
__device__ inline float llmc_fa_p(const llmc_attn_bwd_args &a, bool visible,
                                  float qk, float lse) {
  return visible ? expf(qk * a.scale - lse) : 0.0f;
}
__device__ inline float llmc_fa_ds(bool visible, float p, float dp,
                                   float delta) {
  return visible ? p * (dp - delta) : 0.0f;
}

// delta = dout . out of query row t (0 past seq), summed by the warp: every
// lane gets it.
template <int D, typename T>
__device__ inline float llmc_fa_delta(const llmc_attn_bwd_args &a, int b,
                                      int h, int t, int lane) {
  float partial = 0.0f;
  if (t < a.seq)
    for (int d = lane; d < D; d += 32)
      partial += llmc_fa_load<T>(a.dout, llmc_fa_at(a.vdout, b, h, t, d)) *
                 llmc_fa_load<T>(a.out, llmc_fa_at(a.vout, b, h, t, d));
  return llmc_fa_warp_sum(partial);
}

// delta and lse of query rows t0 .. t0 + ROWS - 1 (0 past seq) into shared
// memory, a warp per row.
template <int D, typename T, int WARPS, int ROWS>
__device__ void llmc_fa_row_stats(const llmc_attn_bwd_args &a, int b, int h,
                                  int t0, float *deltas, float *lses) {
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  for (int r = warp; r < ROWS; r += WARPS) {
    int t = t0 + r;
    float delta = llmc_fa_delta<D, T>(a, b, h, t, lane);
    if (lane == 0) {
      deltas[r] = delta;
      lses[r] = t < a.seq ? a.lse[llmc_fa_at(a.vlse, b, h, t, 0)] : 0.0f;
    }
  }
}

template <int D, typename T, int WARPS, int ROWS_PER_WARP>
__device__ void llmc_fa_forward(const llmc_attn_fwd_args &a) {
  constexpr int ROWS = WARPS * ROWS_PER_WARP, KEYS = 32;
  constexpr int DL = (D + 31) / 32; // dims per lane
  __shared__ float qs[ROWS][D];
  __shared__ float ks[KEYS][D + 1];
  __shared__ float vs[KEYS][D];
  const int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int q0 = blockIdx.x * ROWS, seq = a.seq;
  const int keys = a.kvSeq > 0 ? a.kvSeq : seq;

  for (int i = tid; i < ROWS * D; i += WARPS * 32) {
    int r = i / D, d = i % D, t = q0 + r;
    qs[r][d] = t < seq ? llmc_fa_load<T>(a.q, llmc_fa_at(a.vq, b, h, t, d)) : 0.0f;
  }
  // Keys each of the warp's rows sees (0 past seq), and the block's most:
  // only that prefix of the keys (a KV cache's filled part) is read.
  float m[ROWS_PER_WARP], l[ROWS_PER_WARP], acc[ROWS_PER_WARP][DL];
  int limit[ROWS_PER_WARP];
  for (int r = 0; r < ROWS_PER_WARP; ++r) {
    int t = q0 + warp * ROWS_PER_WARP + r;
    limit[r] = t < seq ? llmc_fa_visible(a, b, t, keys) : 0;
    m[r] = -llmc_fa_inf();
    l[r] = 0.0f;
    for (int i = 0; i < DL; ++i)
      acc[r][i] = 0.0f;
  }
  int keyEnd = 0;
  for (int r = 0; r < ROWS && q0 + r < seq; ++r)
    keyEnd = llmc_fa_max(keyEnd, llmc_fa_visible(a, b, q0 + r, keys));
  for (int k0 = 0; k0 < keyEnd; k0 += KEYS) {
    __syncthreads(); // the previous tile is consumed (and qs is written)
    for (int i = tid; i < KEYS * D; i += WARPS * 32) {
      int r = i / D, d = i % D, s = k0 + r;
      bool in = s < keyEnd;
      ks[r][d] = in ? llmc_fa_load<T>(a.k, llmc_fa_at(a.vk, b, h, s, d)) : 0.0f;
      vs[r][d] = in ? llmc_fa_load<T>(a.v, llmc_fa_at(a.vv, b, h, s, d)) : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
      int row = warp * ROWS_PER_WARP + r, s = k0 + lane;
      float dot = 0.0f;
      for (int d = 0; d < D; ++d)
        dot += qs[row][d] * ks[lane][d];
      bool visible = s < limit[r];
      float score = visible ? dot * a.scale : -llmc_fa_inf();
      float newMax = fmaxf(m[r], llmc_fa_warp_max(score));
      if (newMax == -llmc_fa_inf()) // nothing visible yet (uniform in the warp)
        continue;
      float p = visible ? expf(score - newMax) : 0.0f;
      float rescale = expf(m[r] - newMax);
      l[r] = l[r] * rescale + llmc_fa_warp_sum(p);
      for (int i = 0; i < DL; ++i)
        acc[r][i] *= rescale;
      for (int j = 0; j < KEYS; ++j) {
        float pj = __shfl_sync(0xffffffffu, p, j);
        for (int i = 0; i < DL; ++i) {
          int d = lane + 32 * i;
          if (d < D)
            acc[r][i] += pj * vs[j][d];
        }
      }
      m[r] = newMax;
    }
  }
  for (int r = 0; r < ROWS_PER_WARP; ++r) {
    int t = q0 + warp * ROWS_PER_WARP + r;
    if (t >= seq)
      continue;
    float inverse = llmc_fa_inverse(l[r]);
    for (int i = 0; i < DL; ++i) {
      int d = lane + 32 * i;
      if (d < D)
        llmc_fa_store<T>(a.out, llmc_fa_at(a.vout, b, h, t, d), acc[r][i] * inverse);
    }
    if (lane == 0)
      a.lse[llmc_fa_at(a.vlse, b, h, t, 0)] = llmc_fa_lse(m[r], l[r]);
  }
}

template <int D, typename T, int WARPS, int KEYS_PER_WARP>
__device__ void llmc_fa_backward_dkdv(const llmc_attn_bwd_args &a) {
  constexpr int KEYS = WARPS * KEYS_PER_WARP, ROWS = 32;
  constexpr int DL = (D + 31) / 32;
  __shared__ float qs[ROWS][D + 1];
  __shared__ float dos[ROWS][D + 1];
  __shared__ float lses[ROWS], deltas[ROWS];
  __shared__ float ks[KEYS][D];
  __shared__ float vs[KEYS][D];
  const int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int s0 = blockIdx.x * KEYS, seq = a.seq;

  for (int i = tid; i < KEYS * D; i += WARPS * 32) {
    int r = i / D, d = i % D, s = s0 + r;
    bool in = s < seq;
    ks[r][d] = in ? llmc_fa_load<T>(a.k, llmc_fa_at(a.vk, b, h, s, d)) : 0.0f;
    vs[r][d] = in ? llmc_fa_load<T>(a.v, llmc_fa_at(a.vv, b, h, s, d)) : 0.0f;
  }
  float dk[KEYS_PER_WARP][DL], dv[KEYS_PER_WARP][DL];
  for (int kk = 0; kk < KEYS_PER_WARP; ++kk)
    for (int i = 0; i < DL; ++i)
      dk[kk][i] = dv[kk][i] = 0.0f;
  // With a causal mask only rows t >= s see key s.
  for (int t0 = a.causal ? s0 : 0; t0 < seq; t0 += ROWS) {
    __syncthreads(); // the previous tile is consumed
    for (int i = tid; i < ROWS * D; i += WARPS * 32) {
      int r = i / D, d = i % D, t = t0 + r;
      bool in = t < seq;
      qs[r][d] = in ? llmc_fa_load<T>(a.q, llmc_fa_at(a.vq, b, h, t, d)) : 0.0f;
      dos[r][d] = in ? llmc_fa_load<T>(a.dout, llmc_fa_at(a.vdout, b, h, t, d)) : 0.0f;
    }
    llmc_fa_row_stats<D, T, WARPS, ROWS>(a, b, h, t0, deltas, lses);
    __syncthreads();
    for (int kk = 0; kk < KEYS_PER_WARP; ++kk) {
      int j = warp * KEYS_PER_WARP + kk, s = s0 + j, t = t0 + lane;
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        qk += qs[lane][d] * ks[j][d];
        dp += dos[lane][d] * vs[j][d];
      }
      bool visible = llmc_fa_sees(a, t, s);
      float p = llmc_fa_p(a, visible, qk, lses[lane]);
      float ds = llmc_fa_ds(visible, p, dp, deltas[lane]);
      for (int r = 0; r < ROWS; ++r) {
        float pr = __shfl_sync(0xffffffffu, p, r);
        float dsr = __shfl_sync(0xffffffffu, ds, r);
        for (int i = 0; i < DL; ++i) {
          int d = lane + 32 * i;
          if (d < D) {
            dv[kk][i] += pr * dos[r][d];
            dk[kk][i] += dsr * qs[r][d];
          }
        }
      }
    }
  }
  for (int kk = 0; kk < KEYS_PER_WARP; ++kk) {
    int s = s0 + warp * KEYS_PER_WARP + kk;
    if (s >= seq)
      continue;
    for (int i = 0; i < DL; ++i) {
      int d = lane + 32 * i;
      if (d < D) {
        llmc_fa_store<T>(a.dk, llmc_fa_at(a.vdk, b, h, s, d), dk[kk][i] * a.scale);
        llmc_fa_store<T>(a.dv, llmc_fa_at(a.vdv, b, h, s, d), dv[kk][i]);
      }
    }
  }
}

template <int D, typename T, int WARPS, int ROWS_PER_WARP>
__device__ void llmc_fa_backward_dq(const llmc_attn_bwd_args &a) {
  constexpr int ROWS = WARPS * ROWS_PER_WARP, KEYS = 32;
  constexpr int DL = (D + 31) / 32;
  __shared__ float qs[ROWS][D];
  __shared__ float dos[ROWS][D];
  __shared__ float ks[KEYS][D + 1];
  __shared__ float vs[KEYS][D + 1];
  const int b = blockIdx.y / a.heads, h = blockIdx.y % a.heads;
  const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32;
  const int q0 = blockIdx.x * ROWS, seq = a.seq;

  for (int i = tid; i < ROWS * D; i += WARPS * 32) {
    int r = i / D, d = i % D, t = q0 + r;
    bool in = t < seq;
    qs[r][d] = in ? llmc_fa_load<T>(a.q, llmc_fa_at(a.vq, b, h, t, d)) : 0.0f;
    dos[r][d] = in ? llmc_fa_load<T>(a.dout, llmc_fa_at(a.vdout, b, h, t, d)) : 0.0f;
  }
  float lse[ROWS_PER_WARP], delta[ROWS_PER_WARP], dq[ROWS_PER_WARP][DL];
  for (int r = 0; r < ROWS_PER_WARP; ++r) {
    int t = q0 + warp * ROWS_PER_WARP + r;
    delta[r] = llmc_fa_delta<D, T>(a, b, h, t, lane);
    lse[r] = t < seq ? a.lse[llmc_fa_at(a.vlse, b, h, t, 0)] : 0.0f;
    for (int i = 0; i < DL; ++i)
      dq[r][i] = 0.0f;
  }
  int keyEnd = a.causal ? llmc_fa_min(seq, q0 + ROWS) : seq;
  for (int k0 = 0; k0 < keyEnd; k0 += KEYS) {
    __syncthreads(); // the previous tile is consumed (and qs, dos written)
    for (int i = tid; i < KEYS * D; i += WARPS * 32) {
      int r = i / D, d = i % D, s = k0 + r;
      bool in = s < seq;
      ks[r][d] = in ? llmc_fa_load<T>(a.k, llmc_fa_at(a.vk, b, h, s, d)) : 0.0f;
      vs[r][d] = in ? llmc_fa_load<T>(a.v, llmc_fa_at(a.vv, b, h, s, d)) : 0.0f;
    }
    __syncthreads();
    for (int r = 0; r < ROWS_PER_WARP; ++r) {
      int row = warp * ROWS_PER_WARP + r, t = q0 + row, s = k0 + lane;
      float qk = 0.0f, dp = 0.0f;
      for (int d = 0; d < D; ++d) {
        qk += qs[row][d] * ks[lane][d];
        dp += dos[row][d] * vs[lane][d];
      }
      bool visible = llmc_fa_sees(a, t, s);
      float p = llmc_fa_p(a, visible, qk, lse[r]);
      float ds = llmc_fa_ds(visible, p, dp, delta[r]);
      for (int j = 0; j < KEYS; ++j) {
        float dsj = __shfl_sync(0xffffffffu, ds, j);
        for (int i = 0; i < DL; ++i) {
          int d = lane + 32 * i;
          if (d < D)
            dq[r][i] += dsj * ks[j][d];
        }
      }
    }
  }
  for (int r = 0; r < ROWS_PER_WARP; ++r) {
    int t = q0 + warp * ROWS_PER_WARP + r;
    if (t >= seq)
      continue;
    for (int i = 0; i < DL; ++i) {
      int d = lane + 32 * i;
      if (d < D)
        llmc_fa_store<T>(a.dq, llmc_fa_at(a.vdq, b, h, t, d), dq[r][i] * a.scale);
    }
  }
}
)cuda";

} // namespace

bool llmc::cuda::isSupported(const FlashAttentionVariant &variant,
                             std::string *why) {
  auto fail = [&](std::string message) {
    if (why)
      *why = std::move(message);
    return false;
  };
  if (variant.headDim < 1 || variant.headDim > kMaxFlashHeadDim)
    return fail(llvm::formatv("flash attention supports head sizes 1 to {0}, "
                              "not {1}",
                              kMaxFlashHeadDim, variant.headDim)
                    .str());
  if (variant.dtype != kir::DType::F32 && variant.dtype != kir::DType::F16 &&
      variant.dtype != kir::DType::BF16)
    return fail(std::string("flash attention stores f32, f16 or bf16, not ") +
                kir::dtypeName(variant.dtype));
  return true;
}

bool llmc::cuda::usesTensorCores(const FlashAttentionVariant &variant) {
  return !variant.scalar &&
         (variant.dtype == kir::DType::F16 ||
          variant.dtype == kir::DType::BF16) &&
         (variant.headDim == 64 || variant.headDim == 128);
}

static std::string prefix(const FlashAttentionVariant &variant) {
  return usesTensorCores(variant) ? "llmc_flash_tc_" : "llmc_flash_";
}

std::string llmc::cuda::flashForwardName(const FlashAttentionVariant &variant) {
  return prefix(variant) + "fwd_" + suffix(variant);
}
std::string
llmc::cuda::flashBackwardDkDvName(const FlashAttentionVariant &variant) {
  return prefix(variant) + "bwd_dkdv_" + suffix(variant);
}
std::string
llmc::cuda::flashBackwardDqName(const FlashAttentionVariant &variant) {
  return prefix(variant) + "bwd_dq_" + suffix(variant);
}

std::string llmc::cuda::emitFlashAttentionModule(
    llvm::ArrayRef<FlashAttentionVariant> variants) {
  std::string source = llvm::formatv("// llmc flash attention, version {0}\n",
                                     kFlashAttentionVersion)
                           .str();
  source += kCommonSource;
  if (llvm::any_of(variants, usesTensorCores))
    source += tc::templateSource();
  std::set<std::string> emitted;
  for (const FlashAttentionVariant &variant : variants) {
    if (!emitted.insert(flashForwardName(variant)).second)
      continue;
    // The tensor-core templates take the head size and storage type; the
    // CUDA-core ones also their warps and the rows (or keys) a warp owns.
    bool tensorCores = usesTensorCores(variant);
    auto templateArgs = [&](int perWarp) {
      return tensorCores
                 ? llvm::formatv("{0}, {1}", variant.headDim,
                                 storageType(variant.dtype))
                       .str()
                 : llvm::formatv("{0}, {1}, {2}, {3}", variant.headDim,
                                 storageType(variant.dtype), kWarps, perWarp)
                       .str();
    };
    source += "\n";
    for (auto [name, args, body, perWarp] :
         {std::tuple{flashForwardName(variant), "llmc_attn_fwd_args",
                     "forward", kForwardRowsPerWarp},
          std::tuple{flashBackwardDkDvName(variant), "llmc_attn_bwd_args",
                     "backward_dkdv", kDkDvKeysPerWarp},
          std::tuple{flashBackwardDqName(variant), "llmc_attn_bwd_args",
                     "backward_dq", kDqRowsPerWarp}})
      source += llvm::formatv(
                    "extern \"C\" __global__ void __launch_bounds__({0})\n"
                    "{1}({2} args) {{\n  {3}{4}<{5}>(args);\n}\n",
                    kWarps * 32, name, args,
                    tensorCores ? "llmc_fa_tc_" : "llmc_fa_", body,
                    templateArgs(perWarp))
                    .str();
  }
  return source;
}

static CudaLaunch tiled(int64_t batch, int64_t heads, int64_t seq,
                        int64_t tile) {
  CudaLaunch launch;
  launch.grid[0] = (seq + tile - 1) / tile;
  launch.grid[1] = batch * heads;
  launch.block[0] = kWarps * 32;
  return launch;
}

CudaLaunch llmc::cuda::flashForwardLaunch(const FlashAttentionVariant &variant,
                                          int64_t batch, int64_t heads,
                                          int64_t seq) {
  return tiled(batch, heads, seq,
               usesTensorCores(variant) ? tc::kForwardRows : kForwardRows);
}
CudaLaunch
llmc::cuda::flashBackwardDkDvLaunch(const FlashAttentionVariant &variant,
                                    int64_t batch, int64_t heads, int64_t seq) {
  return tiled(batch, heads, seq,
               usesTensorCores(variant) ? tc::kDkDvKeys : kDkDvKeys);
}
CudaLaunch
llmc::cuda::flashBackwardDqLaunch(const FlashAttentionVariant &variant,
                                  int64_t batch, int64_t heads, int64_t seq) {
  return tiled(batch, heads, seq,
               usesTensorCores(variant) ? tc::kDqRows : kDqRows);
}

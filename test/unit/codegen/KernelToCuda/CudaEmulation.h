// CUDA on the CPU, for testing emitted kernels where there is no GPU: the
// CUDA C++ that codegen/KernelToCuda emits compiles with the host C++
// compiler against this header (force-included, with empty cuda_fp16.h and
// cuda_bf16.h next to it) and runs on host buffers.
//
// How: blocks run one after another; the threads of a block are fibers
// (ucontext), switched only at __syncthreads, __syncwarp and warp shuffles,
// each of which is a real barrier: a fiber waits there until every thread
// it synchronizes with has arrived. Shared memory is per block (a
// `__shared__` variable is a static, and blocks do not overlap in time).
// Shuffles exchange values through per-warp slots between two barriers, and
// so do the two tensor-core instructions emulated: the dense
// mma.sync.aligned.m16n8k16.row.col.f32.{bf16,f16}.{bf16,f16}.f32
// (llmc_emu_mma_m16n8k16) and the sparse
// mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.{bf16,f16}
// (llmc_emu_mma_sp_m16n8k32), both below with exactly what they reproduce.
// __half and __nv_bfloat16 are 16-bit types with round-to-nearest-even
// conversions, like cuda_fp16.h's __float2half_rn and __float2bfloat16_rn.
// The math functions are the host's (glibc), not CUDA's.
//
// What a run under emulation proves: that the emitted source is valid C++
// with the CUDA builtins it uses, that its index arithmetic (offsets,
// strides, outer-index decomposition, vector chunks and tails) reads and
// writes the right elements, that every element of the domain is covered
// by the emitted launch configuration and grid-stride loops, that the
// reductions (per-thread accumulation, shuffle trees, shared-memory
// exchange) combine the right values, and that every thread reaches the
// same barriers (a divergent __syncthreads or shuffle aborts, with the
// block and thread named). What it does not prove: anything about the GPU
// memory model (fibers run one at a time, so races between threads that
// are not ordered by a barrier are serialized away and go unnoticed),
// timing or occupancy, that the launch fits the device's register and
// shared-memory limits (NVRTC's compile checks some of this), or the exact
// bits of CUDA's math library (expf etc. are glibc's here).
#ifndef LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_CUDAEMULATION_H
#define LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_CUDAEMULATION_H

#include <ucontext.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <vector>

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
};

// The running thread's coordinates: set by the scheduler before it
// switches to a fiber, so they are right whenever kernel code runs.
static dim3 threadIdx, blockIdx, blockDim, gridDim;

//===----------------------------------------------------------------------===//
// 16-bit floats
//===----------------------------------------------------------------------===//

struct __half {
  uint16_t bits;
};
struct __nv_bfloat16 {
  uint16_t bits;
};

inline uint32_t llmc_emu_bits(float f) {
  uint32_t x;
  std::memcpy(&x, &f, 4);
  return x;
}
inline float llmc_emu_float(uint32_t x) {
  float f;
  std::memcpy(&f, &x, 4);
  return f;
}

inline float __half2float(__half h) {
  uint32_t sign = uint32_t(h.bits & 0x8000) << 16;
  uint32_t exponent = (h.bits >> 10) & 0x1f, mantissa = h.bits & 0x3ff;
  if (exponent == 0) // zero or subnormal: mantissa * 2^-24, exact in f32
    return llmc_emu_float(sign | llmc_emu_bits(std::ldexp(float(mantissa), -24)));
  if (exponent == 31)
    return llmc_emu_float(sign | 0x7f800000 | (mantissa << 13));
  return llmc_emu_float(sign | ((exponent - 15 + 127) << 23) | (mantissa << 13));
}

inline __half __float2half_rn(float f) {
  uint32_t x = llmc_emu_bits(f);
  uint16_t sign = (x >> 16) & 0x8000;
  x &= 0x7fffffff;
  if (x >= 0x7f800000) // inf, or a quiet NaN
    return {uint16_t(sign | (x > 0x7f800000 ? 0x7e00 : 0x7c00))};
  if (x >= 0x477ff000) // 65520 and above round to infinity
    return {uint16_t(sign | 0x7c00)};
  if (x < 0x38800000) { // below 2^-14: a multiple of 2^-24, rounded to even
    float scaled = std::ldexp(llmc_emu_float(x), 24); // exact
    return {uint16_t(sign | uint16_t(std::nearbyint(scaled)))};
  }
  uint32_t h = ((((x >> 23) - 127 + 15) << 10) | ((x & 0x7fffff) >> 13));
  uint32_t rest = x & 0x1fff;
  if (rest > 0x1000 || (rest == 0x1000 && (h & 1)))
    ++h; // a carry into the exponent is the right result
  return {uint16_t(sign | h)};
}

inline float __bfloat162float(__nv_bfloat16 b) {
  return llmc_emu_float(uint32_t(b.bits) << 16);
}

inline __nv_bfloat16 __float2bfloat16_rn(float f) {
  uint32_t x = llmc_emu_bits(f);
  if ((x & 0x7fffffff) > 0x7f800000)
    return {uint16_t((x >> 16) | 0x40)}; // quiet NaN
  x += 0x7fff + ((x >> 16) & 1);
  return {uint16_t(x >> 16)};
}

//===----------------------------------------------------------------------===//
// Intrinsics
//===----------------------------------------------------------------------===//

inline float __int_as_float(int x) { return llmc_emu_float(uint32_t(x)); }
inline int __float_as_int(float f) { return int(llmc_emu_bits(f)); }
inline unsigned __umulhi(unsigned a, unsigned b) {
  return unsigned((uint64_t(a) * b) >> 32);
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }

//===----------------------------------------------------------------------===//
// The fiber scheduler
//===----------------------------------------------------------------------===//

namespace llmc_emu {

enum class State { Ready, AtBlockBarrier, AtWarpBarrier, Done };

struct Thread {
  ucontext_t context;
  State state = State::Ready;
  dim3 index;
  unsigned warpMask = 0; // the mask of the warp barrier it waits at
};

struct Block {
  std::vector<Thread> threads;
  std::vector<char *> stacks;
  ucontext_t scheduler;
  int current = 0;
  int blockArrived = 0;
  std::vector<int> warpArrived; // per warp
  std::vector<uint64_t> slots;  // per thread: its shuffle operand
  std::vector<uint32_t> mmaSlots; // per thread: its mma / mma.sp registers
  const std::function<void()> *body = nullptr;
};

static Block *running = nullptr;
constexpr size_t kStackBytes = 256 * 1024;
// mma.sp's registers of one lane: A (4), B (4), C (4), metadata (1); the
// dense m16n8k16 uses the first 6 (A 4, B 2; each lane keeps its own C).
constexpr size_t kMmaSlotWords = 13;

[[noreturn]] inline void fail(const char *what) {
  const Thread &t = running->threads[running->current];
  std::fprintf(stderr,
               "CUDA emulation: %s (block (%u, %u, %u), thread (%u, %u, %u))\n",
               what, blockIdx.x, blockIdx.y, blockIdx.z, t.index.x, t.index.y,
               t.index.z);
  std::abort();
}

inline Thread &self() { return running->threads[running->current]; }

inline void yield() {
  Thread &t = self();
  swapcontext(&t.context, &running->scheduler);
}

inline bool anyDone() {
  for (const Thread &t : running->threads)
    if (t.state == State::Done)
      return true;
  return false;
}

/// __syncthreads: every thread of the block must arrive; a thread that has
/// returned can never arrive, which on a GPU is undefined behavior.
inline void blockBarrier() {
  if (anyDone())
    fail("__syncthreads after another thread of the block returned");
  Thread &t = self();
  t.state = State::AtBlockBarrier;
  if (++running->blockArrived == int(running->threads.size())) {
    running->blockArrived = 0;
    for (Thread &other : running->threads)
      other.state = State::Ready;
    return;
  }
  yield();
}

/// A warp-level barrier over the lanes in `mask` (of the caller's warp).
inline void warpBarrier(unsigned mask) {
  int id = running->current, warp = id / 32, first = warp * 32;
  int lanes = std::min<int>(32, int(running->threads.size()) - first);
  if (!(mask >> (id % 32) & 1))
    fail("a warp operation whose mask leaves out the calling lane");
  int expected = 0;
  for (int lane = 0; lane < lanes; ++lane)
    if (mask >> lane & 1) {
      if (running->threads[first + lane].state == State::Done)
        fail("a warp operation waits for a lane that has returned");
      ++expected;
    }
  if (mask >> lanes != 0 && lanes < 32)
    fail("a warp operation's mask names lanes the block does not have");
  Thread &t = self();
  t.state = State::AtWarpBarrier;
  t.warpMask = mask;
  if (++running->warpArrived[warp] == expected) {
    running->warpArrived[warp] = 0;
    for (int lane = 0; lane < lanes; ++lane) {
      Thread &other = running->threads[first + lane];
      if (other.state == State::AtWarpBarrier) {
        if (other.warpMask != mask)
          fail("lanes of a warp wait at warp operations with different masks");
        other.state = State::Ready;
      }
    }
    return;
  }
  yield();
}

inline void entry() {
  (*running->body)();
  self().state = State::Done;
  if (running->blockArrived > 0)
    fail("a thread returned while others wait at __syncthreads");
  // Returning resumes uc_link, the scheduler.
}

/// Runs `body` as every thread of every block of the grid.
inline void launch(const long long grid[3], const int block[3],
                   const std::function<void()> &body) {
  Block state;
  running = &state;
  state.body = &body;
  gridDim = {unsigned(grid[0]), unsigned(grid[1]), unsigned(grid[2])};
  blockDim = {unsigned(block[0]), unsigned(block[1]), unsigned(block[2])};
  int threads = block[0] * block[1] * block[2];
  state.threads.resize(threads);
  state.slots.resize(threads);
  state.mmaSlots.resize(size_t(threads) * kMmaSlotWords);
  state.warpArrived.assign((threads + 31) / 32, 0);
  for (int i = 0; i < threads; ++i)
    state.stacks.push_back(static_cast<char *>(std::malloc(kStackBytes)));
  for (unsigned bz = 0; bz < gridDim.z; ++bz)
    for (unsigned by = 0; by < gridDim.y; ++by)
      for (unsigned bx = 0; bx < gridDim.x; ++bx) {
        blockIdx = {bx, by, bz};
        for (int i = 0; i < threads; ++i) {
          Thread &t = state.threads[i];
          t.state = State::Ready;
          t.index = {unsigned(i % block[0]), unsigned(i / block[0] % block[1]),
                     unsigned(i / (block[0] * block[1]))};
          getcontext(&t.context);
          t.context.uc_stack.ss_sp = state.stacks[i];
          t.context.uc_stack.ss_size = kStackBytes;
          t.context.uc_link = &state.scheduler;
          makecontext(&t.context, entry, 0);
        }
        for (;;) {
          bool ran = false, done = true;
          for (int i = 0; i < threads; ++i) {
            Thread &t = state.threads[i];
            if (t.state == State::Ready) {
              state.current = i;
              threadIdx = t.index;
              swapcontext(&state.scheduler, &t.context);
              ran = true;
            }
            done &= t.state == State::Done;
          }
          if (done)
            break;
          if (!ran)
            fail("deadlock: every live thread waits at a barrier that "
                 "cannot complete");
        }
      }
  for (char *stack : state.stacks)
    std::free(stack);
  running = nullptr;
}

/// An untyped kernel argument that converts to any pointer type, so that
/// launch wrappers need not spell each parameter's type.
struct AnyPtr {
  void *p;
  template <typename T> operator T *() const { return static_cast<T *>(p); }
};

} // namespace llmc_emu

inline void __syncthreads() { llmc_emu::blockBarrier(); }
inline void __syncwarp(unsigned mask = 0xffffffffu) {
  llmc_emu::warpBarrier(mask);
}

template <typename T>
inline T llmc_emu_shuffle(unsigned mask, T value, int sourceLane) {
  static_assert(sizeof(T) <= sizeof(uint64_t), "shuffles move 8 bytes at most");
  using namespace llmc_emu;
  int id = running->current, first = id / 32 * 32;
  uint64_t slot = 0;
  std::memcpy(&slot, &value, sizeof(T));
  running->slots[id] = slot;
  warpBarrier(mask); // every lane has written its slot
  int source = first + sourceLane;
  if (source >= int(running->threads.size()) || !(mask >> sourceLane & 1))
    fail("a shuffle reads a lane outside its mask");
  T result;
  std::memcpy(&result, &running->slots[source], sizeof(T));
  warpBarrier(mask); // every lane has read before any slot is reused
  return result;
}

template <typename T>
inline T __shfl_xor_sync(unsigned mask, T value, int laneMask, int width = 32) {
  int lane = llmc_emu::running->current % 32;
  if (width != 32)
    llmc_emu::fail("__shfl_xor_sync with a width other than 32");
  return llmc_emu_shuffle(mask, value, lane ^ laneMask);
}

template <typename T>
inline T __shfl_down_sync(unsigned mask, T value, unsigned delta,
                          int width = 32) {
  int lane = llmc_emu::running->current % 32;
  if (width != 32)
    llmc_emu::fail("__shfl_down_sync with a width other than 32");
  // Lanes past the end keep their own value, as on the GPU.
  int source = lane + int(delta) < 32 ? lane + int(delta) : lane;
  return llmc_emu_shuffle(mask, value, source);
}

//===----------------------------------------------------------------------===//
// Sparse tensor cores
//===----------------------------------------------------------------------===//

namespace llmc_emu {
/// The m16n8 accumulators both mma forms share: lane's d[i] is D row g + 8
/// (i / 2), column 2 t + i % 2 (g = lane / 4, t = lane % 4), and becomes
/// d[i] + the sum over k < depth of aAt(row, k) bAt(k, col), in double,
/// rounded to f32 once; every lane computes from the slots before the
/// barrier that frees them.
template <typename AAt, typename BAt>
inline void mmaAccumulate(float d[4], int lane, int depth, AAt aAt, BAt bAt) {
  int g = lane / 4, t = lane % 4;
  float result[4];
  for (int i = 0; i < 4; ++i) {
    int row = g + 8 * (i / 2), col = 2 * t + i % 2;
    double sum = double(d[i]);
    for (int k = 0; k < depth; ++k)
      sum += aAt(row, k) * bAt(k, col);
    result[i] = float(sum);
  }
  warpBarrier(0xffffffffu); // every lane has read before any slot is reused
  for (int i = 0; i < 4; ++i)
    d[i] = result[i];
}
} // namespace llmc_emu

/// mma.sp::ordered_metadata.sync.aligned.m16n8k32.row.col.f32.T.T.f32
/// {d}, {a}, {b}, {d}, e, selector (T = f16 with `f16`, else bf16): d +=
/// A (16x32, 2:4 sparse) x B (32x8), as the PTX ISA defines it (section
/// 9.7.14.6, "Matrix multiply-accumulate operation using mma.sp instruction
/// with sparse matrix A"; 9.7.14.6.1, "Sparse matrix storage"; 9.7.14.6.2.2,
/// "Matrix Fragments for sparse mma.m16n8k32 with .f16 and .bf16 types"),
/// in our reading of it; with groupID g = lane / 4, threadID_in_group t =
/// lane % 4:
///   - a[r] (r = 0..3) holds the two kept values (low half first) of row
///     g + 8 (r % 2), 4-column chunk t + 4 (r / 2);
///   - b[r] holds B rows 8 r + 2 t and 8 r + 2 t + 1 (low half first) of
///     column g;
///   - d[i] is D row g + 8 (i / 2), column 2 t + i % 2;
///   - the metadata of row g (bits 0..15) and g + 8 (bits 16..31), chunks
///     4 h .. 4 h + 3 (4 bits each, the first kept value's position in the
///     low 2 bits), comes from lane 4 g + 2 selector + h, h = 0, 1: the
///     selector (0 or 1 for this shape) names which pair of a group of four
///     threads supplies it.
/// Every lane of the warp must call it (it is .sync.aligned): each writes
/// its registers to its slots, a warp barrier, each computes its own 4
/// results from all lanes' slots (products summed in double, added to c,
/// rounded to f32 once: exact where the tensor core's sum is not), a
/// second barrier before any slot is reused. Metadata whose two positions
/// are not increasing (::ordered_metadata; equal ones are undefined for
/// any mma.sp) aborts, naming the row and chunk.
inline void llmc_emu_mma_sp_m16n8k32(bool f16, float d[4],
                                     const unsigned a[4], const unsigned b[4],
                                     unsigned e, int selector) {
  using namespace llmc_emu;
  if (selector != 0 && selector != 1)
    fail("mma.sp m16n8k32 with a sparsity selector other than 0 or 1");
  int id = running->current, lane = id % 32, first = id - lane;
  if (first + 32 > int(running->threads.size()))
    fail("mma.sp in a warp of fewer than 32 threads");
  uint32_t *mine = &running->mmaSlots[size_t(id) * kMmaSlotWords];
  for (int r = 0; r < 4; ++r) {
    mine[r] = a[r];
    mine[4 + r] = b[r];
    std::memcpy(&mine[8 + r], &d[r], 4);
  }
  mine[12] = e;
  warpBarrier(0xffffffffu); // every lane's registers are in its slots
  auto slot = [&](int fromLane, int word) {
    return running->mmaSlots[size_t(first + fromLane) * kMmaSlotWords + word];
  };
  auto widen = [&](uint32_t bits) {
    bits &= 0xffff;
    return f16 ? double(__half2float(__half{uint16_t(bits)}))
               : double(llmc_emu_float(bits << 16));
  };
  // A[row][col] of the dense 16x32 tile, from the fragments and metadata.
  auto aAt = [&](int row, int col) {
    int chunk = col / 4, position = col % 4;
    int g = row % 8, upper = row / 8;
    uint32_t word = slot(4 * g + 2 * selector + chunk / 4, 12);
    uint32_t nibble = word >> (16 * upper + 4 * (chunk % 4)) & 0xf;
    int p0 = nibble & 3, p1 = nibble >> 2;
    if (p0 >= p1) {
      std::fprintf(stderr, "CUDA emulation: mma.sp metadata nibble 0x%x of "
                           "row %d, chunk %d is not two increasing "
                           "positions\n", nibble, row, chunk);
      fail("invalid mma.sp::ordered_metadata metadata");
    }
    uint32_t pair = slot(4 * g + chunk % 4, upper + 2 * (chunk / 4));
    if (position == p0)
      return widen(pair);
    if (position == p1)
      return widen(pair >> 16);
    return 0.0;
  };
  auto bAt = [&](int row, int col) {
    uint32_t pair = slot(4 * col + row % 8 / 2, 4 + row / 8);
    return widen(row % 2 ? pair >> 16 : pair);
  };
  mmaAccumulate(d, lane, 32, aAt, bAt);
}

//===----------------------------------------------------------------------===//
// Dense tensor cores
//===----------------------------------------------------------------------===//

/// mma.sync.aligned.m16n8k16.row.col.f32.T.T.f32 {d}, {a}, {b}, {d} (T =
/// f16 with `f16`, else bf16): d += A (16x16) x B (16x8), with the
/// fragments of the PTX ISA, section 9.7.14.5.8, "Matrix Fragments for
/// mma.m16n8k16 with floating point type"; with groupID g = lane / 4,
/// threadID_in_group t = lane % 4, and two 16-bit elements per register,
/// the lower-indexed one in bits 0..15:
///   - a[0] = A[g][2t, 2t+1], a[1] = A[g+8][2t, 2t+1],
///     a[2] = A[g][2t+8, 2t+9], a[3] = A[g+8][2t+8, 2t+9]
///     (elements a0..a7: row g for a0, a1, a4, a5, else g + 8; column
///     2t + (i & 1), plus 8 for i >= 4);
///   - b[0] = B[2t, 2t+1][g], b[1] = B[2t+8, 2t+9][g] (column g);
///   - d[i] = D[g + 8 (i / 2)][2t + i % 2].
/// Every lane of the warp must call it (.sync.aligned: all 32 lanes, one
/// call site's worth of arguments each): each writes its registers to its
/// slots, a warp barrier, each computes its own 4 results from all lanes'
/// slots, a second barrier before any slot is reused. Reproduced: which
/// lane holds which element of A, B, C and D, the f16 / bf16 decoding of
/// the inputs (subnormals included; NaN and infinity propagate as in
/// double), f32 accumulation into c. Not reproduced bitwise: the order and
/// the intermediate precision of the tensor core's sums (the 16 products
/// are exact here and summed with c in double, then rounded to f32 once,
/// at least as accurate as the hardware), and the hardware's handling of
/// f32 subnormal results. So a kernel passes here with a fragment or
/// packing error only if the error cancels out; its accuracy on a GPU may
/// be a few f32 ulps worse per instruction.
inline void llmc_emu_mma_m16n8k16(bool f16, float d[4], const unsigned a[4],
                                  const unsigned b[2]) {
  using namespace llmc_emu;
  int id = running->current, lane = id % 32, first = id - lane;
  if (first + 32 > int(running->threads.size()))
    fail("mma m16n8k16 in a warp of fewer than 32 threads");
  uint32_t *mine = &running->mmaSlots[size_t(id) * kMmaSlotWords];
  for (int r = 0; r < 4; ++r)
    mine[r] = a[r];
  mine[4] = b[0];
  mine[5] = b[1];
  warpBarrier(0xffffffffu); // every lane's registers are in its slots
  auto slot = [&](int fromLane, int word) {
    return running->mmaSlots[size_t(first + fromLane) * kMmaSlotWords + word];
  };
  auto half = [&](uint32_t pair, int upper) {
    uint32_t bits = (upper ? pair >> 16 : pair) & 0xffff;
    return f16 ? double(__half2float(__half{uint16_t(bits)}))
               : double(llmc_emu_float(bits << 16));
  };
  // A[row][col]: lane 4 (row % 8) + (col % 8) / 2, register row / 8 + 2
  // (col / 8), half col % 2.
  auto aAt = [&](int row, int col) {
    return half(slot(4 * (row % 8) + col % 8 / 2, row / 8 + 2 * (col / 8)),
                col % 2);
  };
  // B[row][col]: lane 4 col + (row % 8) / 2, register row / 8, half row % 2.
  auto bAt = [&](int row, int col) {
    return half(slot(4 * col + row % 8 / 2, 4 + row / 8), row % 2);
  };
  mmaAccumulate(d, lane, 16, aAt, bAt);
}

#endif // LLMC_TEST_UNIT_CODEGEN_KERNELTOCUDA_CUDAEMULATION_H

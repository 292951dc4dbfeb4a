// The CUDA emitter: kernel IR to CUDA C++ source and a launch configuration.
//
// Three schedules, picked from the kernel's shape (KernelToCuda.h):
//  - Pointwise (no reductions): a grid-stride loop over work items; an item
//    is V consecutive columns of one row, loaded and stored with 128-bit
//    accesses where the layout allows it (decided here, from the constant
//    offsets and strides), then a scalar loop over the rows' tails.
//  - WarpRow (reductions, rows up to kWarpRowMaxLength): one warp per row,
//    column loops strided by the 32 lanes, reductions by xor shuffles.
//  - BlockRow (longer rows): one block per row, column loops strided by the
//    block, reductions by shuffles then across warps in shared memory.
// Row kernels run the row like the CPU emitter (KernelToCpu/): row-level
// values once per row, one column loop per reduction phase, a last column
// loop for the stores, then the row-level stores.
//
// Numerics. Values are computed in f32 (i64 for integers), loads widen and
// stores narrow with round to nearest even (__float2half_rn,
// __float2bfloat16_rn), as do RoundF16 / RoundBF16 (narrowed and widened).
// Math uses CUDA's accurate library functions and no fast-math flags:
// expf (2 ulp), logf (1 ulp), tanhf (2 ulp), erff (2 ulp),
// sqrtf (correctly rounded), rsqrtf (2 ulp), sinf/cosf (2 ulp, with the slow
// path for large arguments, where the CPU emitter gives NaN past 2^22), and
// IEEE division. NVRTC contracts a*b+c into FMAs (its default, --fmad=true),
// which the CPU emitter does not: results differ from the CPU's by a few
// ulp per operation. Reductions add in a different order from the CPU's
// (per thread, then a shuffle tree), but in a fixed order: a kernel gives
// the same bits on every run, and every lane of a reduction gets the same
// value (x + shfl_xor(x) commutes).
#include "codegen/KernelToCuda/KernelToCuda.h"
#include "ir/kernel/RowSchedule.h"

#include "ir/kernel/Program.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>
#include <set>

using namespace llmc;
using namespace llmc::cuda;
using kir::DType;
using kir::isReduction;
using kir::Level;
using kir::Op;

namespace {

/// Rows up to this length get a warp; longer ones a block.
constexpr int64_t kWarpRowMaxLength = 2048;
constexpr int kWarpRowBlock = 256;    // 8 warps, one row each
constexpr int kBlockRowThreads = 512; // threads of a BlockRow block
constexpr int kPointwiseBlock = 256;
/// Threads of a multi-tensor sum's second pass (a block per member).
constexpr int kMultiTensorSumBlock = 256;
/// The emitted kernels loop with a grid stride, so the grid can be capped:
/// more blocks than this add only scheduling work.
constexpr int64_t kMaxGridBlocks = 65535;

} // namespace

//===----------------------------------------------------------------------===//
// The prelude
//===----------------------------------------------------------------------===//

// Written so that it also compiles as host C++ with the CUDA names that
// test/unit/codegen/KernelToCuda/CudaEmulation.h provides.
static const char kPrelude[] = R"cuda(// llmc CUDA prelude: storage types, loads and stores, reductions, Philox.
#include <cuda_fp16.h>
#include <cuda_bf16.h>

#define LLMC_DEVICE static __device__ __forceinline__

// Loads widen: floats to f32 (exact), integers to i64.
LLMC_DEVICE float llmc_load(const float *p) { return *p; }
LLMC_DEVICE float llmc_load(const __half *p) { return __half2float(*p); }
LLMC_DEVICE float llmc_load(const __nv_bfloat16 *p) { return __bfloat162float(*p); }
LLMC_DEVICE long long llmc_load(const int *p) { return *p; }
LLMC_DEVICE long long llmc_load(const long long *p) { return *p; }

// Stores narrow: f16 and bf16 round to nearest even, i64 to i32 truncates.
LLMC_DEVICE void llmc_store(float *p, float x) { *p = x; }
LLMC_DEVICE void llmc_store(__half *p, float x) { *p = __float2half_rn(x); }
LLMC_DEVICE void llmc_store(__nv_bfloat16 *p, float x) { *p = __float2bfloat16_rn(x); }
LLMC_DEVICE void llmc_store(int *p, long long x) { *p = (int)x; }
LLMC_DEVICE void llmc_store(long long *p, long long x) { *p = x; }

// kir RoundF16 / RoundBF16: the nearest f16 / bf16 value as a float, what a
// store and a load give; NaN becomes 0x7fc00000, as in the CPU kernels
// (cvt gives a canonical NaN of its own).
LLMC_DEVICE float llmc_round_f16(float x) {
  return x != x ? __int_as_float(0x7fc00000)
                : __half2float(__float2half_rn(x));
}
LLMC_DEVICE float llmc_round_bf16(float x) {
  return x != x ? __int_as_float(0x7fc00000)
                : __bfloat162float(__float2bfloat16_rn(x));
}

// N consecutive elements in one access of N * sizeof(T) bytes (16 for
// float4 or 8 halves): the emitter uses them only where the address is a
// multiple of that size.
template <typename T, int N> struct alignas(sizeof(T) * N) llmc_pack { T v[N]; };

template <int N, typename T, typename U>
LLMC_DEVICE void llmc_load_vec(const T *p, U (&out)[N]) {
  const llmc_pack<T, N> pack = *reinterpret_cast<const llmc_pack<T, N> *>(p);
#pragma unroll
  for (int i = 0; i < N; ++i)
    out[i] = llmc_load(&pack.v[i]);
}

template <int N, typename T, typename U>
LLMC_DEVICE void llmc_store_vec(T *p, const U (&in)[N]) {
  llmc_pack<T, N> pack;
#pragma unroll
  for (int i = 0; i < N; ++i)
    llmc_store(&pack.v[i], in[i]);
  *reinterpret_cast<llmc_pack<T, N> *>(p) = pack;
}

// max/min propagate NaN, like the CPU kernels (fmaxf would drop it).
LLMC_DEVICE float llmc_max(float a, float b) { return (a != a || b != b) ? a + b : fmaxf(a, b); }
LLMC_DEVICE float llmc_min(float a, float b) { return (a != a || b != b) ? a + b : fminf(a, b); }
LLMC_DEVICE long long llmc_max(long long a, long long b) { return a > b ? a : b; }
LLMC_DEVICE long long llmc_min(long long a, long long b) { return a < b ? a : b; }

// Warp reductions by xor butterflies: every lane ends with the same value.
LLMC_DEVICE float llmc_warp_sum(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    x += __shfl_xor_sync(0xffffffffu, x, offset);
  return x;
}
LLMC_DEVICE float llmc_warp_max(float x) {
#pragma unroll
  for (int offset = 16; offset > 0; offset >>= 1)
    x = llmc_max(x, __shfl_xor_sync(0xffffffffu, x, offset));
  return x;
}

// Block reductions: each warp reduces, lane 0 of each warp leaves its
// value in `scratch` (32 floats of shared memory), then every warp reduces
// those, so every thread gets the total with no broadcast. The first
// barrier keeps a previous reduction's readers ahead of these writes.
LLMC_DEVICE float llmc_block_sum(float x, float *scratch) {
  x = llmc_warp_sum(x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  x = lane < (int)(blockDim.x >> 5) ? scratch[lane] : 0.0f;
  return llmc_warp_sum(x);
}
LLMC_DEVICE float llmc_block_max(float x, float *scratch) {
  x = llmc_warp_max(x);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0)
    scratch[warp] = x;
  __syncthreads();
  x = lane < (int)(blockDim.x >> 5) ? scratch[lane] : __int_as_float(0xff800000);
  return llmc_warp_max(x);
}

// Philox4x32-10 (Salmon et al., SC'11), as the kir Random op defines it:
// key = {lo32(key), hi32(key)}, counter = {lo32(counterLow),
// hi32(counterLow), lo32(counterHigh), hi32(counterHigh)}; the result is
// the first output word's top 24 bits times 2^-24, in [0, 1). Integer
// arithmetic and an exact conversion: the CPU kernels give the same bits.
LLMC_DEVICE void llmc_philox(unsigned (&ctr)[4], unsigned k0, unsigned k1) {
#pragma unroll
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    const unsigned hi0 = __umulhi(0xD2511F53u, ctr[0]), lo0 = 0xD2511F53u * ctr[0];
    const unsigned hi1 = __umulhi(0xCD9E8D57u, ctr[2]), lo1 = 0xCD9E8D57u * ctr[2];
    const unsigned next0 = hi1 ^ ctr[1] ^ k0, next2 = hi0 ^ ctr[3] ^ k1;
    ctr[0] = next0;
    ctr[1] = lo1;
    ctr[2] = next2;
    ctr[3] = lo0;
  }
}
LLMC_DEVICE float llmc_random(long long key, long long counterHigh, long long counterLow) {
  const unsigned long long k = (unsigned long long)key;
  const unsigned long long hi = (unsigned long long)counterHigh;
  const unsigned long long lo = (unsigned long long)counterLow;
  unsigned ctr[4] = {(unsigned)lo, (unsigned)(lo >> 32), (unsigned)hi, (unsigned)(hi >> 32)};
  llmc_philox(ctr, (unsigned)k, (unsigned)(k >> 32));
  return (float)(ctr[0] >> 8) * 5.9604644775390625e-8f; // 2^-24
}
)cuda";

const std::string &llmc::cuda::cudaPrelude() {
  static const std::string prelude = kPrelude;
  return prelude;
}

const char *llmc::cuda::scheduleName(CudaSchedule schedule) {
  switch (schedule) {
  case CudaSchedule::Pointwise:
    return "pointwise";
  case CudaSchedule::WarpRow:
    return "warp-per-row";
  case CudaSchedule::BlockRow:
    return "block-per-row";
  }
  return "?";
}

//===----------------------------------------------------------------------===//
// Source fragments
//===----------------------------------------------------------------------===//

namespace {


const char *storageTypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "float";
  case DType::F16:
    return "__half";
  case DType::BF16:
    return "__nv_bfloat16";
  case DType::I32:
    return "int";
  case DType::I64:
    return "long long";
  case DType::I1:
    return "bool";
  }
  return "?";
}

const char *valueTypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "float";
  case DType::I64:
    return "long long";
  case DType::I1:
    return "bool";
  default:
    return storageTypeName(type);
  }
}

/// An f32 constant that reads back to the same float: 9 significant digits
/// round-trip, non-finite values by their bits.
std::string floatLiteral(double value) {
  float f = float(value);
  if (std::isnan(f))
    return "__int_as_float(0x7fc00000)";
  if (std::isinf(f))
    return f > 0 ? "__int_as_float(0x7f800000)" : "__int_as_float(0xff800000)";
  char text[64];
  std::snprintf(text, sizeof(text), "%.9g", double(f));
  std::string literal = text;
  if (literal.find_first_of(".e") == std::string::npos)
    literal += ".0";
  return literal + "f";
}

std::string intLiteral(int64_t value) {
  if (value == std::numeric_limits<int64_t>::min())
    return "(-9223372036854775807LL - 1)";
  return std::to_string(value) + "LL";
}

/// Appends source lines at an indentation.
class Writer {
public:
  void line(const llvm::Twine &text) {
    out.append(2 * depth, ' ');
    out += text.str();
    out += '\n';
  }
  void open(const llvm::Twine &text) {
    line(text + " {");
    ++depth;
  }
  void close(llvm::StringRef suffix = "") {
    --depth;
    line("}" + suffix);
  }
  std::string take() { return std::move(out); }

private:
  std::string out;
  int depth = 0;
};

//===----------------------------------------------------------------------===//
// Kernel analysis: schedule, vector width, launch
//===----------------------------------------------------------------------===//

/// What the emitter decides for a kernel before writing it.
struct KernelPlan {
  CudaSchedule schedule = CudaSchedule::Pointwise;
  int vectorWidth = 1;
  std::vector<bool> vectorOperand; // accessed with llmc_load_vec/store_vec
  CudaLaunch launch;
};

/// Whether operand `index` is accessed at (outer indices, column) with a
/// unit row stride and no override of the row index, so that V consecutive
/// columns are V consecutive elements: then it can be a vector access.
bool isContiguousAccess(const kir::Kernel &kernel,
                        const std::vector<Level> &levels, int32_t operand,
                        const kir::Instr *load) {
  size_t rowDim = kernel.domain.size() - 1;
  const kir::Access &access = kernel.operands[operand];
  if (access.strides[rowDim] != 1)
    return false;
  llvm::ArrayRef<int32_t> overrides =
      load ? kir::indexOverrides(*load) : llvm::ArrayRef<int32_t>();
  if (!overrides.empty()) {
    if (overrides[rowDim] >= 0)
      return false;
    for (int32_t arg : overrides)
      if (arg >= 0 && levels[arg] == Level::Column)
        return false;
  }
  return true;
}

/// Every instruction accessing each operand (loads and stores).
std::vector<std::vector<int32_t>> accessesByOperand(const kir::Kernel &kernel) {
  std::vector<std::vector<int32_t>> uses(kernel.operands.size());
  for (auto [i, instr] : llvm::enumerate(kernel.body))
    if (instr.op == Op::Load || instr.op == Op::Store)
      uses[instr.operand].push_back(int32_t(i));
  return uses;
}

/// Whether a row-level store to `operand` could meet a load of the same
/// buffer by another thread of the row: the store then waits for a barrier.
bool rowStoreNeedsBarrier(const kir::Kernel &kernel, int32_t operand) {
  int32_t buffer = kernel.operands[operand].buffer;
  for (const kir::Instr &instr : kernel.body)
    if (instr.op == Op::Load && kernel.operands[instr.operand].buffer == buffer)
      return true;
  return false;
}

KernelPlan planKernel(const kir::Kernel &kernel) {
  KernelPlan plan;
  std::vector<Level> levels = kir::computeLevels(kernel);
  int64_t rows = kernel.numRows(), length = kernel.rowLength();

  // A row-level store that may meet a load of its buffer needs the row's
  // threads to synchronize first, which only the row schedules do.
  bool rowStoreHazard = false;
  for (auto [i, instr] : llvm::enumerate(kernel.body))
    if (instr.op == Op::Store && levels[i] == Level::Row)
      rowStoreHazard |= rowStoreNeedsBarrier(kernel, instr.operand);
  if (kernel.hasReduction() || rowStoreHazard)
    plan.schedule = length <= kWarpRowMaxLength ? CudaSchedule::WarpRow
                                                : CudaSchedule::BlockRow;

  // The vector width: the widest V in {8, 4, 2} such that every
  // column-level access with a unit row stride moves at most 16 bytes and
  // starts at a multiple of V elements for every row (offset and outer
  // strides multiples of V; buffer bases are 16-byte aligned).
  std::vector<std::vector<int32_t>> uses = accessesByOperand(kernel);
  plan.vectorOperand.assign(kernel.operands.size(), false);
  std::vector<int32_t> candidates;
  int64_t widest = 0;
  for (size_t operand = 0; operand < kernel.operands.size(); ++operand) {
    bool contiguous = !uses[operand].empty();
    for (int32_t use : uses[operand]) {
      const kir::Instr &instr = kernel.body[use];
      if (levels[use] != Level::Column ||
          !isContiguousAccess(kernel, levels, instr.operand, &instr))
        contiguous = false;
    }
    if (!contiguous)
      continue;
    candidates.push_back(operand);
    widest = std::max(widest, kir::dtypeBytes(kernel.operands[operand].dtype));
  }
  if (!candidates.empty()) {
    for (int width = int(std::min<int64_t>(8, 16 / widest)); width >= 2;
         width /= 2) {
      if (length < width)
        continue;
      bool aligned = true;
      for (int32_t operand : candidates) {
        const kir::Access &access = kernel.operands[operand];
        aligned &= access.offset % width == 0;
        for (size_t d = 0; d + 1 < access.strides.size(); ++d)
          aligned &= access.strides[d] % width == 0 || kernel.domain[d] == 1;
      }
      if (aligned) {
        plan.vectorWidth = width;
        for (int32_t operand : candidates)
          plan.vectorOperand[operand] = true;
        break;
      }
    }
  }

  CudaLaunch &launch = plan.launch;
  switch (plan.schedule) {
  case CudaSchedule::Pointwise: {
    int64_t items = rows * (length / plan.vectorWidth) +
                    rows * (length % plan.vectorWidth);
    launch.block[0] = kPointwiseBlock;
    launch.grid[0] = std::clamp<int64_t>(
        (items + kPointwiseBlock - 1) / kPointwiseBlock, 1, kMaxGridBlocks);
    break;
  }
  case CudaSchedule::WarpRow: {
    int64_t warps = kWarpRowBlock / 32;
    launch.block[0] = kWarpRowBlock;
    launch.grid[0] =
        std::clamp<int64_t>((rows + warps - 1) / warps, 1, kMaxGridBlocks);
    break;
  }
  case CudaSchedule::BlockRow:
    launch.block[0] = kBlockRowThreads;
    launch.grid[0] = std::clamp<int64_t>(rows, 1, kMaxGridBlocks);
    launch.staticSharedBytes = 32 * sizeof(float);
    break;
  }
  return plan;
}

//===----------------------------------------------------------------------===//
// The kernel writer
//===----------------------------------------------------------------------===//

class KernelWriter {
public:
  KernelWriter(const kir::Kernel &kernel, const KernelPlan &plan)
      : kernel(kernel), plan(plan), rank(kernel.domain.size()),
        schedule(kernel), levels(schedule.levels) {}

  std::string write();
  /// The multi-tensor kernel `name` (flat domain, see
  /// emitMultiTensorKernel).
  std::string writeMultiTensor(const std::string &name);
  /// The two kernels of a multi-tensor sum (emitMultiTensorSumKernels).
  std::string writeMultiTensorSum(const std::string &name,
                                  const std::string &totalName,
                                  int totalBlock);

private:
  llvm::BitVector columnClosure(llvm::ArrayRef<int32_t> roots) const {
    return kir::columnClosure(kernel, levels, roots);
  }

  void writeSignature();
  void writeOuterIndices(llvm::StringRef row);
  /// Row-level `values` (a list of RowSchedule::rowValues), in order.
  void writeRowValues(llvm::ArrayRef<int32_t> values);
  void writeRowBody(llvm::StringRef row);
  void writePointwise();
  /// One column loop of a row (row schedules): vector chunks then a scalar
  /// tail, strided over the threads of the row; accumulates `reductions`.
  void writeColumnLoop(const llvm::BitVector &needed,
                       llvm::ArrayRef<int32_t> reductions);
  /// The code for V columns starting at `first` (a variable holding the
  /// first column), or one column when `width` is 1.
  void writeChunk(const llvm::BitVector &needed,
                  llvm::ArrayRef<int32_t> reductions, int width,
                  llvm::StringRef first);
  void writeRowStores(llvm::ArrayRef<int32_t> stores);
  /// A multi-tensor kernel's chunk: its member (a binary search of the
  /// table), operand pointers (but `skip`'s), [begin, end), row values.
  void writeChunkHead(std::vector<bool> skip);
  /// The chunk's elements: 128-bit accesses on aligned members, else (and
  /// for the tail) one element at a time; accumulates `reductions`.
  void writeChunkLoops(const llvm::BitVector &needed,
                       llvm::ArrayRef<int32_t> reductions);

  std::string instrExpr(int32_t index, bool vectorLanes);
  std::string address(int32_t operand, llvm::ArrayRef<int32_t> overrides,
                      llvm::StringRef column, bool vectorLanes);
  std::string ref(int32_t value, bool vectorLanes) const;
  std::string param(int32_t operand) const {
    return "op" + std::to_string(operand);
  }
  static std::string name(int32_t value) { return "v" + std::to_string(value); }

  const kir::Kernel &kernel;
  const KernelPlan &plan;
  size_t rank;
  kir::RowSchedule schedule; // the walk over a row, shared with KernelToCpu
  const std::vector<Level> &levels; // schedule.levels
  // Column values held in arrays of V lanes (vector loads); the rest are
  // scalars of the current lane.
  llvm::BitVector laneArray;
  Writer w;
};


std::string KernelWriter::ref(int32_t value, bool vectorLanes) const {
  if (vectorLanes && laneArray.test(value))
    return name(value) + "[l]";
  return name(value);
}

/// The element `offset + sum_d strides[d] * i_d` of an operand: i_d is the
/// outer index `i<d>`, `column` for the row, or the override's value.
std::string KernelWriter::address(int32_t operand,
                                  llvm::ArrayRef<int32_t> overrides,
                                  llvm::StringRef column, bool vectorLanes) {
  const kir::Access &access = kernel.operands[operand];
  std::string sum;
  auto term = [&](const std::string &index, int64_t stride) {
    if (!sum.empty())
      sum += " + ";
    sum += stride == 1 ? index : intLiteral(stride) + " * " + index;
  };
  if (access.offset != 0)
    sum = intLiteral(access.offset);
  for (size_t d = 0; d < rank; ++d) {
    int64_t stride = access.strides[d];
    if (stride == 0)
      continue;
    if (!overrides.empty() && overrides[d] >= 0)
      term(ref(overrides[d], vectorLanes), stride);
    else if (d + 1 < rank)
      term("i" + std::to_string(d), stride);
    else
      term(column.str(), stride);
  }
  if (sum.empty())
    return param(operand);
  return param(operand) + " + (" + sum + ")";
}

std::string KernelWriter::instrExpr(int32_t index, bool vectorLanes) {
  const kir::Instr &instr = kernel.body[index];
  auto arg = [&](size_t n) { return ref(instr.args[n], vectorLanes); };
  switch (instr.op) {
  case Op::Load:
    return "llmc_load(" +
           address(instr.operand, instr.args, "c", vectorLanes) + ")";
  case Op::Const:
    return instr.type == DType::I64 ? intLiteral(int64_t(instr.imm))
                                    : floatLiteral(instr.imm);
  case Op::Index:
    return size_t(instr.dim) + 1 == rank ? "c"
                                         : "i" + std::to_string(instr.dim);
  case Op::Neg:
    return "-" + arg(0);
  case Op::Exp:
    return "expf(" + arg(0) + ")";
  case Op::Log:
    return "logf(" + arg(0) + ")";
  case Op::Tanh:
    return "tanhf(" + arg(0) + ")";
  case Op::Erf:
    return "erff(" + arg(0) + ")";
  case Op::Sqrt:
    return "sqrtf(" + arg(0) + ")";
  case Op::Rsqrt:
    return "rsqrtf(" + arg(0) + ")";
  case Op::Sin:
    return "sinf(" + arg(0) + ")";
  case Op::Cos:
    return "cosf(" + arg(0) + ")";
  case Op::Abs:
    return "fabsf(" + arg(0) + ")";
  case Op::Add:
    return arg(0) + " + " + arg(1);
  case Op::Sub:
    return arg(0) + " - " + arg(1);
  case Op::Mul:
    return arg(0) + " * " + arg(1);
  case Op::Div:
  case Op::Rem: // signed, truncating: C's / and % on long long
    return arg(0) + (instr.op == Op::Div ? " / " : " % ") + arg(1);
  case Op::Max:
    return "llmc_max(" + arg(0) + ", " + arg(1) + ")";
  case Op::Min:
    return "llmc_min(" + arg(0) + ", " + arg(1) + ")";
  // Ordered comparisons: false when either side is NaN, like the CPU's.
  case Op::CmpLt:
    return arg(0) + " < " + arg(1);
  case Op::CmpLe:
    return arg(0) + " <= " + arg(1);
  case Op::CmpEq:
    return arg(0) + " == " + arg(1);
  case Op::Select:
    return arg(0) + " ? " + arg(1) + " : " + arg(2);
  case Op::IToF:
    return "(float)" + arg(0);
  case Op::Random:
    return "llmc_random(" + arg(0) + ", " + arg(1) + ", " + arg(2) + ")";
  case Op::RoundF16:
    return "llmc_round_f16(" + arg(0) + ")";
  case Op::RoundBF16:
    return "llmc_round_bf16(" + arg(0) + ")";
  case Op::ReduceSum:
  case Op::ReduceMax:
  case Op::Store:
    break;
  }
  return "/* not a value */";
}

void KernelWriter::writeSignature() {
  // A load-only operand is const; an operand is __restrict__ unless another
  // operand names its buffer and one of them is stored to (an epilogue that
  // reads and writes C).
  std::set<int32_t> storedBuffers;
  std::vector<bool> storedOperand(kernel.operands.size(), false);
  for (const kir::Instr &instr : kernel.body)
    if (instr.op == Op::Store) {
      storedOperand[instr.operand] = true;
      storedBuffers.insert(kernel.operands[instr.operand].buffer);
    }
  std::vector<std::string> params;
  for (auto [index, access] : llvm::enumerate(kernel.operands)) {
    int sharing = 0;
    for (const kir::Access &other : kernel.operands)
      sharing += other.buffer == access.buffer;
    bool aliased = sharing > 1 && storedBuffers.count(access.buffer);
    std::string text = storedOperand[index] ? "" : "const ";
    text += storageTypeName(access.dtype);
    text += aliased ? " *" : " *__restrict__ ";
    text += param(index);
    params.push_back(text);
  }
  w.line("extern \"C\" __global__ void __launch_bounds__(" +
         llvm::Twine(plan.launch.threadsPerBlock()) + ")");
  if (params.empty()) {
    w.open(kernel.name + "()");
    return;
  }
  w.line(kernel.name + "(");
  for (size_t i = 0; i + 1 < params.size(); ++i)
    w.line("    " + params[i] + ",");
  w.open("    " + params.back() + ")");
}

void KernelWriter::writeOuterIndices(llvm::StringRef row) {
  // Rows are numbered row-major over the outer dims.
  if (rank < 2)
    return;
  std::string rest = row.str();
  for (size_t d = rank - 1; d-- > 0;) {
    std::string index = "i" + std::to_string(d);
    if (d == 0) {
      w.line("const long long " + index + " = " + rest + ";");
      break;
    }
    std::string extent = intLiteral(kernel.domain[d]);
    w.line("const long long " + index + " = " + rest + " % " + extent + ";");
    std::string next = "r" + std::to_string(d);
    w.line("const long long " + next + " = " + rest + " / " + extent + ";");
    rest = next;
  }
}

void KernelWriter::writeRowValues(llvm::ArrayRef<int32_t> values) {
  for (int32_t i : values) {
    const kir::Instr &instr = kernel.body[i];
    w.line("const " + llvm::Twine(valueTypeName(instr.type)) + " " +
           name(i) + " = " + instrExpr(i, false) + ";");
  }
}

void KernelWriter::writeChunk(const llvm::BitVector &needed,
                              llvm::ArrayRef<int32_t> reductions, int width,
                              llvm::StringRef first) {
  bool lanes = width > 1;
  laneArray = llvm::BitVector(kernel.body.size());
  std::vector<std::pair<int32_t, std::string>> vectorStores;
  if (lanes) {
    // Vector loads before the lanes, vector stores after them.
    for (int32_t i : needed.set_bits()) {
      const kir::Instr &instr = kernel.body[i];
      // Only loads and stores have an operand (others hold -1).
      if ((instr.op != Op::Load && instr.op != Op::Store) ||
          !plan.vectorOperand[instr.operand])
        continue;
      if (instr.op == Op::Load) {
        laneArray.set(i);
        w.line(llvm::Twine(valueTypeName(instr.type)) + " " + name(i) + "[" +
               llvm::Twine(width) + "];");
        w.line("llmc_load_vec<" + llvm::Twine(width) + ">(" +
               address(instr.operand, instr.args, first, false) + ", " +
               name(i) + ");");
      } else {
        std::string pack = "s" + std::to_string(i);
        DType type = kir::computeType(kernel.operands[instr.operand].dtype);
        w.line(llvm::Twine(valueTypeName(type)) + " " + pack + "[" +
               llvm::Twine(width) + "];");
        vectorStores.push_back({i, pack});
      }
    }
    w.line("#pragma unroll");
    w.open("for (int l = 0; l < " + llvm::Twine(width) + "; ++l)");
    w.line("const long long c = " + first + " + l;");
  }
  for (int32_t i : needed.set_bits()) {
    const kir::Instr &instr = kernel.body[i];
    if (laneArray.test(i))
      continue;
    if (instr.op == Op::Store) {
      std::string value = ref(instr.args[0], lanes);
      if (lanes && plan.vectorOperand[instr.operand])
        w.line("s" + std::to_string(i) + "[l] = " + value + ";");
      else
        w.line("llmc_store(" +
               address(instr.operand, kir::indexOverrides(instr), "c", lanes) +
               ", " + value + ");");
      continue;
    }
    w.line("const " + llvm::Twine(valueTypeName(instr.type)) + " " + name(i) +
           " = " + instrExpr(i, lanes) + ";");
  }
  for (int32_t reduction : reductions) {
    const kir::Instr &instr = kernel.body[reduction];
    std::string acc = "acc" + std::to_string(reduction);
    std::string value = ref(instr.args[0], lanes);
    if (instr.op == Op::ReduceSum)
      w.line(acc + " += " + value + ";");
    else
      w.line(acc + " = llmc_max(" + acc + ", " + value + ");");
  }
  if (lanes) {
    w.close();
    for (auto &[i, pack] : vectorStores)
      w.line("llmc_store_vec<" + llvm::Twine(width) + ">(" +
             address(kernel.body[i].operand,
                     kir::indexOverrides(kernel.body[i]), first, false) +
             ", " + pack +
             ");");
  }
  laneArray.reset();
}

void KernelWriter::writeColumnLoop(const llvm::BitVector &needed,
                                   llvm::ArrayRef<int32_t> reductions) {
  int64_t length = kernel.rowLength();
  int width = plan.vectorWidth;
  bool block = plan.schedule == CudaSchedule::BlockRow;
  std::string thread = block ? "(long long)threadIdx.x" : "(long long)lane";
  int64_t threads = block ? plan.launch.block[0] : 32;
  for (int32_t reduction : reductions)
    w.line("float acc" + std::to_string(reduction) + " = " +
           (kernel.body[reduction].op == Op::ReduceSum
                ? std::string("0.0f")
                : floatLiteral(-INFINITY)) +
           ";");
  int64_t vectorEnd = width > 1 ? length / width * width : 0;
  if (vectorEnd > 0) {
    w.open("for (long long c0 = " + thread + " * " + llvm::Twine(width) +
           "; c0 < " + intLiteral(vectorEnd) + "; c0 += " +
           intLiteral(threads * width) + ")");
    writeChunk(needed, reductions, width, "c0");
    w.close();
  }
  if (vectorEnd < length) {
    std::string start =
        vectorEnd ? intLiteral(vectorEnd) + " + " + thread : thread;
    w.open("for (long long c = " + start + "; c < " + intLiteral(length) +
           "; c += " + intLiteral(threads) + ")");
    writeChunk(needed, reductions, 1, "c");
    w.close();
  }
  for (int32_t reduction : reductions) {
    bool sum = kernel.body[reduction].op == Op::ReduceSum;
    std::string acc = "acc" + std::to_string(reduction);
    std::string call =
        block ? (sum ? "llmc_block_sum(" : "llmc_block_max(") + acc +
                    ", llmc_scratch)"
              : (sum ? "llmc_warp_sum(" : "llmc_warp_max(") + acc + ")";
    w.line("const float " + name(reduction) + " = " + call + ";");
  }
}

void KernelWriter::writeRowStores(llvm::ArrayRef<int32_t> stores) {
  bool barrier = false;
  for (int32_t i : stores)
    barrier |= rowStoreNeedsBarrier(kernel, kernel.body[i].operand);
  if (stores.empty())
    return;
  bool block = plan.schedule == CudaSchedule::BlockRow;
  // Every thread of the row has loaded what it needs before one stores.
  if (barrier)
    w.line(block ? "__syncthreads();" : "__syncwarp();");
  w.open(block ? "if (threadIdx.x == 0)" : "if (lane == 0)");
  for (int32_t i : stores)
    w.line("llmc_store(" + address(kernel.body[i].operand,
                           kir::indexOverrides(kernel.body[i]), "0", false) +
           ", " + name(kernel.body[i].args[0]) + ");");
  w.close();
}

void KernelWriter::writeRowBody(llvm::StringRef row) {
  writeOuterIndices(row);
  schedule.walk(
      [&](llvm::ArrayRef<int32_t> values) { writeRowValues(values); },
      [&](const kir::ColumnPass &pass) {
        w.line(pass.phase ? "// reduction phase " + std::to_string(pass.phase)
                          : std::string("// stores"));
        writeColumnLoop(pass.needed, pass.reductions);
      },
      [&](llvm::ArrayRef<int32_t> stores) { writeRowStores(stores); });
}

void KernelWriter::writePointwise() {
  int64_t rows = kernel.numRows(), length = kernel.rowLength();
  int width = plan.vectorWidth;
  llvm::ArrayRef<int32_t> rowStores = schedule.rowStores;
  const llvm::BitVector &needed = schedule.storePass.needed;
  std::string stride = "(long long)gridDim.x * blockDim.x";
  std::string start = "(long long)blockIdx.x * blockDim.x + threadIdx.x";

  // One loop per part of the rows: [0, vectorEnd) in chunks of `width`
  // columns, then [vectorEnd, length) one column at a time.
  auto part = [&](int64_t begin, int64_t end, int chunk) {
    int64_t perRow = (end - begin) / chunk;
    w.open("for (long long item = " + start + "; item < " +
           intLiteral(rows * perRow) + "; item += " + stride + ")");
    std::string first = chunk > 1 ? "c0" : "c";
    if (rows == 1) {
      w.line("const long long row = 0;");
      w.line("const long long " + first + " = " +
             (begin ? intLiteral(begin) + " + " : std::string()) + "item" +
             (chunk > 1 ? " * " + std::to_string(chunk) : "") + ";");
    } else {
      w.line("const long long row = item / " + intLiteral(perRow) + ";");
      w.line("const long long " + first + " = " +
             (begin ? intLiteral(begin) + " + " : std::string()) + "item % " +
             intLiteral(perRow) +
             (chunk > 1 ? " * " + std::to_string(chunk) : "") + ";");
    }
    writeOuterIndices("row");
    writeRowValues(schedule.rowValues[0]);
    writeChunk(needed, {}, chunk, first);
    // Row-level stores (no load shares their buffer, see planKernel): by
    // the item holding column 0.
    if (begin == 0 && !rowStores.empty()) {
      w.open("if (" + first + " == 0)");
      for (int32_t i : rowStores)
        w.line("llmc_store(" + address(kernel.body[i].operand,
                           kir::indexOverrides(kernel.body[i]), "0", false) +
               ", " + name(kernel.body[i].args[0]) + ");");
      w.close();
    }
    w.close();
  };
  int64_t vectorEnd = width > 1 ? length / width * width : 0;
  if (vectorEnd > 0)
    part(0, vectorEnd, width);
  if (vectorEnd < length)
    part(vectorEnd, length, 1);
}

std::string KernelWriter::write() {
  int64_t rows = kernel.numRows(), length = kernel.rowLength();
  const CudaLaunch &launch = plan.launch;
  w.line("// " + kernel.name + (kernel.origin.empty() ? "" : ": " + kernel.origin));
  w.line("// domain " + kir::formatShape(kernel.domain) + ": " +
         llvm::Twine(rows) + (rows == 1 ? " row of " : " rows of ") +
         llvm::Twine(length) + "; " +
         scheduleName(plan.schedule) +
         (plan.vectorWidth > 1
              ? ", " + std::to_string(plan.vectorWidth) + "-wide accesses"
              : std::string()) +
         "; grid " + llvm::Twine(launch.grid[0]) + ", block " +
         llvm::Twine(launch.block[0]));
  for (auto [index, access] : llvm::enumerate(kernel.operands))
    w.line("// op" + llvm::Twine(index) + ": buffer " +
           llvm::Twine(access.buffer) + " " + kir::dtypeName(access.dtype) +
           " offset " + llvm::Twine(access.offset) + " strides " +
           kir::formatShape(access.strides) +
           (plan.vectorOperand[index] ? " (vector)" : ""));
  writeSignature();
  switch (plan.schedule) {
  case CudaSchedule::Pointwise:
    writePointwise();
    break;
  case CudaSchedule::WarpRow: {
    int warps = launch.block[0] / 32;
    w.line("const int lane = threadIdx.x & 31;");
    w.open("for (long long row = (long long)blockIdx.x * " +
           llvm::Twine(warps) + " + (threadIdx.x >> 5); row < " +
           intLiteral(rows) + "; row += (long long)gridDim.x * " +
           llvm::Twine(warps) + ")");
    writeRowBody("row");
    w.close();
    break;
  }
  case CudaSchedule::BlockRow:
    w.line("__shared__ float llmc_scratch[32];");
    w.open("for (long long row = blockIdx.x; row < " + intLiteral(rows) +
           "; row += gridDim.x)");
    writeRowBody("row");
    w.close();
    break;
  }
  w.close();
  return w.take();
}

void KernelWriter::writeChunkHead(std::vector<bool> skip) {
  // The table: per member, its operands' addresses, element count, first
  // chunk and whether 128-bit accesses are aligned (CudaKernelBatch).
  size_t operands = kernel.operands.size();
  std::string stride = std::to_string(operands + 3);
  w.line("// The member holding the chunk: the last whose first chunk is <= "
         "it.");
  w.line("long long lo = 0, hi = llmc_members - 1;");
  w.open("while (lo < hi)");
  w.line("const long long mid = (lo + hi + 1) >> 1;");
  w.line("if (llmc_table[mid * " + stride + " + " +
         std::to_string(operands + 1) + "] <= chunk) lo = mid; else hi = "
         "mid - 1;");
  w.close();
  w.line("const long long *e = llmc_table + lo * " + stride + ";");
  std::vector<bool> stored(operands, false);
  for (const kir::Instr &instr : kernel.body)
    if (instr.op == Op::Store)
      stored[instr.operand] = true;
  for (auto [index, access] : llvm::enumerate(kernel.operands)) {
    if (!skip.empty() && skip[index])
      continue;
    std::string type = std::string(stored[index] ? "" : "const ") +
                       storageTypeName(access.dtype) + " *";
    w.line(type + param(index) + " = (" + type + ")e[" +
           std::to_string(index) + "];");
  }
  w.line("const long long begin = (chunk - e[" +
         std::to_string(operands + 1) + "]) * " +
         intLiteral(kMultiTensorChunk) + ";");
  w.line("const long long end = llmc_min(begin + " +
         intLiteral(kMultiTensorChunk) + ", e[" + std::to_string(operands) +
         "]);");
  writeRowValues(schedule.rowValues[0]);
}

void KernelWriter::writeChunkLoops(const llvm::BitVector &needed,
                                   llvm::ArrayRef<int32_t> reductions) {
  int width = plan.vectorWidth;
  std::string aligned = "e[" + std::to_string(kernel.operands.size() + 2) + "]";
  auto scalarLoop = [&](llvm::StringRef from) {
    w.open("for (long long c = " + from +
           " + threadIdx.x; c < end; c += blockDim.x)");
    writeChunk(needed, reductions, 1, "c");
    w.close();
  };
  if (width > 1) {
    w.open("if (" + aligned + ")");
    w.line("const long long vend = begin + (end - begin) / " +
           llvm::Twine(width) + " * " + llvm::Twine(width) + ";");
    w.open("for (long long c0 = begin + (long long)threadIdx.x * " +
           llvm::Twine(width) + "; c0 < vend; c0 += (long long)blockDim.x * " +
           llvm::Twine(width) + ")");
    writeChunk(needed, reductions, width, "c0");
    w.close();
    scalarLoop("vend");
    w.close();
    w.open("else");
    scalarLoop("begin");
    w.close();
  } else {
    scalarLoop("begin");
  }
}

std::string KernelWriter::writeMultiTensor(const std::string &name) {
  int width = plan.vectorWidth;
  w.line("// " + name + ": " + kernel.origin);
  w.line("// multi-tensor: chunks of " + llvm::Twine(kMultiTensorChunk) +
         " elements of the members in llmc_table, a block per chunk" +
         (width > 1 ? ", " + std::to_string(width) +
                          "-wide accesses on aligned members"
                    : std::string()));
  w.line("extern \"C\" __global__ void __launch_bounds__(" +
         llvm::Twine(plan.launch.threadsPerBlock()) + ")");
  w.line(name + "(const long long *__restrict__ llmc_table,");
  w.open("    long long llmc_members, long long llmc_chunks)");
  w.open("for (long long chunk = blockIdx.x; chunk < llmc_chunks; chunk += "
         "gridDim.x)");
  writeChunkHead({});
  llvm::SmallVector<int32_t> stores;
  for (size_t i = 0; i < kernel.body.size(); ++i)
    if (kernel.body[i].op == Op::Store)
      stores.push_back(i);
  writeChunkLoops(columnClosure(stores), {});
  w.close();
  w.close();
  return w.take();
}

std::string KernelWriter::writeMultiTensorSum(const std::string &name,
                                              const std::string &totalName,
                                              int totalBlock) {
  // The flat kernel's one reduction and the store of its value
  // (emitMultiTensorSumKernels checked the shape).
  int32_t reduction = -1, store = -1;
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    if (instr.op == Op::ReduceSum)
      reduction = int32_t(i);
    if (instr.op == Op::Store)
      store = int32_t(i);
  }
  int32_t total = kernel.body[store].operand;
  size_t operands = kernel.operands.size();
  std::string stride = std::to_string(operands + 3);
  int width = plan.vectorWidth;
  w.line("// " + name + ": " + kernel.origin);
  w.line("// multi-tensor sum, pass 1: the sum of each chunk of " +
         llvm::Twine(kMultiTensorChunk) +
         " elements of the members in llmc_table, a block per chunk" +
         (width > 1 ? ", " + std::to_string(width) +
                          "-wide accesses on aligned members"
                    : std::string()) +
         "; per thread in order, then the block's fixed tree");
  w.line("extern \"C\" __global__ void __launch_bounds__(" +
         llvm::Twine(plan.launch.threadsPerBlock()) + ")");
  w.line(name + "(const long long *__restrict__ llmc_table,");
  w.line("    long long llmc_members, long long llmc_chunks,");
  w.open("    float *__restrict__ llmc_partials)");
  w.line("__shared__ float llmc_scratch[32];");
  w.open("for (long long chunk = blockIdx.x; chunk < llmc_chunks; chunk += "
         "gridDim.x)");
  std::vector<bool> skip(operands, false);
  skip[total] = true;
  writeChunkHead(skip);
  w.line("float acc" + std::to_string(reduction) + " = 0.0f;");
  writeChunkLoops(columnClosure({kernel.body[reduction].args[0]}),
                  {reduction});
  w.line("const float chunkSum = llmc_block_sum(acc" +
         std::to_string(reduction) + ", llmc_scratch);");
  w.line("if (threadIdx.x == 0) llmc_partials[chunk] = chunkSum;");
  w.close();
  w.close();
  w.line("");
  w.line("// " + totalName + ": " + kernel.origin);
  w.line("// multi-tensor sum, pass 2: a block per member adds its chunks' "
         "sums (per thread in order, then the block's fixed tree) and "
         "stores the total");
  w.line("extern \"C\" __global__ void __launch_bounds__(" +
         llvm::Twine(totalBlock) + ")");
  w.line(totalName + "(const long long *__restrict__ llmc_table,");
  w.line("    long long llmc_members, long long llmc_chunks,");
  w.open("    const float *__restrict__ llmc_partials)");
  w.line("__shared__ float llmc_scratch[32];");
  w.open("for (long long m = blockIdx.x; m < llmc_members; m += gridDim.x)");
  w.line("const long long *e = llmc_table + m * " + stride + ";");
  w.line("const long long first = e[" + std::to_string(operands + 1) + "];");
  w.line("const long long n = (e[" + std::to_string(operands) + "] + " +
         intLiteral(kMultiTensorChunk - 1) + ") / " +
         intLiteral(kMultiTensorChunk) + ";");
  w.line("float acc = 0.0f;");
  w.line("for (long long i = threadIdx.x; i < n; i += blockDim.x) acc += "
         "llmc_partials[first + i];");
  w.line("const float sum = llmc_block_sum(acc, llmc_scratch);");
  std::string type =
      std::string(storageTypeName(kernel.operands[total].dtype)) + " *";
  w.line("if (threadIdx.x == 0) llmc_store((" + type + ")e[" +
         std::to_string(total) + "], sum);");
  w.close();
  w.close();
  return w.take();
}

} // namespace

//===----------------------------------------------------------------------===//
// Entry points
//===----------------------------------------------------------------------===//

CudaLaunch llmc::cuda::chooseLaunch(const kir::Kernel &kernel) {
  return planKernel(kernel).launch;
}

CudaKernel llmc::cuda::emitCudaKernel(const kir::Kernel &kernel) {
  KernelPlan plan = planKernel(kernel);
  CudaKernel result;
  result.name = kernel.name;
  result.launch = plan.launch;
  result.schedule = plan.schedule;
  result.vectorWidth = plan.vectorWidth;
  result.source = KernelWriter(kernel, plan).write();
  return result;
}

std::string llmc::cuda::emitCudaModule(llvm::ArrayRef<kir::Kernel> kernels) {
  std::string source = cudaPrelude();
  for (const kir::Kernel &kernel : kernels) {
    source += "\n";
    source += emitCudaKernel(kernel).source;
  }
  return source;
}

std::string llmc::cuda::emitCudaModule(const kir::Program &program) {
  return emitCudaModule(program.kernels);
}

std::string llmc::cuda::emitMultiTensorKernel(const kir::Kernel &flat,
                                              const std::string &name,
                                              CudaLaunch &launch,
                                              int &vectorWidth) {
  KernelPlan plan = planKernel(flat);
  vectorWidth = plan.vectorWidth;
  launch.block[0] = plan.launch.block[0];
  plan.launch = launch;
  return KernelWriter(flat, plan).writeMultiTensor(name);
}

std::string llmc::cuda::emitMultiTensorSumKernels(
    const kir::Kernel &flat, const std::string &name,
    const std::string &totalName, CudaLaunch &launch, int &vectorWidth,
    CudaLaunch &totalLaunch) {
  KernelPlan plan = planKernel(flat);
  vectorWidth = plan.vectorWidth;
  launch.block[0] = plan.launch.block[0];
  launch.staticSharedBytes = 32 * sizeof(float);
  plan.launch = launch;
  totalLaunch.block[0] = kMultiTensorSumBlock;
  totalLaunch.staticSharedBytes = 32 * sizeof(float);
  return KernelWriter(flat, plan)
      .writeMultiTensorSum(name, totalName, kMultiTensorSumBlock);
}

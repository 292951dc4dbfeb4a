// The target-neutral kernel IR: what one fused kernel computes, with every
// shape, stride and constant fixed. Both emitters (CPU through MLIR/LLVM,
// CUDA C++ through NVRTC) consume it; nothing in it assumes a target.
//
// A kernel iterates over a static `domain` [d0, ..., dn-1]. The last
// dimension is the *row*: a kernel may reduce along it (sum, max) and use the
// result in the same row; every other index names an independent row, so a
// backend may run rows in any order and in parallel (CPU: ranges of rows per
// thread; CUDA: a block per row). Rows are numbered row-major over d0..dn-2.
//
// The body is straight-line SSA over scalars: instruction i defines value i
// (a Store defines none). A value is *column-level* if it varies along the
// row dimension and *row-level* otherwise; a reduction turns a column-level
// value into a row-level one. Emitters evaluate column-level values in loops
// over the row, once per reduction phase, and row-level values once per row.
#ifndef LLMC_IR_KERNEL_KERNELIR_H
#define LLMC_IR_KERNEL_KERNELIR_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/BitVector.h"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace llmc::kir {

/// Element types of buffers. Values in a kernel body are F32, I64 or I1:
/// loads widen float storage to F32 and integer storage to I64, stores
/// narrow back (round to nearest even for F16/BF16).
enum class DType : uint8_t { F32, F16, BF16, I32, I64, I1 };

int64_t dtypeBytes(DType type);
const char *dtypeName(DType type);
std::optional<DType> parseDType(const std::string &name);
bool isFloat(DType type);
/// The type a load of `storage` produces: F32 for floats, I64 for integers.
DType computeType(DType storage);

/// How a kernel reads or writes one buffer: domain index (i0, ..., in-1)
/// maps to element `offset + sum_d strides[d] * i_d` of the buffer (in
/// elements of `dtype`, not bytes). A stride of 0 broadcasts.
struct Access {
  int32_t buffer = -1; // index into Program::buffers
  DType dtype = DType::F32;
  int64_t offset = 0;
  std::vector<int64_t> strides; // one per domain dimension
};

enum class Op : uint8_t {
  // Leaves.
  Load,  // operand; args empty, or one per domain dim: an I64 value that
         // replaces that dim's index, or -1 to keep the domain index.
  Const, // imm, of `type` (F32 or I64)
  Index, // the domain index of dimension `dim`, I64
  // Unary on F32.
  Neg, Exp, Log, Tanh, Erf, Sqrt, Rsqrt, Sin, Cos, Abs,
  // Binary, both args of `type` (F32, or I64 for index arithmetic).
  Add, Sub, Mul, Div, Max, Min,
  Rem, // I64 only, non-negative operands
  // Compare two values of the same type; the result is I1.
  CmpLt, CmpLe, CmpEq,
  Select, // args: I1 condition, then two values of `type`
  IToF,   // I64 -> F32
  // Reductions along the row: a column-level F32 value to a row-level one.
  ReduceSum, ReduceMax,
  // Store args[0] to `operand` at the domain index. A row-level value goes
  // to an operand whose stride along the row is 0 and is stored once per
  // row; a column-level value needs a non-zero row stride. args[1..]:
  // none, or one per domain dim as for Load (an I64 index replacing that
  // dim's, or -1), a scatter: overrides must be row-level values and leave
  // the row dim's index alone, so one row writes one contiguous run (a KV
  // cache written at each token's position). Rows whose overrides collide
  // write the same elements in an unspecified order.
  Store,
  // A uniform F32 in [0, 1) from three I64 args [key, counterHigh,
  // counterLow]: Philox4x32-10 with key {lo32(key), hi32(key)} and counter
  // {lo32(counterLow), hi32(counterLow), lo32(counterHigh),
  // hi32(counterHigh)}; the result is (first output word >> 8) * 2^-24,
  // exact in f32. Every emitter gives the same bits (dropout masks must
  // agree between targets and between forward and backward).
  Random,
  // F32 -> F32: the nearest f16 (RoundF16) or bf16 (RoundBF16) value, ties
  // to even, as an f32: what a store to that type and a load back give,
  // for a value narrowed by a cast and used again in the same kernel.
  // Overflow gives infinity; f16 subnormals and the sign of zero are kept;
  // a NaN gives the quiet NaN 0x7FC00000 (the targets' conversion
  // instructions keep different payloads). Every emitter gives the same
  // bits.
  RoundF16, RoundBF16,
};

const char *opName(Op op);
int numArgs(Op op); // -1 for Load (0 or rank) and Store (1 or 1 + rank)

struct Instr {
  Op op = Op::Const;
  DType type = DType::F32;   // result type (I1 for compares; none for Store)
  std::vector<int32_t> args; // value operands, by instruction index
  int32_t operand = -1;      // Load, Store: index into Kernel::operands
  int32_t dim = -1;          // Index
  double imm = 0.0;          // Const
};

/// The index overrides of a Load or Store (empty: the domain index in
/// every dim), one per domain dim. A Store without its value (only a
/// malformed artifact has one, which verification then refuses) has none.
inline llvm::ArrayRef<int32_t> indexOverrides(const Instr &instr) {
  llvm::ArrayRef<int32_t> args = instr.args;
  if (instr.op != Op::Store)
    return args;
  return args.empty() ? args : args.drop_front(1);
}

struct Kernel {
  std::string name;            // unique in its program, a C identifier
  std::string origin;          // the llmc ops it was fused from, for people
  std::vector<int64_t> domain; // rank >= 1; the last dim is the row
  std::vector<Access> operands;
  std::vector<Instr> body;

  int64_t rowLength() const { return domain.back(); }
  int64_t numRows() const; // product of all dims but the last
  bool hasReduction() const;
};

enum class Level : uint8_t { Row, Column };

/// The level of each value (Store gets Column if it stores per element).
std::vector<Level> computeLevels(const Kernel &kernel);

/// Whether `op` reduces along the row (ReduceSum, ReduceMax).
bool isReduction(Op op);

/// How an emitter schedules the passes over a row: the phase of each value
/// is how many reductions it waits for (0: computable at the start of a
/// row; a reduction is one more than its argument), so pass p over the row
/// evaluates the reductions of phase p + 1. `numReductionPasses` is set to
/// the number of such passes.
std::vector<int> computePhases(const Kernel &kernel, int &numReductionPasses);

/// The column-level values that `roots` need, themselves included, as a
/// mask over the body: what one pass over the row must evaluate.
llvm::BitVector columnClosure(const Kernel &kernel,
                              llvm::ArrayRef<Level> levels,
                              llvm::ArrayRef<int32_t> roots);

/// Checks SSA order, argument counts and types, operand indices, strides
/// and the level rules above. Returns an empty string when the kernel is
/// well formed, else what is wrong (naming the kernel and instruction).
std::string verifyKernel(const Kernel &kernel);

/// Floating-point operations per execution (for benchmarks and rooflines):
/// one per arithmetic instruction and reduction step, weighted by level.
/// Random counts one (its integer rounds are not floating-point work);
/// RoundF16 and RoundBF16 count none (conversions).
int64_t countFlops(const Kernel &kernel);

/// A shape or stride list as people read it: "[4, 64, 768]".
std::string formatShape(llvm::ArrayRef<int64_t> values);

/// The readable form `llmc inspect` and `--compile-to=kernels` print.
void printKernel(llvm::raw_ostream &os, const Kernel &kernel);

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_KERNELIR_H

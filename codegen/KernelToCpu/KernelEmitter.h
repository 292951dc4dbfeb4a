// The CPU emitter's state and steps, shared by the files of KernelToCpu/.
//
// A kernel function runs a row loop; per row it evaluates the row-level
// values in scalar code and the column-level values in column loops, one per
// reduction phase and a last one for the stores (see KernelIR.h). Column
// loops are vectorized here, explicitly: a value of the kernel becomes a
// vector<W x T> in the main loop and a scalar in the tail loop (the row
// length is a compile-time constant, so the loop bounds are too).
//
// buildCpuKernelModule (KernelEmitter.cpp) runs one KernelEmitter per
// kernel; KernelToCpu.cpp lowers the module it builds. The steps live by
// what they do:
//   KernelEmitter.cpp  the function, the row loop and its column loops,
//                      the dispatch over kernel ops (emitInstr);
//   LanesOverRows.cpp  column sums run with the lanes over rows;
//   Pointwise.cpp      unary and binary ops, exp/log/sin/cos, Philox;
//   MemoryAccess.cpp   addresses, loads, stores (gathers, scatters,
//                      alias scopes, streaming stores).
//
// Changing the code these files emit changes cached objects: bump
// kCpuCodegenVersion in runtime/Cpu/KernelCache.h with it.
#ifndef LLMC_CODEGEN_KERNELTOCPU_KERNELEMITTER_H
#define LLMC_CODEGEN_KERNELTOCPU_KERNELEMITTER_H

#include "codegen/KernelToCpu/KernelToCpu.h"
#include "ir/kernel/RowSchedule.h"

#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/IR/Builders.h"
#include "mlir/IR/BuiltinTypes.h"
#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/DenseMap.h"

#include <vector>

namespace llmc::cpu {

/// Emits one kernel as a func.func. Values of the kernel body are built at a
/// `width`: 1 gives scalars (row-level values, tail loops), W > 1 gives
/// vector<W x T> for W consecutive columns starting at `col`.
class KernelEmitter {
public:
  KernelEmitter(mlir::OpBuilder &builder, const kir::Kernel &kernel,
                const CpuTargetOptions &options)
      : b(builder), loc(builder.getUnknownLoc()), kernel(kernel),
        rank(kernel.domain.size()), width(options.vectorWidth),
        unroll(options.reductionUnroll), schedule(kernel),
        levels(schedule.levels), lanesOverRows(isLanesOverRows(kernel, width)),
        streamingStores(storesStream(kernel, width)) {}

  void emitFunction();

  /// Whether `kernel` runs lanes over rows at vector width `width`: rank
  /// 2, one reduction phase, stores of row-level values only, loads and
  /// stores without index overrides whose stride along the rows (dim 0) is
  /// 0 or 1 (stores: 1), no Random; and some column-level load that the
  /// row schedule would gather (its stride along the row dim is not 0 or
  /// 1). Each row's result is then the same at every vector width and in
  /// every split of the rows (no gathers, and the same order of adds).
  static bool isLanesOverRows(const kir::Kernel &kernel, int width);

  /// Whether `kernel`'s vector stores are streaming (non-temporal) stores:
  /// a kernel that only stores constants (the update step zeroing the
  /// gradients) over at least kStreamingStoreBytes, on x86, every store
  /// contiguous along the row and every vector of it aligned to its size
  /// (each buffer starts kir::kArenaAlignment-aligned, so the offset and
  /// the outer strides decide). It reads nothing, so its stores need no
  /// read for ownership of the lines they overwrite, and a buffer that
  /// large would not stay in cache for its next reader anyway: streaming
  /// halves the traffic of zeroing GPT-2's gradients (bench-train).
  static bool storesStream(const kir::Kernel &kernel, int width);
  static constexpr int64_t kStreamingStoreBytes = int64_t(1) << 20;

private:
  // KernelEmitter.cpp: the row loop, its column loops, the op dispatch.
  void emitRow(mlir::Value row);
  llvm::SmallVector<mlir::Value>
  emitColumnLoop(llvm::ArrayRef<int32_t> reductions,
                 const llvm::BitVector &needed);
  void emitChunk(const llvm::BitVector &needed, int w, mlir::Value col);
  mlir::Value emitInstr(int32_t index, int w, mlir::Value col);

  // LanesOverRows.cpp.
  void emitLanesOverRows(mlir::Value begin, mlir::Value end);
  void emitLaneBlock(mlir::Value firstRow, int w, int copies);

  // Pointwise.cpp.
  mlir::Value emitUnary(kir::Op op, mlir::Value x);
  mlir::Value emitSinCos(mlir::Value x, bool cosine);
  mlir::Value emitExp(mlir::Value x);
  mlir::Value emitLog(mlir::Value x);
  mlir::Value emitBinary(kir::Op op, kir::DType type, mlir::Value x,
                         mlir::Value y);
  mlir::Value emitRandom(mlir::Value key, mlir::Value counterHigh,
                         mlir::Value counterLow, int w);

  // MemoryAccess.cpp.
  mlir::Value emitLoad(const kir::Instr &instr, int w, mlir::Value col);
  void emitStore(const kir::Instr &instr, int w, mlir::Value col);
  struct Address {
    mlir::Value ptr;     // !llvm.ptr, or vector<w x !llvm.ptr> if gathered
    bool gather = false; // lanes are not consecutive elements
  };
  Address emitAddress(int32_t operand, llvm::ArrayRef<int32_t> overrides, int w,
                      mlir::Value col);
  void setAliasScopes(mlir::Operation *op, int32_t operand);

  // Values of the body at width w: column-level from the current chunk,
  // row-level broadcast (or as is, `scalarRow`).
  mlir::Value get(int32_t value, int w);
  mlir::Value getScalarOrVector(int32_t value) const;
  mlir::Value columnIndex(int w, mlir::Value col);

  mlir::Type typeAt(mlir::Type scalar, int w) const {
    return w == 1 ? scalar : mlir::VectorType::get({w}, scalar);
  }
  mlir::Type computeType(kir::DType type) const;
  mlir::Type storageType(kir::DType type) const;
  mlir::Value i64Constant(int64_t value);
  mlir::Value splat(mlir::Type type, mlir::Attribute scalar);
  mlir::Value reductionIdentity(kir::Op op, int w);
  mlir::Value combine(kir::Op op, mlir::Value acc, mlir::Value x);

  mlir::OpBuilder &b;
  mlir::Location loc;
  const kir::Kernel &kernel;
  size_t rank;
  int width, unroll;
  kir::RowSchedule schedule; // the walk over a row, shared with KernelToCuda
  const std::vector<kir::Level> &levels; // schedule.levels
  bool lanesOverRows = false;   // isLanesOverRows: lanes are rows (dim 0)
  bool streamingStores = false; // storesStream: vector stores non-temporal

  llvm::SmallVector<mlir::Value> bases;  // operand base pointers
  llvm::SmallVector<mlir::Value> outer;  // i64 indices of the row's outer dims
  std::vector<mlir::Value> rowValues;    // row-level values of the current row
  std::vector<mlir::Value> columnValues; // column-level values of the chunk
  llvm::DenseMap<int32_t, mlir::Value> broadcasts; // row values as vectors
  llvm::SmallVector<mlir::ArrayAttr> aliasScopes, noaliasScopes; // per operand
};

} // namespace llmc::cpu

#endif // LLMC_CODEGEN_KERNELTOCPU_KERNELEMITTER_H

// The CPU emitter: kernel IR to vectorized MLIR, then LLVM IR and an object.
//
// A kernel function runs a row loop; per row it evaluates the row-level
// values in scalar code and the column-level values in column loops, one per
// reduction phase and a last one for the stores (see KernelIR.h). Column
// loops are vectorized here, explicitly: a value of the kernel becomes a
// vector<W x T> in the main loop and a scalar in the tail loop (the row
// length is a compile-time constant, so the loop bounds are too).
//
// Column sums (bias and norm-weight gradients: a kernel whose rows are the
// channels, each walking down its column of a row-major [N, C] matrix)
// would gather one element per cache line that way. Such a kernel runs
// "lanes over rows" instead (see isLanesOverRows): the lanes of a vector
// are W consecutive rows (channels, contiguous in memory) and the loop over
// the row dim walks down the matrix, so every load is a whole vector.
//
// A kernel that only stores constants over 1 MiB or more (the update
// step zeroing the gradients) writes whole vectors with non-temporal
// stores and fences them at its end (storesStream).
//
// Changing the code this file emits changes cached objects: bump
// kCpuCodegenVersion in runtime/Cpu/KernelCache.h with it.
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "ir/kernel/Program.h"
#include "ir/kernel/RowSchedule.h"

// The seven conversions used, not mlir/Conversion/Passes.h (every
// conversion MLIR has, SPIR-V included).
#include "mlir/Conversion/ArithToLLVM/ArithToLLVM.h"
#include "mlir/Conversion/ControlFlowToLLVM/ControlFlowToLLVM.h"
#include "mlir/Conversion/FuncToLLVM/ConvertFuncToLLVMPass.h"
#include "mlir/Conversion/MathToLLVM/MathToLLVM.h"
#include "mlir/Conversion/ReconcileUnrealizedCasts/ReconcileUnrealizedCasts.h"
#include "mlir/Conversion/SCFToControlFlow/SCFToControlFlow.h"
#include "mlir/Conversion/VectorToLLVM/ConvertVectorToLLVMPass.h"
#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Arith/Transforms/Passes.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/Math/Transforms/Passes.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"
#include "mlir/IR/Diagnostics.h"
#include "mlir/Pass/PassManager.h"
#include "mlir/Target/LLVMIR/Dialect/Builtin/BuiltinToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Dialect/LLVMIR/LLVMToLLVMIRTranslation.h"
#include "mlir/Target/LLVMIR/Export.h"
#include "mlir/Transforms/GreedyPatternRewriteDriver.h"

#include "llvm/ADT/BitVector.h"
#include "llvm/ADT/StringMap.h"
#include "llvm/IR/LLVMContext.h"
#include "llvm/IR/LegacyPassManager.h"
#include "llvm/IR/Module.h"
#include "llvm/MC/TargetRegistry.h"
#include "llvm/Passes/PassBuilder.h"
#include "llvm/Support/TargetSelect.h"
#include "llvm/Support/raw_ostream.h"
#include "llvm/Target/TargetMachine.h"
#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

#include <cmath>
#include <limits>
#include <mutex>
#include <thread>

using namespace mlir;
namespace kir = llmc::kir;
using llmc::cpu::CpuTargetOptions;

//===----------------------------------------------------------------------===//
// Target
//===----------------------------------------------------------------------===//

CpuTargetOptions llmc::cpu::resolveTarget(const CpuTargetOptions &options) {
  CpuTargetOptions resolved = options;
  // The host's features go with the host's CPU only; an explicit CPU comes
  // with its own features (or the CPU's defaults).
  bool host = resolved.cpu.empty();
  if (host)
    resolved.cpu = llvm::sys::getHostCPUName().str();
  if (host && resolved.features.empty()) {
    // Sorted, so that the string (part of cache keys) is deterministic.
    llvm::StringMap<bool> features = llvm::sys::getHostCPUFeatures();
    std::vector<std::string> names;
    for (const auto &feature : features)
      names.push_back((feature.second ? "+" : "-") + feature.first().str());
    llvm::sort(names);
    resolved.features = llvm::join(names, ",");
  }
  if (resolved.vectorWidth <= 0) {
    auto has = [&](llvm::StringRef feature) {
      return llvm::is_contained(llvm::split(resolved.features, ','),
                                ("+" + feature).str());
    };
    resolved.vectorWidth = has("avx512f") ? 16 : has("avx") ? 8 : 4;
  }
  if (resolved.reductionUnroll < 1)
    resolved.reductionUnroll = 1;
  return resolved;
}

//===----------------------------------------------------------------------===//
// Kernel IR -> MLIR
//===----------------------------------------------------------------------===//

namespace {

using kir::isReduction;

/// Emits one kernel as a func.func. Values of the kernel body are built at a
/// `width`: 1 gives scalars (row-level values, tail loops), W > 1 gives
/// vector<W x T> for W consecutive columns starting at `col`.
class KernelEmitter {
public:
  KernelEmitter(OpBuilder &builder, const kir::Kernel &kernel,
                const CpuTargetOptions &options)
      : b(builder), loc(builder.getUnknownLoc()), kernel(kernel),
        rank(kernel.domain.size()), width(options.vectorWidth),
        unroll(options.reductionUnroll),
        schedule(kernel), levels(schedule.levels),
        lanesOverRows(isLanesOverRows(kernel, width)),
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
  void emitRow(Value row);
  void emitLanesOverRows(Value begin, Value end);
  void emitLaneBlock(Value firstRow, int w, int copies);
  llvm::SmallVector<Value> emitColumnLoop(llvm::ArrayRef<int32_t> reductions,
                                          const llvm::BitVector &needed);
  void emitChunk(const llvm::BitVector &needed, int w, Value col);
  Value emitInstr(int32_t index, int w, Value col);
  Value emitLoad(const kir::Instr &instr, int w, Value col);
  void emitStore(const kir::Instr &instr, int w, Value col);
  Value emitUnary(kir::Op op, Value x);
  Value emitSinCos(Value x, bool cosine);
  Value emitExp(Value x);
  Value emitLog(Value x);
  Value emitBinary(kir::Op op, kir::DType type, Value x, Value y);
  Value emitRandom(Value key, Value counterHigh, Value counterLow, int w);

  struct Address {
    Value ptr;           // !llvm.ptr, or vector<w x !llvm.ptr> if gathered
    bool gather = false; // lanes are not consecutive elements
  };
  Address emitAddress(int32_t operand, llvm::ArrayRef<int32_t> overrides,
                      int w, Value col);
  void setAliasScopes(Operation *op, int32_t operand);

  // Values of the body at width w: column-level from the current chunk,
  // row-level broadcast (or as is, `scalarRow`).
  Value get(int32_t value, int w);
  Value getScalarOrVector(int32_t value) const;
  Value columnIndex(int w, Value col);

  Type typeAt(Type scalar, int w) const {
    return w == 1 ? scalar : VectorType::get({w}, scalar);
  }
  Type computeType(kir::DType type) const;
  Type storageType(kir::DType type) const;
  Value i64Constant(int64_t value) {
    return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(value));
  }
  Value splat(Type type, Attribute scalar) {
    if (auto vector = dyn_cast<VectorType>(type))
      return arith::ConstantOp::create(
          b, loc, DenseElementsAttr::get(vector, scalar));
    return arith::ConstantOp::create(b, loc, cast<TypedAttr>(scalar));
  }
  Value reductionIdentity(kir::Op op, int w) {
    float identity = op == kir::Op::ReduceSum
                         ? 0.0f
                         : -std::numeric_limits<float>::infinity();
    return splat(typeAt(b.getF32Type(), w), b.getF32FloatAttr(identity));
  }
  Value combine(kir::Op op, Value acc, Value x) {
    if (op == kir::Op::ReduceSum)
      return arith::AddFOp::create(b, loc, acc, x);
    // NaN-propagating; the sign of a zero maximum does not matter, and
    // ignoring it saves x86 two blends per vector.
    return arith::MaximumFOp::create(b, loc, acc, x,
                                     arith::FastMathFlags::nsz);
  }

  OpBuilder &b;
  Location loc;
  const kir::Kernel &kernel;
  size_t rank;
  int width, unroll;
  kir::RowSchedule schedule; // the walk over a row, shared with KernelToCuda
  const std::vector<kir::Level> &levels; // schedule.levels
  bool lanesOverRows = false; // isLanesOverRows: lanes are rows (dim 0)
  bool streamingStores = false; // storesStream: vector stores non-temporal

  llvm::SmallVector<Value> bases;   // operand base pointers
  llvm::SmallVector<Value> outer;   // i64 indices of the row's outer dims
  std::vector<Value> rowValues;     // row-level values of the current row
  std::vector<Value> columnValues;  // column-level values of the chunk
  llvm::DenseMap<int32_t, Value> broadcasts; // row values as vectors
  llvm::SmallVector<ArrayAttr> aliasScopes, noaliasScopes; // per operand
};

} // namespace


Type KernelEmitter::computeType(kir::DType type) const {
  switch (type) {
  case kir::DType::F32:
    return b.getF32Type();
  case kir::DType::I64:
    return b.getI64Type();
  case kir::DType::I1:
    return b.getI1Type();
  default:
    return computeType(kir::computeType(type));
  }
}

Type KernelEmitter::storageType(kir::DType type) const {
  switch (type) {
  case kir::DType::F16:
    return b.getF16Type();
  case kir::DType::BF16:
    return b.getBF16Type();
  case kir::DType::I32:
    return b.getI32Type();
  default:
    return computeType(type);
  }
}

Value KernelEmitter::get(int32_t value, int w) {
  bool column = levels[value] == kir::Level::Column;
  Value scalar = column ? columnValues[value] : rowValues[value];
  // Lanes over rows, a value can be a scalar at either level (the same in
  // every lane: a constant, the column index, a load of stride 0 along the
  // rows) or already a vector.
  if (w == 1 || isa<VectorType>(scalar.getType()))
    return scalar;
  if (column) // changes from chunk to chunk: not cached
    return vector::BroadcastOp::create(b, loc, typeAt(scalar.getType(), w),
                                       scalar);
  Value &vector = broadcasts[value];
  if (!vector)
    vector = vector::BroadcastOp::create(b, loc, typeAt(scalar.getType(), w),
                                         scalar);
  return vector;
}

Value KernelEmitter::getScalarOrVector(int32_t value) const {
  return levels[value] == kir::Level::Column ? columnValues[value]
                                             : rowValues[value];
}

Value KernelEmitter::columnIndex(int w, Value col) {
  if (w == 1)
    return col;
  llvm::SmallVector<int64_t> lanes(w);
  for (int lane = 0; lane < w; ++lane)
    lanes[lane] = lane;
  auto type = VectorType::get({w}, b.getI64Type());
  Value iota = arith::ConstantOp::create(
      b, loc, DenseElementsAttr::get(type, llvm::ArrayRef(lanes)));
  Value first = vector::BroadcastOp::create(b, loc, type, col);
  return arith::AddIOp::create(b, loc, first, iota);
}

void KernelEmitter::emitFunction() {
  MLIRContext *context = b.getContext();
  auto ptrType = LLVM::LLVMPointerType::get(context);
  Type i64 = b.getI64Type();
  auto funcType = b.getFunctionType({ptrType, i64, i64}, {});
  auto func = func::FuncOp::create(b, loc, kernel.name, funcType);
  Block *entry = func.addEntryBlock();
  OpBuilder::InsertionGuard guard(b);
  b.setInsertionPointToStart(entry);

  // Operands of different buffers never overlap while a kernel runs, so
  // their accesses get disjoint alias scopes. Operands of one buffer (an
  // epilogue reading and writing C) share a scope and stay ordered.
  std::map<int32_t, LLVM::AliasScopeAttr> scopeOfBuffer;
  auto domain = LLVM::AliasScopeDomainAttr::get(
      context, b.getStringAttr("llmc kernel " + kernel.name));
  for (const kir::Access &access : kernel.operands)
    if (!scopeOfBuffer.count(access.buffer))
      scopeOfBuffer[access.buffer] = LLVM::AliasScopeAttr::get(
          domain, b.getStringAttr("buffer " + std::to_string(access.buffer)));
  for (const kir::Access &access : kernel.operands) {
    llvm::SmallVector<Attribute> others;
    for (auto &[buffer, scope] : scopeOfBuffer)
      if (buffer != access.buffer)
        others.push_back(scope);
    aliasScopes.push_back(
        others.empty() ? ArrayAttr()
                       : b.getArrayAttr({scopeOfBuffer[access.buffer]}));
    noaliasScopes.push_back(others.empty() ? ArrayAttr()
                                           : b.getArrayAttr(others));
  }

  Value operands = entry->getArgument(0);
  for (size_t i = 0; i < kernel.operands.size(); ++i) {
    Value slot = LLVM::GEPOp::create(b, loc, ptrType, ptrType, operands,
                                     llvm::ArrayRef<LLVM::GEPArg>{int32_t(i)});
    bases.push_back(LLVM::LoadOp::create(b, loc, ptrType, slot, 8));
  }
  if (lanesOverRows) {
    emitLanesOverRows(entry->getArgument(1), entry->getArgument(2));
    func::ReturnOp::create(b, loc);
    return;
  }
  auto rowLoop =
      scf::ForOp::create(b, loc, entry->getArgument(1), entry->getArgument(2),
                         i64Constant(1));
  b.setInsertionPointToStart(rowLoop.getBody());
  emitRow(rowLoop.getInductionVar());
  b.setInsertionPointAfter(rowLoop);
  // Streaming stores are weakly ordered: fence them before the thread
  // reports its rows done, so that the next step reads what they wrote.
  if (streamingStores)
    LLVM::CallIntrinsicOp::create(b, loc,
                                  b.getStringAttr("llvm.x86.sse.sfence"),
                                  ValueRange());
  func::ReturnOp::create(b, loc);
}

bool KernelEmitter::storesStream(const kir::Kernel &kernel, int width) {
  if (width <= 1 || !llvm::Triple(llvm::sys::getProcessTriple()).isX86())
    return false;
  int64_t elements = kernel.numRows() * kernel.rowLength();
  int64_t bytes = 0;
  for (const kir::Instr &instr : kernel.body) {
    if (instr.op == kir::Op::Const)
      continue;
    if (instr.op != kir::Op::Store ||
        llvm::any_of(kir::indexOverrides(instr),
                     [](int32_t arg) { return arg >= 0; }))
      return false;
    const kir::Access &access = kernel.operands[instr.operand];
    int64_t elementBytes = kir::dtypeBytes(access.dtype);
    int64_t vectorBytes = width * elementBytes;
    if (vectorBytes > kir::kArenaAlignment || access.strides.back() != 1 ||
        access.offset * elementBytes % vectorBytes != 0)
      return false;
    for (size_t d = 0; d + 1 < access.strides.size(); ++d)
      if (access.strides[d] * elementBytes % vectorBytes != 0)
        return false;
    bytes += elements * elementBytes;
  }
  return bytes >= kStreamingStoreBytes;
}

bool KernelEmitter::isLanesOverRows(const kir::Kernel &kernel, int width) {
  if (width <= 1 || kernel.domain.size() != 2 || kernel.domain[0] < width ||
      !kernel.hasReduction())
    return false;
  kir::RowSchedule schedule(kernel);
  if (schedule.reductionPasses.size() != 1)
    return false;
  const std::vector<kir::Level> &levels = schedule.levels;
  bool gathers = false;
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    if (instr.op == kir::Op::Random)
      return false;
    if (instr.op != kir::Op::Load && instr.op != kir::Op::Store)
      continue;
    const kir::Access &access = kernel.operands[instr.operand];
    if (llvm::any_of(kir::indexOverrides(instr),
                     [](int32_t arg) { return arg >= 0; }))
      return false;
    if (instr.op == kir::Op::Store) {
      if (levels[i] == kir::Level::Column || access.strides[0] != 1)
        return false;
      continue;
    }
    if (access.strides[0] != 0 && access.strides[0] != 1)
      return false;
    int64_t along = access.strides[1];
    gathers |= levels[i] == kir::Level::Column && along != 0 && along != 1;
  }
  return gathers;
}

/// Rows [begin, end) in blocks of `copies` x W rows (a vector of W rows per
/// copy: independent accumulators, more bytes of each matrix row per
/// visit), then single vectors of W rows, then rows one at a time. Every
/// path adds a row's columns in the same order, so a row's result does not
/// depend on which path, or thread, ran it.
void KernelEmitter::emitLanesOverRows(Value begin, Value end) {
  int numReductions = 0;
  for (const kir::Instr &instr : kernel.body)
    numReductions += isReduction(instr.op);
  // Up to 16 accumulators (partial and total per reduction and copy) of
  // the 32 vector registers of AVX-512; fewer with more reductions.
  int copies = std::max(1, std::min(4, 8 / std::max(1, numReductions)));
  auto loopOver = [&](Value from, Value to, int w, int n) {
    auto forOp = scf::ForOp::create(b, loc, from, to,
                                    i64Constant(int64_t(w) * n));
    OpBuilder::InsertionGuard guard(b);
    b.setInsertionPointToStart(forOp.getBody());
    emitLaneBlock(forOp.getInductionVar(), w, n);
  };
  auto roundDown = [&](Value from, Value to, int64_t multiple) -> Value {
    Value count = arith::SubIOp::create(b, loc, to, from);
    Value whole = arith::MulIOp::create(
        b, loc,
        arith::DivUIOp::create(b, loc, count, i64Constant(multiple)),
        i64Constant(multiple));
    return arith::AddIOp::create(b, loc, from, whole);
  };
  Value blocksEnd = roundDown(begin, end, int64_t(width) * copies);
  loopOver(begin, blocksEnd, width, copies);
  Value vectorsEnd = roundDown(blocksEnd, end, width);
  loopOver(blocksEnd, vectorsEnd, width, 1);
  loopOver(vectorsEnd, end, 1, 1);
}

/// Rows firstRow + [0, copies * w): copy c holds rows firstRow + c*w + lane.
/// The columns are added in chunks of kChunk, each chunk from the identity
/// into a partial sum that is then added to the total: the running sums
/// stay short (about as accurate as the row schedule's tree of lanes).
void KernelEmitter::emitLaneBlock(Value firstRow, int w, int copies) {
  constexpr int64_t kChunk = 64;
  int64_t length = kernel.rowLength();
  // One reduction pass (isLanesOverRows), all stores row-level.
  const kir::ColumnPass &pass = schedule.reductionPasses[0];
  llvm::ArrayRef<int32_t> reductions = pass.reductions;
  const llvm::BitVector &needed = pass.needed;
  size_t numReductions = reductions.size();
  auto opOf = [&](size_t r) { return kernel.body[reductions[r]].op; };

  // The row-level values each copy computes before the reduction.
  std::vector<std::vector<Value>> copyRows(copies);
  std::vector<Value> copyFirst(copies);
  auto enterCopy = [&](int copy) {
    broadcasts.clear();
    outer.assign(1, copyFirst[copy]);
    rowValues = copyRows[copy];
  };
  for (int copy = 0; copy < copies; ++copy) {
    copyFirst[copy] =
        copy == 0 ? firstRow
                  : Value(arith::AddIOp::create(
                        b, loc, firstRow, i64Constant(int64_t(copy) * w)));
    copyRows[copy].assign(kernel.body.size(), Value());
    enterCopy(copy);
    for (int32_t i : schedule.rowValues[0])
      rowValues[i] = emitInstr(i, w, Value());
    copyRows[copy] = rowValues;
  }
  broadcasts.clear();

  // accs[r * copies + copy]; one loop over columns [from, to) adds into
  // fresh partial sums, which are then combined into `totals`.
  auto identities = [&] {
    llvm::SmallVector<Value> accs;
    for (size_t r = 0; r < numReductions; ++r)
      for (int copy = 0; copy < copies; ++copy)
        accs.push_back(reductionIdentity(opOf(r), w));
    return accs;
  };
  auto chunk = [&](Value from, Value to, llvm::SmallVector<Value> totals) {
    auto forOp = scf::ForOp::create(
        b, loc, from, to, i64Constant(1), identities(),
        [&](OpBuilder &, Location, Value col, ValueRange iterArgs) {
          llvm::SmallVector<Value> next(iterArgs.begin(), iterArgs.end());
          for (int copy = 0; copy < copies; ++copy) {
            enterCopy(copy);
            emitChunk(needed, w, col);
            for (size_t r = 0; r < numReductions; ++r) {
              Value &acc = next[r * copies + copy];
              acc = combine(opOf(r), acc,
                            get(kernel.body[reductions[r]].args[0], w));
            }
          }
          broadcasts.clear();
          scf::YieldOp::create(b, loc, next);
        });
    for (size_t a = 0; a < totals.size(); ++a)
      totals[a] = combine(opOf(a / copies), totals[a], forOp.getResult(a));
    return totals;
  };
  llvm::SmallVector<Value> totals = identities();
  int64_t chunksEnd = length / kChunk * kChunk;
  if (chunksEnd > 0) {
    auto forOp = scf::ForOp::create(
        b, loc, i64Constant(0), i64Constant(chunksEnd), i64Constant(kChunk),
        totals, [&](OpBuilder &, Location, Value from, ValueRange iterArgs) {
          Value to = arith::AddIOp::create(b, loc, from, i64Constant(kChunk));
          llvm::SmallVector<Value> next = chunk(
              from, to, llvm::SmallVector<Value>(iterArgs.begin(),
                                                 iterArgs.end()));
          scf::YieldOp::create(b, loc, next);
        });
    totals.assign(forOp.getResults().begin(), forOp.getResults().end());
  }
  if (chunksEnd < length)
    totals = chunk(i64Constant(chunksEnd), i64Constant(length), totals);

  // After the reduction: the row-level values that use it, then the
  // stores, one vector (or scalar) per copy.
  for (int copy = 0; copy < copies; ++copy) {
    enterCopy(copy);
    for (size_t r = 0; r < numReductions; ++r)
      rowValues[reductions[r]] = totals[r * copies + copy];
    for (int32_t i : schedule.rowValues[1])
      rowValues[i] = emitInstr(i, w, Value());
    for (int32_t i : schedule.rowStores)
      emitStore(kernel.body[i], w, Value());
  }
  broadcasts.clear();
}

void KernelEmitter::emitRow(Value row) {
  // Rows are numbered row-major over the outer dims.
  outer.assign(rank - 1, Value());
  Value rest = row;
  for (size_t d = rank - 1; d-- > 0;) {
    if (d == 0) {
      outer[d] = rest;
      break;
    }
    Value extent = i64Constant(kernel.domain[d]);
    outer[d] = arith::RemUIOp::create(b, loc, rest, extent);
    rest = arith::DivUIOp::create(b, loc, rest, extent);
  }

  // The last column loop stores; row-level stores follow it, so every load
  // of the row has read its operands before anything of the row is stored.
  rowValues.assign(kernel.body.size(), Value());
  schedule.walk(
      [&](llvm::ArrayRef<int32_t> values) {
        for (int32_t i : values)
          rowValues[i] = emitInstr(i, 1, Value());
      },
      [&](const kir::ColumnPass &pass) {
        llvm::SmallVector<Value> results =
            emitColumnLoop(pass.reductions, pass.needed);
        for (auto [reduction, result] : llvm::zip(pass.reductions, results))
          rowValues[reduction] = result;
      },
      [&](llvm::ArrayRef<int32_t> stores) {
        for (int32_t i : stores)
          emitStore(kernel.body[i], 1, Value());
      });
}

/// Runs the columns of a row in up to three loops: `unroll` vectors per
/// iteration (independent accumulators for the reductions), then single
/// vectors, then scalars for the tail. Returns the reduced values.
llvm::SmallVector<Value>
KernelEmitter::emitColumnLoop(llvm::ArrayRef<int32_t> reductions,
                              const llvm::BitVector &needed) {
  int64_t length = kernel.rowLength();
  size_t numReductions = reductions.size();
  auto opOf = [&](size_t r) { return kernel.body[reductions[r]].op; };

  // One loop over [begin, end) with `copies` chunks of width w per
  // iteration; `accs` holds numReductions x copies accumulators.
  auto loop = [&](int64_t begin, int64_t end, int w, int copies,
                  llvm::SmallVector<Value> accs) -> llvm::SmallVector<Value> {
    auto forOp = scf::ForOp::create(
        b, loc, i64Constant(begin), i64Constant(end),
        i64Constant(int64_t(w) * copies), accs,
        [&](OpBuilder &, Location, Value iv, ValueRange iterArgs) {
          broadcasts.clear();
          llvm::SmallVector<Value> next(iterArgs.begin(), iterArgs.end());
          for (int copy = 0; copy < copies; ++copy) {
            Value col = copy == 0 ? iv
                                  : arith::AddIOp::create(
                                        b, loc, iv, i64Constant(copy * w));
            emitChunk(needed, w, col);
            for (size_t r = 0; r < numReductions; ++r) {
              Value &acc = next[r * copies + copy];
              acc = combine(opOf(r), acc,
                            columnValues[kernel.body[reductions[r]].args[0]]);
            }
          }
          scf::YieldOp::create(b, loc, next);
        });
    broadcasts.clear();
    return llvm::SmallVector<Value>(forOp.getResults());
  };

  int64_t done = 0;
  llvm::SmallVector<Value> vectorAccs; // one per reduction, width W
  if (width > 1 && length >= width) {
    int copies = numReductions ? unroll : 1;
    int64_t unrolledEnd = length / (int64_t(width) * copies) * width * copies;
    if (copies > 1 && unrolledEnd > 0) {
      llvm::SmallVector<Value> accs;
      for (size_t r = 0; r < numReductions; ++r)
        for (int copy = 0; copy < copies; ++copy)
          accs.push_back(reductionIdentity(opOf(r), width));
      llvm::SmallVector<Value> results =
          loop(0, unrolledEnd, width, copies, accs);
      for (size_t r = 0; r < numReductions; ++r) {
        Value acc = results[r * copies];
        for (int copy = 1; copy < copies; ++copy)
          acc = combine(opOf(r), acc, results[r * copies + copy]);
        vectorAccs.push_back(acc);
      }
      done = unrolledEnd;
    } else {
      for (size_t r = 0; r < numReductions; ++r)
        vectorAccs.push_back(reductionIdentity(opOf(r), width));
    }
    int64_t vectorEnd = length / width * width;
    if (vectorEnd > done)
      vectorAccs = loop(done, vectorEnd, width, 1, vectorAccs);
    done = vectorEnd;
  }

  llvm::SmallVector<Value> accs;
  for (size_t r = 0; r < numReductions; ++r) {
    if (vectorAccs.empty()) {
      accs.push_back(reductionIdentity(opOf(r), 1));
      continue;
    }
    // The lanes are summed in a tree: that reassociates, and is also more
    // accurate than one running sum.
    bool sum = opOf(r) == kir::Op::ReduceSum;
    accs.push_back(vector::ReductionOp::create(
        b, loc,
        sum ? vector::CombiningKind::ADD : vector::CombiningKind::MAXIMUMF,
        vectorAccs[r],
        sum ? arith::FastMathFlags::reassoc
            : arith::FastMathFlags::reassoc | arith::FastMathFlags::nsz));
  }
  if (done < length)
    accs = loop(done, length, 1, 1, accs);
  return accs;
}

void KernelEmitter::emitChunk(const llvm::BitVector &needed, int w,
                              Value col) {
  columnValues.assign(kernel.body.size(), Value());
  for (int32_t i : needed.set_bits()) {
    if (kernel.body[i].op == kir::Op::Store)
      emitStore(kernel.body[i], w, col);
    else
      columnValues[i] = emitInstr(i, w, col);
  }
}

Value KernelEmitter::emitInstr(int32_t index, int w, Value col) {
  const kir::Instr &instr = kernel.body[index];
  auto arg = [&](size_t n) { return get(instr.args[n], w); };
  switch (instr.op) {
  case kir::Op::Load:
    // Lanes over rows, a load that does not vary along the rows is one
    // scalar for all lanes.
    if (lanesOverRows && kernel.operands[instr.operand].strides[0] == 0)
      return emitLoad(instr, 1, col);
    return emitLoad(instr, w, col);
  case kir::Op::Const:
    if (instr.type == kir::DType::I64)
      return i64Constant(int64_t(instr.imm));
    return arith::ConstantOp::create(b, loc, b.getF32FloatAttr(instr.imm));
  case kir::Op::Index:
    if (lanesOverRows) // the column is one for all lanes; the lanes are rows
      return size_t(instr.dim) + 1 == rank ? col : columnIndex(w, outer[0]);
    if (size_t(instr.dim) + 1 == rank)
      return columnIndex(w, col);
    return outer[instr.dim];
  case kir::Op::Neg: case kir::Op::Exp: case kir::Op::Log:
  case kir::Op::Tanh: case kir::Op::Erf: case kir::Op::Sqrt:
  case kir::Op::Rsqrt: case kir::Op::Sin: case kir::Op::Cos:
  case kir::Op::Abs: case kir::Op::RoundF16: case kir::Op::RoundBF16:
    return emitUnary(instr.op, arg(0));
  case kir::Op::Add: case kir::Op::Sub: case kir::Op::Mul:
  case kir::Op::Div: case kir::Op::Max: case kir::Op::Min:
  case kir::Op::Rem:
    return emitBinary(instr.op, instr.type, arg(0), arg(1));
  case kir::Op::CmpLt: case kir::Op::CmpLe: case kir::Op::CmpEq: {
    Value x = arg(0), y = arg(1);
    if (isa<FloatType>(getElementTypeOrSelf(x))) {
      auto predicate = instr.op == kir::Op::CmpLt   ? arith::CmpFPredicate::OLT
                       : instr.op == kir::Op::CmpLe ? arith::CmpFPredicate::OLE
                                                    : arith::CmpFPredicate::OEQ;
      return arith::CmpFOp::create(b, loc, predicate, x, y);
    }
    auto predicate = instr.op == kir::Op::CmpLt   ? arith::CmpIPredicate::slt
                     : instr.op == kir::Op::CmpLe ? arith::CmpIPredicate::sle
                                                  : arith::CmpIPredicate::eq;
    return arith::CmpIOp::create(b, loc, predicate, x, y);
  }
  case kir::Op::Select:
    return arith::SelectOp::create(b, loc, arg(0), arg(1), arg(2));
  case kir::Op::IToF:
    return arith::SIToFPOp::create(b, loc, typeAt(b.getF32Type(), w), arg(0));
  case kir::Op::Random:
    return emitRandom(arg(0), arg(1), arg(2), w);
  case kir::Op::ReduceSum:
  case kir::Op::ReduceMax:
  case kir::Op::Store:
    break; // emitted by emitColumnLoop and emitStore
  }
  llvm_unreachable("not a value of a column chunk");
}

/// Philox4x32-10 on 32-bit lanes (see kir::Op::Random for the bit layout):
/// each round multiplies two words into 64-bit products (mului_extended,
/// which x86 vectorizes as 32x32->64 multiplies) and mixes in the key,
/// which is bumped by the Weyl constants between rounds. The first word of
/// the result, shifted right by 8, is an exact multiple of 2^-24 in f32.
Value KernelEmitter::emitRandom(Value key, Value counterHigh,
                                Value counterLow, int w) {
  Type i32 = typeAt(b.getI32Type(), w);
  auto c32 = [&](uint32_t value) {
    return splat(i32, b.getI32IntegerAttr(int32_t(value)));
  };
  auto lo = [&](Value x) -> Value {
    return arith::TruncIOp::create(b, loc, i32, x);
  };
  auto hi = [&](Value x) -> Value {
    Value shifted = arith::ShRUIOp::create(
        b, loc, x, splat(x.getType(), b.getI64IntegerAttr(32)));
    return arith::TruncIOp::create(b, loc, i32, shifted);
  };
  auto xor3 = [&](Value x, Value y, Value z) -> Value {
    return arith::XOrIOp::create(b, loc, arith::XOrIOp::create(b, loc, x, y),
                                 z);
  };
  Value k0 = lo(key), k1 = hi(key);
  Value c0 = lo(counterLow), c1 = hi(counterLow);
  Value c2 = lo(counterHigh), c3 = hi(counterHigh);
  Value mul0 = c32(0xD2511F53), mul1 = c32(0xCD9E8D57);
  Value weyl0 = c32(0x9E3779B9), weyl1 = c32(0xBB67AE85);
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 = arith::AddIOp::create(b, loc, k0, weyl0);
      k1 = arith::AddIOp::create(b, loc, k1, weyl1);
    }
    auto product0 = arith::MulUIExtendedOp::create(b, loc, mul0, c0);
    auto product1 = arith::MulUIExtendedOp::create(b, loc, mul1, c2);
    Value n0 = xor3(product1.getHigh(), c1, k0);
    Value n2 = xor3(product0.getHigh(), c3, k1);
    c1 = product1.getLow();
    c3 = product0.getLow();
    c0 = n0;
    c2 = n2;
  }
  Value bits = arith::ShRUIOp::create(b, loc, c0, c32(8));
  Value value = arith::UIToFPOp::create(b, loc, typeAt(b.getF32Type(), w), bits);
  return arith::MulFOp::create(
      b, loc, value, splat(typeAt(b.getF32Type(), w), b.getF32FloatAttr(0x1p-24f)));
}

Value KernelEmitter::emitUnary(kir::Op op, Value x) {
  switch (op) {
  case kir::Op::Neg:
    return arith::NegFOp::create(b, loc, x);
  case kir::Op::Exp:
    return emitExp(x);
  case kir::Op::Log:
    return emitLog(x);
  case kir::Op::Tanh:
    return math::TanhOp::create(b, loc, x);
  case kir::Op::Erf:
    return math::ErfOp::create(b, loc, x);
  case kir::Op::Sqrt:
    return math::SqrtOp::create(b, loc, x);
  case kir::Op::Rsqrt:
    return math::RsqrtOp::create(b, loc, x);
  case kir::Op::Sin:
    return emitSinCos(x, /*cosine=*/false);
  case kir::Op::Cos:
    return emitSinCos(x, /*cosine=*/true);
  case kir::Op::Abs:
    return math::AbsFOp::create(b, loc, x);
  case kir::Op::RoundF16:
  case kir::Op::RoundBF16: {
    // Narrow and widen again: arith.truncf rounds to nearest even (f16 by
    // F16C or the C runtime, bf16 by integer ops after lowerToLlvmDialect),
    // extf is exact. NaNs become the one quiet NaN every target gives.
    Type narrowElement =
        op == kir::Op::RoundF16 ? b.getF16Type() : b.getBF16Type();
    Type narrow = narrowElement;
    if (auto vector = dyn_cast<VectorType>(x.getType()))
      narrow = vector.clone(narrowElement);
    Value narrowed = arith::TruncFOp::create(b, loc, narrow, x);
    Value rounded = arith::ExtFOp::create(b, loc, x.getType(), narrowed);
    Value isNan =
        arith::CmpFOp::create(b, loc, arith::CmpFPredicate::UNO, x, x);
    Value nan = splat(x.getType(),
                      FloatAttr::get(b.getF32Type(),
                                     APFloat(APFloat::IEEEsingle(),
                                             APInt(32, 0x7fc00000u))));
    return arith::SelectOp::create(b, loc, isNan, nan, rounded);
  }
  default:
    llvm_unreachable("not a unary op");
  }
}

/// math.exp (a polynomial after lowering, about 1 ulp) flushes results
/// below 2^-126 to zero; exp(x/2)^2 gives them (softmax of a masked or far
/// below the max entry stays a tiny number, not 0).
Value KernelEmitter::emitExp(Value x) {
  Type type = x.getType();
  Value small = arith::CmpFOp::create(
      b, loc, arith::CmpFPredicate::OLT, x,
      splat(type, b.getF32FloatAttr(-87.0f)));
  Value half = arith::MulFOp::create(b, loc, x,
                                     splat(type, b.getF32FloatAttr(0.5f)));
  Value e = math::ExpOp::create(
      b, loc, arith::SelectOp::create(b, loc, small, half, x));
  return arith::SelectOp::create(b, loc, small,
                                 arith::MulFOp::create(b, loc, e, e), e);
}

/// math.log (a polynomial after lowering, about 1 ulp) misreads subnormal
/// inputs; they are scaled by 2^23 first (probabilities can be that small).
Value KernelEmitter::emitLog(Value x) {
  Type type = x.getType();
  Value small = arith::CmpFOp::create(
      b, loc, arith::CmpFPredicate::OLT, x,
      splat(type, b.getF32FloatAttr(0x1p-126f)));
  Value scaled = arith::MulFOp::create(b, loc, x,
                                       splat(type, b.getF32FloatAttr(0x1p23f)));
  Value log = math::LogOp::create(
      b, loc, arith::SelectOp::create(b, loc, small, scaled, x));
  Value shifted = arith::SubFOp::create(
      b, loc, log, splat(type, b.getF32FloatAttr(float(23 * M_LN2))));
  return arith::SelectOp::create(b, loc, small, shifted, log);
}

/// sin or cos in f32 arithmetic that vectorizes, accurate to about 1 ulp
/// up to |x| = 2^22, NaN beyond (MLIR's polynomial for them loses all relative accuracy
/// near the zeros and for tiny x). x = k pi/2 + r with |r| <= pi/4: k*P1 is
/// exact and x - k*P1 is too (both are multiples of x's and P1's ulps, and
/// close), so fma steps with P1 + P2 + P3 = pi/2 to 72 bits give r to about
/// one rounding. sin(r) and cos(r) are Taylor polynomials (truncation below
/// 1e-9 relative on [-pi/4, pi/4]); the quadrant k mod 4 picks one and a
/// sign. The quadrant is computed in float, so inf and NaN give NaN rather
/// than a poisoned integer conversion.
Value KernelEmitter::emitSinCos(Value x, bool cosine) {
  Type type = x.getType();
  auto c = [&](double value) {
    return splat(type, b.getF32FloatAttr(float(value)));
  };
  auto fma = [&](Value p, Value q, Value r) -> Value {
    return math::FmaOp::create(b, loc, p, q, r);
  };
  auto mul = [&](Value p, Value q) -> Value {
    return arith::MulFOp::create(b, loc, p, q);
  };
  auto floorOf = [&](Value p) -> Value {
    return math::FloorOp::create(b, loc, p);
  };
  Value k = math::RoundEvenOp::create(b, loc, mul(x, c(2 / M_PI)));
  Value r = fma(arith::NegFOp::create(b, loc, k), c(0x1.921fb6p+0), x);
  r = fma(arith::NegFOp::create(b, loc, k), c(-0x1.777a5cp-25), r);
  r = fma(arith::NegFOp::create(b, loc, k), c(-0x1.ee59dap-50), r);

  Value r2 = mul(r, r);
  // sin r = r + r^3 (-1/3! + r^2 (1/5! - r^2 (1/7! - r^2/9!)))
  Value sinPoly = fma(r2, c(1.0 / 362880), c(-1.0 / 5040));
  sinPoly = fma(r2, sinPoly, c(1.0 / 120));
  sinPoly = fma(r2, sinPoly, c(-1.0 / 6));
  Value sinR = fma(mul(r, r2), sinPoly, r);
  // cos r = 1 + r^2 (-1/2! + r^2 (1/4! - ... - r^2/10!))
  Value cosPoly = fma(r2, c(-1.0 / 3628800), c(1.0 / 40320));
  cosPoly = fma(r2, cosPoly, c(-1.0 / 720));
  cosPoly = fma(r2, cosPoly, c(1.0 / 24));
  cosPoly = fma(r2, cosPoly, c(-0.5));
  Value cosR = fma(r2, cosPoly, c(1.0));

  // cos x = sin(x + pi/2): one quadrant further.
  if (cosine)
    k = arith::AddFOp::create(b, loc, k, c(1.0));
  Value quadrant = arith::SubFOp::create(
      b, loc, k, mul(c(4.0), floorOf(mul(k, c(0.25))))); // k mod 4
  Value odd = arith::SubFOp::create(
      b, loc, quadrant, mul(c(2.0), floorOf(mul(quadrant, c(0.5)))));
  Value useCos =
      arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OEQ, odd, c(1.0));
  Value negate = arith::CmpFOp::create(b, loc, arith::CmpFPredicate::OGE,
                                       quadrant, c(2.0));
  Value result = arith::SelectOp::create(b, loc, useCos, cosR, sinR);
  result = arith::SelectOp::create(b, loc, negate,
                                   arith::NegFOp::create(b, loc, result), result);
  // Past 2^22, x - k*P1 is no longer exact (it would take a Payne-Hanek
  // reduction; model angles stay far below): say so with a NaN.
  Value outOfRange = arith::CmpFOp::create(
      b, loc, arith::CmpFPredicate::OGT, math::AbsFOp::create(b, loc, x),
      c(0x1p22));
  return arith::SelectOp::create(b, loc, outOfRange, c(NAN), result);
}

Value KernelEmitter::emitBinary(kir::Op op, kir::DType type, Value x,
                                Value y) {
  bool isF = type == kir::DType::F32;
  switch (op) {
  case kir::Op::Add:
    return isF ? Value(arith::AddFOp::create(b, loc, x, y))
               : Value(arith::AddIOp::create(b, loc, x, y));
  case kir::Op::Sub:
    return isF ? Value(arith::SubFOp::create(b, loc, x, y))
               : Value(arith::SubIOp::create(b, loc, x, y));
  case kir::Op::Mul:
    return isF ? Value(arith::MulFOp::create(b, loc, x, y))
               : Value(arith::MulIOp::create(b, loc, x, y));
  case kir::Op::Div:
    return isF ? Value(arith::DivFOp::create(b, loc, x, y))
               : Value(arith::DivSIOp::create(b, loc, x, y));
  // NaN-propagating for floats, like max/min in the frameworks we mirror.
  case kir::Op::Max:
    return isF ? Value(arith::MaximumFOp::create(b, loc, x, y))
               : Value(arith::MaxSIOp::create(b, loc, x, y));
  case kir::Op::Min:
    return isF ? Value(arith::MinimumFOp::create(b, loc, x, y))
               : Value(arith::MinSIOp::create(b, loc, x, y));
  case kir::Op::Rem:
    return arith::RemSIOp::create(b, loc, x, y);
  default:
    llvm_unreachable("not a binary op");
  }
}

/// The element `offset + sum_d strides[d] * i_d` of an operand, where i_d is
/// the domain index or its override. Row-level terms are summed as scalars;
/// a unit-stride row dimension gives a contiguous vector; any other
/// column-level term makes the access a gather/scatter of lane indices.
KernelEmitter::Address
KernelEmitter::emitAddress(int32_t operand, llvm::ArrayRef<int32_t> overrides,
                           int w, Value col) {
  const kir::Access &access = kernel.operands[operand];
  Value scalarIndex; // i64: the row-level terms (null: 0)
  Value laneIndex;   // vector<w x i64>: the column-level terms
  if (access.offset != 0)
    scalarIndex = i64Constant(access.offset);
  auto addTerm = [&](Value index, int64_t stride) {
    if (stride != 1)
      index = arith::MulIOp::create(
          b, loc, index,
          splat(index.getType(), b.getI64IntegerAttr(stride)));
    Value &sum = isa<VectorType>(index.getType()) ? laneIndex : scalarIndex;
    sum = sum ? arith::AddIOp::create(b, loc, sum, index) : index;
  };
  bool contiguous = false;
  for (size_t d = 0; d < rank; ++d) {
    int64_t stride = access.strides[d];
    if (stride == 0)
      continue;
    if (!overrides.empty() && overrides[d] >= 0)
      addTerm(getScalarOrVector(overrides[d]), stride);
    else if (lanesOverRows && d + 1 == rank)
      addTerm(col, stride); // one column for all lanes
    else if (lanesOverRows && w > 1)
      contiguous = true, addTerm(outer[d], 1); // lanes: consecutive rows
    else if (d + 1 < rank)
      addTerm(outer[d], stride);
    else if (w > 1 && stride == 1)
      contiguous = true, addTerm(col, 1);
    else
      addTerm(columnIndex(w, col), stride);
  }

  auto ptrType = LLVM::LLVMPointerType::get(b.getContext());
  Type element = storageType(access.dtype);
  if (!scalarIndex)
    scalarIndex = i64Constant(0);
  if (!laneIndex) {
    assert((w == 1 || contiguous) && "a column-level access varies by lane");
    return {LLVM::GEPOp::create(b, loc, ptrType, element, bases[operand],
                                ValueRange{scalarIndex},
                                LLVM::GEPNoWrapFlags::inbounds),
            false};
  }
  if (contiguous)
    laneIndex = arith::AddIOp::create(
        b, loc, laneIndex,
        columnIndex(w, i64Constant(0))); // col is already in scalarIndex
  laneIndex = arith::AddIOp::create(
      b, loc, laneIndex,
      vector::BroadcastOp::create(b, loc, laneIndex.getType(), scalarIndex));
  Value ptrs = LLVM::GEPOp::create(b, loc, LLVM::getVectorType(ptrType, w),
                                   element, bases[operand],
                                   ValueRange{laneIndex},
                                   LLVM::GEPNoWrapFlags::inbounds);
  return {ptrs, true};
}

void KernelEmitter::setAliasScopes(Operation *op, int32_t operand) {
  if (!aliasScopes[operand])
    return;
  auto access = cast<LLVM::AliasAnalysisOpInterface>(op);
  access.setAliasScopes(aliasScopes[operand]);
  access.setNoAliasScopes(noaliasScopes[operand]);
}

Value KernelEmitter::emitLoad(const kir::Instr &instr, int w, Value col) {
  const kir::Access &access = kernel.operands[instr.operand];
  Address address = emitAddress(instr.operand, instr.args, w, col);
  Type type = typeAt(storageType(access.dtype), w);
  unsigned alignment = kir::dtypeBytes(access.dtype);
  Value value;
  if (address.gather) {
    Value mask = splat(typeAt(b.getI1Type(), w), b.getBoolAttr(true));
    value = LLVM::masked_gather::create(b, loc, type, address.ptr, mask,
                                        ValueRange{}, alignment);
  } else {
    auto load = LLVM::LoadOp::create(b, loc, type, address.ptr, alignment);
    setAliasScopes(load, instr.operand);
    value = load;
  }
  // Loads widen: floats to f32 (exact), integers to i64.
  Type wide = typeAt(computeType(instr.type), w);
  switch (access.dtype) {
  case kir::DType::F16:
  case kir::DType::BF16:
    return arith::ExtFOp::create(b, loc, wide, value);
  case kir::DType::I32:
    return arith::ExtSIOp::create(b, loc, wide, value);
  default:
    return value;
  }
}

void KernelEmitter::emitStore(const kir::Instr &instr, int w, Value col) {
  const kir::Access &access = kernel.operands[instr.operand];
  Value value = get(instr.args[0], w);
  // Stores narrow: arith.truncf rounds to nearest even.
  Type narrow = typeAt(storageType(access.dtype), w);
  switch (access.dtype) {
  case kir::DType::F16:
  case kir::DType::BF16:
    value = arith::TruncFOp::create(b, loc, narrow, value);
    break;
  case kir::DType::I32:
    value = arith::TruncIOp::create(b, loc, narrow, value);
    break;
  default:
    break;
  }
  Address address =
      emitAddress(instr.operand, kir::indexOverrides(instr), w, col);
  unsigned alignment = kir::dtypeBytes(access.dtype);
  if (address.gather) {
    Value mask = splat(typeAt(b.getI1Type(), w), b.getBoolAttr(true));
    LLVM::masked_scatter::create(b, loc, value, address.ptr, mask,
                                 b.getI32IntegerAttr(alignment));
    return;
  }
  // A whole vector of a streaming kernel's main loop is aligned to its
  // size (storesStream).
  bool stream = streamingStores && w == width;
  auto store = LLVM::StoreOp::create(
      b, loc, value, address.ptr,
      stream ? unsigned(w) * alignment : alignment, /*isVolatile=*/false,
      /*isNonTemporal=*/stream);
  setAliasScopes(store, instr.operand);
}

OwningOpRef<ModuleOp>
llmc::cpu::buildCpuKernelModule(MLIRContext &context,
                                llvm::ArrayRef<kir::Kernel> kernels,
                                const CpuTargetOptions &options) {
  context.loadDialect<arith::ArithDialect, func::FuncDialect,
                      LLVM::LLVMDialect, math::MathDialect, scf::SCFDialect,
                      vector::VectorDialect>();
  CpuTargetOptions target = resolveTarget(options);
  OpBuilder builder(&context);
  OwningOpRef<ModuleOp> module = ModuleOp::create(builder.getUnknownLoc());
  builder.setInsertionPointToEnd(module->getBody());
  for (const kir::Kernel &kernel : kernels)
    KernelEmitter(builder, kernel, target).emitFunction();
  return module;
}

//===----------------------------------------------------------------------===//
// MLIR -> LLVM dialect -> LLVM IR -> object
//===----------------------------------------------------------------------===//

namespace {

/// Collects the diagnostics of a failed MLIR step into an llvm::Error.
class DiagnosticCollector {
public:
  explicit DiagnosticCollector(MLIRContext *context)
      : handler(context, [this](Diagnostic &diag) {
          llvm::raw_string_ostream(messages) << diag << "\n";
          return success();
        }) {}
  llvm::Error error(llvm::StringRef what) const {
    return llvm::createStringError(what + ": " +
                                   (messages.empty() ? "unknown failure"
                                                     : messages));
  }

private:
  std::string messages;
  ScopedDiagnosticHandler handler;
};

void initializeNativeTarget() {
  static std::once_flag once;
  std::call_once(once, [] {
    llvm::InitializeNativeTarget();
    llvm::InitializeNativeTargetAsmPrinter();
  });
}

llvm::Expected<std::unique_ptr<llvm::TargetMachine>>
createTargetMachine(const CpuTargetOptions &target) {
  initializeNativeTarget();
  llvm::Triple triple(llvm::sys::getProcessTriple());
  std::string error;
  const llvm::Target *llvmTarget =
      llvm::TargetRegistry::lookupTarget(triple, error);
  if (!llvmTarget)
    return llvm::createStringError("no LLVM target for " + triple.str() +
                                   ": " + error);
  // PIC: JITLink places sections anywhere in the address space.
  std::unique_ptr<llvm::TargetMachine> machine(
      llvmTarget->createTargetMachine(triple, target.cpu, target.features,
                                      llvm::TargetOptions(),
                                      llvm::Reloc::PIC_, std::nullopt,
                                      llvm::CodeGenOptLevel::Aggressive));
  if (!machine)
    return llvm::createStringError("cannot create a target machine for " +
                                   target.cpu);
  return machine;
}

/// Translates an LLVM-dialect module and optimizes it at O3.
llvm::Expected<std::unique_ptr<llvm::Module>>
translateAndOptimize(ModuleOp module, llvm::LLVMContext &llvmContext,
                     llvm::TargetMachine &machine,
                     const CpuTargetOptions &target) {
  DialectRegistry registry;
  registerBuiltinDialectTranslation(registry);
  registerLLVMDialectTranslation(registry);
  module.getContext()->appendDialectRegistry(registry);
  DiagnosticCollector diagnostics(module.getContext());
  std::unique_ptr<llvm::Module> llvmModule =
      translateModuleToLLVMIR(module, llvmContext, "llmc-kernels");
  if (!llvmModule)
    return diagnostics.error("translation to LLVM IR failed");
  llvmModule->setTargetTriple(machine.getTargetTriple());
  llvmModule->setDataLayout(machine.createDataLayout());
  for (llvm::Function &function : *llvmModule) {
    if (function.isDeclaration())
      continue;
    function.addFnAttr("target-cpu", machine.getTargetCPU());
    function.addFnAttr("target-features", machine.getTargetFeatureString());
    function.addFnAttr(llvm::Attribute::NoUnwind);
    // Keep the column loops' vectors whole: x86 CPUs tuned to prefer 256-bit
    // vectors would otherwise split 512-bit ones.
    std::string bits = std::to_string(target.vectorWidth * 32);
    function.addFnAttr("min-legal-vector-width", bits);
    function.addFnAttr("prefer-vector-width", bits);
  }

  llvm::LoopAnalysisManager lam;
  llvm::FunctionAnalysisManager fam;
  llvm::CGSCCAnalysisManager cgam;
  llvm::ModuleAnalysisManager mam;
  llvm::PassBuilder passBuilder(&machine);
  passBuilder.registerModuleAnalyses(mam);
  passBuilder.registerCGSCCAnalyses(cgam);
  passBuilder.registerFunctionAnalyses(fam);
  passBuilder.registerLoopAnalyses(lam);
  passBuilder.crossRegisterProxies(lam, fam, cgam, mam);
  passBuilder.buildPerModuleDefaultPipeline(llvm::OptimizationLevel::O3)
      .run(*llvmModule, mam);
  return llvmModule;
}

llvm::Error emitMachineCode(llvm::Module &module, llvm::TargetMachine &machine,
                            llvm::CodeGenFileType type,
                            llvm::raw_pwrite_stream &os) {
  llvm::legacy::PassManager passes;
  if (machine.addPassesToEmitFile(passes, os, nullptr, type))
    return llvm::createStringError("the target cannot emit this file type");
  passes.run(module);
  return llvm::Error::success();
}

bool isApproximated(llvm::StringRef opName) {
  return llvm::is_contained(
      {math::ExpOp::getOperationName(), math::LogOp::getOperationName(),
       math::TanhOp::getOperationName(), math::ErfOp::getOperationName()},
      opName);
}

} // namespace

llvm::Error llmc::cpu::lowerToLlvmDialect(ModuleOp module) {
  MLIRContext *context = module.getContext();
  DiagnosticCollector diagnostics(context);
  // Transcendentals become inline polynomials over arith ops, so they work
  // on vectors and need no math library at run time. bf16 conversions
  // become integer ops (round to nearest even), as few CPUs have them.
  RewritePatternSet patterns(context);
  populateMathPolynomialApproximationPatterns(patterns, isApproximated);
  arith::populateExpandBFloat16Patterns(patterns);
  if (failed(applyPatternsGreedily(module, std::move(patterns))))
    return diagnostics.error("math approximation did not converge");

  PassManager passes(context);
  passes.addPass(createSCFToControlFlowPass());
  passes.addPass(createConvertVectorToLLVMPass());
  passes.addPass(createConvertMathToLLVMPass());
  passes.addPass(createArithToLLVMConversionPass());
  passes.addPass(createConvertControlFlowToLLVMPass());
  passes.addPass(createConvertFuncToLLVMPass());
  passes.addPass(createReconcileUnrealizedCastsPass());
  if (failed(passes.run(module)))
    return diagnostics.error("lowering the CPU kernels to LLVM failed");
  return llvm::Error::success();
}

llvm::Expected<std::string>
llmc::cpu::lowerToLlvmIr(ModuleOp module, const CpuTargetOptions &options) {
  CpuTargetOptions target = resolveTarget(options);
  auto machine = createTargetMachine(target);
  if (!machine)
    return machine.takeError();
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      translateAndOptimize(module, llvmContext, **machine, target);
  if (!llvmModule)
    return llvmModule.takeError();
  std::string text;
  llvm::raw_string_ostream os(text);
  (*llvmModule)->print(os, nullptr);
  return text;
}

namespace {

llvm::Error verifyKernels(llvm::ArrayRef<kir::Kernel> kernels) {
  for (const kir::Kernel &kernel : kernels) {
    std::string problem = kir::verifyKernel(kernel);
    if (!problem.empty())
      return llvm::createStringError("invalid kernel: " + problem);
  }
  return llvm::Error::success();
}

/// Builds and lowers the kernels to an LLVM-dialect module in `context`.
llvm::Expected<OwningOpRef<ModuleOp>>
buildLlvmDialectModule(MLIRContext &context,
                       llvm::ArrayRef<kir::Kernel> kernels,
                       const CpuTargetOptions &target) {
  if (llvm::Error error = verifyKernels(kernels))
    return error;
  OwningOpRef<ModuleOp> module =
      llmc::cpu::buildCpuKernelModule(context, kernels, target);
  if (llvm::Error error = llmc::cpu::lowerToLlvmDialect(*module))
    return error;
  return module;
}

} // namespace

llvm::Expected<llvm::SmallVector<char, 0>>
llmc::cpu::compileKernelsToObject(llvm::ArrayRef<kir::Kernel> kernels,
                                  const CpuTargetOptions &options) {
  CpuTargetOptions target = resolveTarget(options);
  MLIRContext context(MLIRContext::Threading::DISABLED);
  auto module = buildLlvmDialectModule(context, kernels, target);
  if (!module)
    return module.takeError();
  auto machine = createTargetMachine(target);
  if (!machine)
    return machine.takeError();
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      translateAndOptimize(**module, llvmContext, **machine, target);
  if (!llvmModule)
    return llvmModule.takeError();
  llvm::SmallVector<char, 0> object;
  llvm::raw_svector_ostream os(object);
  if (llvm::Error error = emitMachineCode(**llvmModule, **machine,
                                          llvm::CodeGenFileType::ObjectFile,
                                          os))
    return error;
  return object;
}

llvm::Expected<std::vector<llvm::SmallVector<char, 0>>>
llmc::cpu::compileKernelsToObjects(llvm::ArrayRef<kir::Kernel> kernels,
                                   int parts,
                                   const CpuTargetOptions &options) {
  // Runs of consecutive kernels with about equal instruction counts (what
  // the compile time follows): run r ends where the running count passes
  // r/parts of the total.
  int64_t total = 0;
  for (const kir::Kernel &kernel : kernels)
    total += int64_t(kernel.body.size()) + 1;
  parts = std::max(1, std::min<int>(parts, int(kernels.size())));
  std::vector<std::pair<size_t, size_t>> runs;
  size_t begin = 0;
  int64_t seen = 0;
  for (size_t i = 0; i < kernels.size(); ++i) {
    seen += int64_t(kernels[i].body.size()) + 1;
    int64_t goal = total * int64_t(runs.size() + 1) / parts;
    if (seen >= goal && int(runs.size()) + 1 < parts) {
      runs.push_back({begin, i + 1});
      begin = i + 1;
    }
  }
  if (begin < kernels.size() || runs.empty())
    runs.push_back({begin, kernels.size()});
  // The target is resolved once, before the threads (host queries).
  CpuTargetOptions target = resolveTarget(options);
  initializeNativeTarget();
  std::vector<llvm::Expected<llvm::SmallVector<char, 0>>> results;
  for (size_t r = 0; r < runs.size(); ++r)
    results.emplace_back(llvm::SmallVector<char, 0>());
  auto compileRun = [&](size_t r) {
    results[r] = compileKernelsToObject(
        kernels.slice(runs[r].first, runs[r].second - runs[r].first), target);
  };
  std::vector<std::thread> threads;
  for (size_t r = 1; r < runs.size(); ++r)
    threads.emplace_back(compileRun, r);
  compileRun(0);
  for (std::thread &thread : threads)
    thread.join();
  std::vector<llvm::SmallVector<char, 0>> objects;
  llvm::Error errors = llvm::Error::success();
  for (auto &result : results) {
    if (!result) {
      errors = llvm::joinErrors(std::move(errors), result.takeError());
      continue;
    }
    objects.push_back(std::move(*result));
  }
  if (errors)
    return errors;
  return objects;
}

llvm::ArrayRef<llvm::StringRef> llmc::cpu::cpuPhaseNames() {
  static const llvm::StringRef names[] = {"cpu-mlir", "cpu-llvm-dialect",
                                          "cpu-llvm-ir", "cpu-asm"};
  return names;
}

llvm::Error llmc::cpu::printCpuPhase(llvm::raw_ostream &os,
                                     llvm::ArrayRef<kir::Kernel> kernels,
                                     llvm::StringRef phase,
                                     const CpuTargetOptions &options) {
  if (!llvm::is_contained(cpuPhaseNames(), phase))
    return llvm::createStringError(
        "unknown CPU phase '" + phase + "'; expected one of " +
        llvm::join(cpuPhaseNames(), ", "));
  CpuTargetOptions target = resolveTarget(options);
  MLIRContext context(MLIRContext::Threading::DISABLED);
  if (phase == "cpu-mlir") {
    if (llvm::Error error = verifyKernels(kernels))
      return error;
    buildCpuKernelModule(context, kernels, target)->print(os);
    return llvm::Error::success();
  }
  auto module = buildLlvmDialectModule(context, kernels, target);
  if (!module)
    return module.takeError();
  if (phase == "cpu-llvm-dialect") {
    (*module)->print(os);
    return llvm::Error::success();
  }
  auto machine = createTargetMachine(target);
  if (!machine)
    return machine.takeError();
  llvm::LLVMContext llvmContext;
  auto llvmModule =
      translateAndOptimize(**module, llvmContext, **machine, target);
  if (!llvmModule)
    return llvmModule.takeError();
  if (phase == "cpu-llvm-ir") {
    (*llvmModule)->print(os, nullptr);
    return llvm::Error::success();
  }
  llvm::SmallString<0> assembly;
  llvm::raw_svector_ostream assemblyStream(assembly);
  if (llvm::Error error =
          emitMachineCode(**llvmModule, **machine,
                          llvm::CodeGenFileType::AssemblyFile, assemblyStream))
    return error;
  os << assembly;
  return llvm::Error::success();
}

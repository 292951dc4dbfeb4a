// The CPU emitter's column sums, run with a vector's lanes over rows.
//
// Column sums (bias and norm-weight gradients: a kernel whose rows are the
// channels, each walking down its column of a row-major [N, C] matrix)
// would gather one element per cache line in the row schedule. Such a
// kernel runs "lanes over rows" instead (see isLanesOverRows): the lanes of
// a vector are W consecutive rows (channels, contiguous in memory) and the
// loop over the row dim walks down the matrix, so every load is a whole
// vector.
#include "codegen/KernelToCpu/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/SCF/IR/SCF.h"

using namespace mlir;
namespace kir = llmc::kir;
using kir::isReduction;
using llmc::cpu::KernelEmitter;

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

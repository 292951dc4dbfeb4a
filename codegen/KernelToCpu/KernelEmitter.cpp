// The CPU emitter's kernel function: row loop, column loops, op dispatch.
//
// Kernel IR -> MLIR (scf/arith/math/vector, LLVM-dialect memory ops); see
// KernelEmitter.h for the shape of a kernel function and the other files of
// the emitter.
#include "codegen/KernelToCpu/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Math/IR/Math.h"
#include "mlir/Dialect/SCF/IR/SCF.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"
#include "mlir/IR/BuiltinOps.h"

#include <limits>
#include <map>

using namespace mlir;
namespace kir = llmc::kir;
using llmc::cpu::CpuTargetOptions;
using llmc::cpu::KernelEmitter;

Value KernelEmitter::i64Constant(int64_t value) {
  return arith::ConstantOp::create(b, loc, b.getI64IntegerAttr(value));
}

Value KernelEmitter::splat(Type type, Attribute scalar) {
  if (auto vector = dyn_cast<VectorType>(type))
    return arith::ConstantOp::create(b, loc,
                                     DenseElementsAttr::get(vector, scalar));
  return arith::ConstantOp::create(b, loc, cast<TypedAttr>(scalar));
}

Value KernelEmitter::reductionIdentity(kir::Op op, int w) {
  float identity =
      op == kir::Op::ReduceSum ? 0.0f : -std::numeric_limits<float>::infinity();
  return splat(typeAt(b.getF32Type(), w), b.getF32FloatAttr(identity));
}

Value KernelEmitter::combine(kir::Op op, Value acc, Value x) {
  if (op == kir::Op::ReduceSum)
    return arith::AddFOp::create(b, loc, acc, x);
  // NaN-propagating; the sign of a zero maximum does not matter, and
  // ignoring it saves x86 two blends per vector.
  return arith::MaximumFOp::create(b, loc, acc, x, arith::FastMathFlags::nsz);
}

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

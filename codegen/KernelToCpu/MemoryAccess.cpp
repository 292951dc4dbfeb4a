// The CPU emitter's loads and stores: addresses, gathers, alias scopes.
//
// A kernel that only stores constants over 1 MiB or more (the update
// step zeroing the gradients) writes whole vectors with non-temporal
// stores (storesStream), which emitFunction fences at the kernel's end.
#include "codegen/KernelToCpu/KernelEmitter.h"
#include "ir/kernel/Program.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/LLVMIR/LLVMDialect.h"
#include "mlir/Dialect/Vector/IR/VectorOps.h"

#include "llvm/TargetParser/Host.h"
#include "llvm/TargetParser/Triple.h"

using namespace mlir;
namespace kir = llmc::kir;
using llmc::cpu::KernelEmitter;

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

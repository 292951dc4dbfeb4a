// The CPU emitter's pointwise ops: arithmetic, exp/log/sin/cos, Philox.
#include "codegen/KernelToCpu/KernelEmitter.h"

#include "mlir/Dialect/Arith/IR/Arith.h"
#include "mlir/Dialect/Math/IR/Math.h"

#include <cmath>

using namespace mlir;
namespace kir = llmc::kir;
using llmc::cpu::KernelEmitter;

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

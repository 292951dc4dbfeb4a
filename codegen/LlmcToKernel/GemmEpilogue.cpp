// matchGemmEpilogue and classifyGemmEpilogues: GEMM epilogue kernels as
// kir::EpilogueKind, by rebuilding each kernel's stored value as a
// canonical expression and comparing it with the kinds' expressions.
#include "codegen/LlmcToKernel/GemmEpilogue.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"

#include <cmath>
#include <cstring>
#include <optional>
#include <string>

using namespace llmc;

namespace {

// GEMM epilogues in cuBLASLt (matchGemmEpilogue below). What the GPT-2
// programs give: forward, bias on c_attn and bias + tanh GELU on c_fc (in
// place); the training step's forward, bias only (GELU there is a kernel
// step of its own writing another buffer: the pre-activation is kept for
// the backward); its backward, the GELU gradient on dY W_proj (DGELU, the
// saved pre-activation as aux). Not fused, because the lowering does not
// make them epilogues of one GEMM: the bias gradients are reduce_sum kernel
// steps (the c_fc one right after the DGELU GEMM, which
// EPILOGUE_DGELU_BGRAD could absorb; the others sum dY over rows, which
// BGRADA/BGRADB would do inside the dW GEMM, many steps later and now
// accumulating into its gradient buffer), and the training forward's GELU
// (EPILOGUE_GELU_AUX_BIAS could write both buffers) is the next step. Each
// needs the executor to absorb or move a kernel step, not just an epilogue.

/// The element of `access` that row `row` of `kernel` starts at (column 0).
int64_t rowStart(const kir::Access &access, const kir::Kernel &kernel,
                 int64_t row) {
  int64_t address = access.offset;
  for (int64_t d = int64_t(kernel.domain.size()) - 2; d >= 0; --d) {
    address += (row % kernel.domain[d]) * access.strides[d];
    row /= kernel.domain[d];
  }
  return address;
}

bool isF32(const kir::Access &access, const kir::Program &program) {
  return access.dtype == kir::DType::F32 &&
         program.buffers[access.buffer].dtype == kir::DType::F32 &&
         access.strides.back() == 1;
}

/// Does `access` address C's element (row, column) for every row?
bool addressesC(const kir::Access &access, const kir::Kernel &kernel,
                const kir::GemmStep &gemm, const kir::Program &program) {
  if (access.buffer != gemm.c.buffer || !isF32(access, program))
    return false;
  for (int64_t row = 0; row < kernel.numRows(); ++row)
    if (rowStart(access, kernel, row) !=
        gemm.c.offset + (row / gemm.m) * gemm.c.strides[0] +
            (row % gemm.m) * gemm.c.strides[1])
      return false;
  return true;
}

/// Is `access` one f32 row of n elements read by every row (a bias)?
bool isBiasRow(const kir::Access &access, const kir::GemmStep &gemm,
               const kir::Program &program) {
  if (access.buffer == gemm.c.buffer || !isF32(access, program))
    return false;
  for (size_t d = 0; d + 1 < access.strides.size(); ++d)
    if (access.strides[d] != 0)
      return false;
  return true;
}

/// If `access` is another f32 matrix whose rows follow each other `ld`
/// elements apart (ld >= n), row r of the kernel at row r: that ld.
std::optional<int64_t> auxRowStride(const kir::Access &access,
                                    const kir::Kernel &kernel,
                                    const kir::GemmStep &gemm,
                                    const kir::Program &program) {
  if (access.buffer == gemm.c.buffer || gemm.batch != 1 ||
      !isF32(access, program))
    return std::nullopt;
  int64_t first = rowStart(access, kernel, 0);
  int64_t ld = kernel.numRows() > 1 ? rowStart(access, kernel, 1) - first
                                    : gemm.n;
  if (ld < gemm.n)
    return std::nullopt;
  for (int64_t row = 0; row < kernel.numRows(); ++row)
    if (rowStart(access, kernel, row) != first + row * ld)
      return std::nullopt;
  return ld;
}

// Epilogue expressions as canonical strings: leaves "C", "bias", "aux",
// constants by their f32 bits; the operands of sums and products sorted,
// so `a + b` and `b + a` read the same.
std::string exprConst(double value) {
  float f = float(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return "k" + llvm::utohexstr(bits);
}
std::string exprCommutative(const char *op, std::string a, std::string b) {
  if (b < a)
    std::swap(a, b);
  return std::string(op) + "(" + a + "," + b + ")";
}
std::string exprAdd(const std::string &a, const std::string &b) {
  return exprCommutative("add", a, b);
}
std::string exprMul(const std::string &a, const std::string &b) {
  return exprCommutative("mul", a, b);
}
std::string exprSub(const std::string &a, const std::string &b) {
  return "sub(" + a + "," + b + ")";
}
std::string exprTanh(const std::string &a) { return "tanh(" + a + ")"; }

/// gelu(x) with the tanh approximation, as LlmcToKernel emits it:
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
std::string exprGeluTanh(const std::string &x) {
  std::string x3 = exprMul(exprMul(x, x), x);
  std::string poly = exprAdd(x, exprMul(exprConst(0.044715), x3));
  std::string inner =
      exprTanh(exprMul(exprConst(std::sqrt(2.0 / M_PI)), poly));
  return exprMul(exprMul(exprConst(0.5), x),
                 exprAdd(exprConst(1.0), inner));
}

/// gelu'(x) of the tanh approximation, as LlmcToKernel emits it:
/// 0.5 (1 + t) + 0.5 x (1 - t^2) (k + 3 * 0.044715 k x^2), k = sqrt(2/pi).
std::string exprGeluTanhGrad(const std::string &x) {
  double k = std::sqrt(2.0 / M_PI);
  std::string one = exprConst(1.0), half = exprConst(0.5);
  std::string x2 = exprMul(x, x);
  std::string poly =
      exprAdd(x, exprMul(exprConst(0.044715), exprMul(x2, x)));
  std::string t = exprTanh(exprMul(exprConst(k), poly));
  std::string left = exprMul(half, exprAdd(one, t));
  std::string sech2 = exprSub(one, exprMul(t, t));
  std::string dpoly =
      exprAdd(exprConst(k), exprMul(exprConst(k * 3.0 * 0.044715), x2));
  std::string right = exprMul(exprMul(half, x), exprMul(sech2, dpoly));
  return exprAdd(left, right);
}

} // namespace

FusedEpilogue llmc::matchGemmEpilogue(const kir::Kernel &kernel,
                                      const kir::GemmStep &gemm,
                                      const kir::Program &program) {
  FusedEpilogue none, fused;
  if (kernel.rowLength() != gemm.n ||
      kernel.numRows() != gemm.batch * gemm.m || kernel.hasReduction())
    return none;
  // What each operand is: C, the bias row or the aux matrix (one of each
  // at most); "" for anything else, which the kernel may not use.
  std::vector<std::string> leaf(kernel.operands.size());
  bool haveBias = false, haveAux = false;
  kir::Access biasAccess, auxAccess;
  auto same = [](const kir::Access &x, const kir::Access &y) {
    return x.buffer == y.buffer && x.offset == y.offset &&
           x.strides == y.strides;
  };
  for (auto [i, access] : llvm::enumerate(kernel.operands)) {
    if (addressesC(access, kernel, gemm, program)) {
      leaf[i] = "C";
    } else if (isBiasRow(access, gemm, program)) {
      if (haveBias && !same(access, biasAccess))
        return none;
      haveBias = true;
      biasAccess = access;
      fused.bias = {access.buffer, access.offset, {1}};
      leaf[i] = "bias";
    } else if (std::optional<int64_t> ld =
                   auxRowStride(access, kernel, gemm, program)) {
      if (haveAux && !same(access, auxAccess))
        return none;
      haveAux = true;
      auxAccess = access;
      fused.aux = {access.buffer, access.offset, {*ld, 1}};
      fused.auxLd = *ld;
      leaf[i] = "aux";
    }
  }
  // Every value as an expression; the one store must write C.
  constexpr size_t kMaxExpr = 4096; // a bigger kernel is no epilogue of ours
  std::vector<std::string> value(kernel.body.size());
  std::optional<std::string> stored;
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    if (instr.op != kir::Op::Store && instr.type != kir::DType::F32)
      return none;
    auto arg = [&](int index) { return value[instr.args[index]]; };
    switch (instr.op) {
    case kir::Op::Load:
      if (!instr.args.empty() || leaf[instr.operand].empty())
        return none;
      value[i] = leaf[instr.operand];
      break;
    case kir::Op::Const:
      value[i] = exprConst(instr.imm);
      break;
    case kir::Op::Add:
      value[i] = exprAdd(arg(0), arg(1));
      break;
    case kir::Op::Mul:
      value[i] = exprMul(arg(0), arg(1));
      break;
    case kir::Op::Sub:
      value[i] = exprSub(arg(0), arg(1));
      break;
    case kir::Op::Tanh:
      value[i] = exprTanh(arg(0));
      break;
    case kir::Op::Store:
      if (stored || leaf[instr.operand] != "C")
        return none;
      stored = arg(0);
      break;
    default:
      return none;
    }
    if (value[i].size() > kMaxExpr)
      return none;
  }
  if (!stored)
    return none;
  if (*stored == exprAdd("C", "bias"))
    fused.kind = kir::EpilogueKind::Bias;
  else if (*stored == exprGeluTanh(exprAdd("C", "bias")))
    fused.kind = kir::EpilogueKind::GeluBias;
  else if (*stored == exprGeluTanh("C"))
    fused.kind = kir::EpilogueKind::Gelu;
  else if (*stored == exprMul("C", exprGeluTanhGrad("aux")))
    fused.kind = kir::EpilogueKind::DGelu;
  else
    return none;
  return fused;
}


void llmc::classifyGemmEpilogues(kir::Program &program) {
  for (kir::Step &step : program.steps) {
    if (step.kind != kir::StepKind::Gemm || step.gemm.epilogue < 0)
      continue;
    kir::GemmStep &gemm = step.gemm;
    FusedEpilogue fused =
        matchGemmEpilogue(program.kernels[gemm.epilogue], gemm, program);
    gemm.epilogueKind = fused.kind;
    gemm.epilogueBias = fused.kind == kir::EpilogueKind::Bias ||
                                fused.kind == kir::EpilogueKind::GeluBias
                            ? fused.bias
                            : kir::View();
    gemm.epilogueAux =
        fused.kind == kir::EpilogueKind::DGelu ? fused.aux : kir::View();
  }
}

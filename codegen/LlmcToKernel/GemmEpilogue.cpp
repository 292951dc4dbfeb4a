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
// programs give, in f32 and in the bf16/f16 programs of llmc-amp alike:
// forward, bias on c_attn and bias + tanh GELU on c_fc (in place); the
// training step's forward, bias only (GELU there is a kernel step of its
// own writing another buffer: the pre-activation is kept for the
// backward); its backward, the GELU gradient on dY W_proj (DGELU, the
// saved pre-activation as aux). In llmc-amp programs C, the bias (the
// persistent 16-bit copy of the f32 parameter) and aux are all bf16 or all
// f16, which is what cuBLASLt reads for a bf16/f16 D. Not fused, because the
// lowering does not make them epilogues of one GEMM: the bias gradients
// are reduce_sum kernel steps, and the training forward's GELU
// (EPILOGUE_GELU_AUX_BIAS could write both buffers) is the next step.
// EPILOGUE_DGELU_BGRAD could absorb the c_fc bias gradient (a row sum of
// the DGELU output into a buffer of C's type, as the reduce_sum kernel
// stores it under llmc-amp), but that kernel step comes after the dW GEMM
// that follows the DGELU GEMM, and the memory plan gives its output buffer
// a lifetime that starts there: written by the DGELU GEMM instead, it
// could overwrite a buffer that dW GEMM still reads. Absorbing it needs the
// kernel IR to record the GEMM as the writer (kir::GemmStep, the artifact
// schema and the planner's liveness), not just an epilogue kind; the other
// bias gradients sum dY over rows, which BGRADA/BGRADB would do inside the
// dW GEMM, many steps later and accumulating into its gradient buffer.
//
// Rounding in narrow programs. cuBLASLt computes the epilogue on the f32
// accumulator and rounds once, to D's type; the kernel it replaces rounds
// the product to C's type first (C is a bf16/f16 buffer), and for bias +
// GELU also rounds the bias sum before the GELU (a bf16 value that another
// op reads is rounded where it is computed). Fusing drops those roundings.
// We accept that: (1) the product's bits are not fixed by the program
// anyway, since cuBLASLt's f32 sum runs in an order of its own on the
// tensor cores, unlike the CPU's; (2) each rounding dropped is to C's own
// type, so the fused value is within about one unit of that type, relative
// to |product| + |bias|, of the unfused one, and nearer the exact value
// (one rounding instead of two or three); (3) it is what llm.c and
// PyTorch's cuBLASLt epilogues compute. A rounding to a type narrower than
// C is refused (an f32 C whose kernel rounds the product to bf16 as it
// loads it, the logits' matmul_cast): fused, an f32 result would move by a
// bf16 unit, 2^16 of its own. The tests emulate the fused GEMM as cuBLASLt
// computes it (runGemm in test/unit/codegen/KernelToCuda/CudaProgramTest.cpp).
// cuBLASLt's GELU is the tanh approximation (PyTorch's _addmm_activation
// relies on it: pytorch/pytorch#104061), so the erf GELU is never matched.

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

/// The type cuBLASLt reads and writes every operand of an epilogue in: C's
/// (its D). The bias vector has D's type for all but int8 and fp8 GEMMs
/// (CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE) and the GELU input (aux) too
/// (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE's default), so bias and aux
/// must be stored in C's type: f32, or the bf16/f16 of llmc-amp.
kir::DType storageType(const kir::GemmStep &gemm, const kir::Program &program) {
  return program.buffers[gemm.c.buffer].dtype;
}

/// Is `access` a unit-stride view of a buffer stored in `dtype`?
bool isStoredAs(const kir::Access &access, kir::DType dtype,
                const kir::Program &program) {
  return kir::isFloat(dtype) && access.dtype == dtype &&
         program.buffers[access.buffer].dtype == dtype &&
         access.strides.back() == 1;
}

/// Does `access` address C's element (row, column) for every row?
bool addressesC(const kir::Access &access, const kir::Kernel &kernel,
                const kir::GemmStep &gemm, const kir::Program &program) {
  if (access.buffer != gemm.c.buffer ||
      !isStoredAs(access, storageType(gemm, program), program))
    return false;
  for (int64_t row = 0; row < kernel.numRows(); ++row)
    if (rowStart(access, kernel, row) !=
        gemm.c.offset + (row / gemm.m) * gemm.c.strides[0] +
            (row % gemm.m) * gemm.c.strides[1])
      return false;
  return true;
}

/// Is `access` one row of n elements of C's type read by every row (a
/// bias)?
bool isBiasRow(const kir::Access &access, const kir::GemmStep &gemm,
               const kir::Program &program) {
  if (access.buffer == gemm.c.buffer ||
      !isStoredAs(access, storageType(gemm, program), program))
    return false;
  for (size_t d = 0; d + 1 < access.strides.size(); ++d)
    if (access.strides[d] != 0)
      return false;
  return true;
}

/// If `access` is another matrix of C's type whose rows follow each other
/// `ld` elements apart (ld >= n), row r of the kernel at row r: that ld.
std::optional<int64_t> auxRowStride(const kir::Access &access,
                                    const kir::Kernel &kernel,
                                    const kir::GemmStep &gemm,
                                    const kir::Program &program) {
  if (access.buffer == gemm.c.buffer || gemm.batch != 1 ||
      !isStoredAs(access, storageType(gemm, program), program))
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
    case kir::Op::RoundF16:
    case kir::Op::RoundBF16:
      // The bias sum rounded to C's type before the GELU reads it, which
      // cuBLASLt keeps in f32 (the rounding note at the top of this file);
      // any other rounding is no epilogue of ours.
      if (storageType(gemm, program) != (instr.op == kir::Op::RoundF16
                                             ? kir::DType::F16
                                             : kir::DType::BF16) ||
          arg(0) != exprAdd("C", "bias"))
        return none;
      value[i] = arg(0);
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

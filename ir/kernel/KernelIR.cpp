// Kernel IR utilities: type tables, levels, the verifier and the printer.
#include "ir/kernel/KernelIR.h"

#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/raw_ostream.h"

using namespace llmc::kir;

int64_t llmc::kir::dtypeBytes(DType type) {
  switch (type) {
  case DType::F32:
  case DType::I32:
    return 4;
  case DType::F16:
  case DType::BF16:
    return 2;
  case DType::I64:
    return 8;
  case DType::I1:
    return 1;
  }
  return 0;
}

const char *llmc::kir::dtypeName(DType type) {
  switch (type) {
  case DType::F32:
    return "f32";
  case DType::F16:
    return "f16";
  case DType::BF16:
    return "bf16";
  case DType::I32:
    return "i32";
  case DType::I64:
    return "i64";
  case DType::I1:
    return "i1";
  }
  return "?";
}

std::optional<DType> llmc::kir::parseDType(const std::string &name) {
  for (DType type : {DType::F32, DType::F16, DType::BF16, DType::I32,
                     DType::I64, DType::I1})
    if (name == dtypeName(type))
      return type;
  return std::nullopt;
}

bool llmc::kir::isFloat(DType type) {
  return type == DType::F32 || type == DType::F16 || type == DType::BF16;
}

DType llmc::kir::computeType(DType storage) {
  return isFloat(storage) ? DType::F32 : DType::I64;
}

const char *llmc::kir::opName(Op op) {
  switch (op) {
  case Op::Load: return "load";
  case Op::Const: return "const";
  case Op::Index: return "index";
  case Op::Neg: return "neg";
  case Op::Exp: return "exp";
  case Op::Log: return "log";
  case Op::Tanh: return "tanh";
  case Op::Erf: return "erf";
  case Op::Sqrt: return "sqrt";
  case Op::Rsqrt: return "rsqrt";
  case Op::Sin: return "sin";
  case Op::Cos: return "cos";
  case Op::Abs: return "abs";
  case Op::Add: return "add";
  case Op::Sub: return "sub";
  case Op::Mul: return "mul";
  case Op::Div: return "div";
  case Op::Max: return "max";
  case Op::Min: return "min";
  case Op::Rem: return "rem";
  case Op::CmpLt: return "cmp_lt";
  case Op::CmpLe: return "cmp_le";
  case Op::CmpEq: return "cmp_eq";
  case Op::Select: return "select";
  case Op::IToF: return "itof";
  case Op::ReduceSum: return "reduce_sum";
  case Op::ReduceMax: return "reduce_max";
  case Op::Store: return "store";
  case Op::Random: return "random";
  case Op::RoundF16: return "round_f16";
  case Op::RoundBF16: return "round_bf16";
  }
  return "?";
}

int llmc::kir::numArgs(Op op) {
  switch (op) {
  case Op::Load:
  case Op::Store:
    return -1;
  case Op::Const:
  case Op::Index:
    return 0;
  case Op::Neg: case Op::Exp: case Op::Log: case Op::Tanh: case Op::Erf:
  case Op::Sqrt: case Op::Rsqrt: case Op::Sin: case Op::Cos: case Op::Abs:
  case Op::IToF: case Op::ReduceSum: case Op::ReduceMax:
  case Op::RoundF16: case Op::RoundBF16:
    return 1;
  case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max:
  case Op::Min: case Op::Rem: case Op::CmpLt: case Op::CmpLe: case Op::CmpEq:
    return 2;
  case Op::Select:
  case Op::Random:
    return 3;
  }
  return 0;
}

static bool isUnaryFloat(Op op) {
  switch (op) {
  case Op::Neg: case Op::Exp: case Op::Log: case Op::Tanh: case Op::Erf:
  case Op::Sqrt: case Op::Rsqrt: case Op::Sin: case Op::Cos: case Op::Abs:
  case Op::RoundF16: case Op::RoundBF16:
    return true;
  default:
    return false;
  }
}

static bool isBinary(Op op) {
  switch (op) {
  case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Max:
  case Op::Min: case Op::Rem:
    return true;
  default:
    return false;
  }
}

static bool isCompare(Op op) {
  return op == Op::CmpLt || op == Op::CmpLe || op == Op::CmpEq;
}

int64_t Kernel::numRows() const {
  int64_t rows = 1;
  for (size_t d = 0; d + 1 < domain.size(); ++d)
    rows *= domain[d];
  return rows;
}

bool Kernel::hasReduction() const {
  for (const Instr &instr : body)
    if (instr.op == Op::ReduceSum || instr.op == Op::ReduceMax)
      return true;
  return false;
}

std::vector<Level> llmc::kir::computeLevels(const Kernel &kernel) {
  size_t rowDim = kernel.domain.size() - 1;
  std::vector<Level> levels(kernel.body.size(), Level::Row);
  auto anyColumn = [&](const std::vector<int32_t> &args) {
    for (int32_t arg : args)
      if (arg >= 0 && size_t(arg) < levels.size() &&
          levels[arg] == Level::Column)
        return true;
    return false;
  };
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instr &instr = kernel.body[i];
    Level level = Level::Row;
    switch (instr.op) {
    case Op::Const:
      break;
    case Op::Index:
      if (size_t(instr.dim) == rowDim)
        level = Level::Column;
      break;
    case Op::Load: {
      if (instr.operand < 0 || size_t(instr.operand) >= kernel.operands.size())
        break;
      const Access &access = kernel.operands[instr.operand];
      bool rowIndexKept = instr.args.size() != kernel.domain.size() ||
                          instr.args[rowDim] < 0;
      if (rowIndexKept && rowDim < access.strides.size() &&
          access.strides[rowDim] != 0)
        level = Level::Column;
      if (anyColumn(instr.args))
        level = Level::Column;
      break;
    }
    case Op::ReduceSum:
    case Op::ReduceMax:
      break;
    case Op::Store: {
      if (instr.operand >= 0 &&
          size_t(instr.operand) < kernel.operands.size()) {
        const Access &access = kernel.operands[instr.operand];
        if (rowDim < access.strides.size() && access.strides[rowDim] != 0)
          level = Level::Column;
      }
      break;
    }
    default:
      if (anyColumn(instr.args))
        level = Level::Column;
      break;
    }
    levels[i] = level;
  }
  return levels;
}

std::string llmc::kir::verifyKernel(const Kernel &kernel) {
  std::string message;
  llvm::raw_string_ostream os(message);
  auto fail = [&](size_t index) -> llvm::raw_ostream & {
    os << "kernel '" << kernel.name << "', instruction %" << index << " ("
       << opName(kernel.body[index].op) << "): ";
    return os;
  };
  if (kernel.domain.empty()) {
    os << "kernel '" << kernel.name << "' has an empty domain";
    return message;
  }
  for (int64_t extent : kernel.domain)
    if (extent < 1) {
      os << "kernel '" << kernel.name << "' has a non-positive extent";
      return message;
    }
  size_t rank = kernel.domain.size();
  for (auto [index, access] : llvm::enumerate(kernel.operands)) {
    if (access.strides.size() != rank || access.buffer < 0 ||
        access.dtype == DType::I1) {
      os << "kernel '" << kernel.name << "', operand " << index
         << ": needs a buffer, a storage type and " << rank << " strides";
      return message;
    }
  }
  std::vector<Level> levels = computeLevels(kernel);
  std::vector<DType> types;
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instr &instr = kernel.body[i];
    for (int32_t arg : instr.args)
      if (arg >= int32_t(i) ||
          (arg < 0 && instr.op != Op::Load && instr.op != Op::Store)) {
        fail(i) << "argument %" << arg << " is not defined before its use";
        return message;
      }
    int expected = numArgs(instr.op);
    if (expected >= 0 && instr.args.size() != size_t(expected)) {
      fail(i) << "expects " << expected << " arguments, has "
              << instr.args.size();
      return message;
    }
    auto argType = [&](size_t n) { return types[instr.args[n]]; };
    DType type = instr.type;
    switch (instr.op) {
    case Op::Load:
    case Op::Store: {
      if (instr.operand < 0 || size_t(instr.operand) >= kernel.operands.size()) {
        fail(i) << "operand " << instr.operand << " does not exist";
        return message;
      }
      DType storage = kernel.operands[instr.operand].dtype;
      if (instr.op == Op::Store) {
        if (instr.args.size() != 1 && instr.args.size() != 1 + rank) {
          fail(i) << "needs a value and no index overrides or one per "
                     "domain dim";
          return message;
        }
        if (instr.args[0] < 0) {
          fail(i) << "stores no value";
          return message;
        }
        llvm::ArrayRef<int32_t> at = indexOverrides(instr);
        for (auto [d, arg] : llvm::enumerate(at)) {
          if (arg < 0)
            continue;
          if (d + 1 == rank) {
            fail(i) << "overrides the row dimension's index (a scatter "
                       "writes whole runs of a row)";
            return message;
          }
          if (types[arg] != DType::I64 || levels[arg] != Level::Row) {
            fail(i) << "index override %" << arg
                    << " is not a row-level i64";
            return message;
          }
        }
        if (argType(0) != computeType(storage)) {
          fail(i) << "stores " << dtypeName(argType(0)) << " to "
                  << dtypeName(storage) << " storage";
          return message;
        }
        if (levels[instr.args[0]] == Level::Column &&
            levels[i] != Level::Column) {
          fail(i) << "stores a column-level value through a row-level "
                     "(row stride 0) operand";
          return message;
        }
        break;
      }
      if (type != computeType(storage)) {
        fail(i) << "loads " << dtypeName(storage) << " storage as "
                << dtypeName(type);
        return message;
      }
      if (!instr.args.empty()) {
        if (instr.args.size() != rank) {
          fail(i) << "needs no index overrides or one per domain dim";
          return message;
        }
        for (int32_t arg : instr.args)
          if (arg >= 0 && types[arg] != DType::I64) {
            fail(i) << "index override %" << arg << " is not i64";
            return message;
          }
      }
      break;
    }
    case Op::Const:
      if (type != DType::F32 && type != DType::I64) {
        fail(i) << "constants are f32 or i64";
        return message;
      }
      break;
    case Op::Index:
      if (instr.dim < 0 || size_t(instr.dim) >= rank || type != DType::I64) {
        fail(i) << "needs an i64 result and a dim in [0, " << rank << ")";
        return message;
      }
      break;
    case Op::IToF:
      if (argType(0) != DType::I64 || type != DType::F32) {
        fail(i) << "converts i64 to f32";
        return message;
      }
      break;
    case Op::ReduceSum:
    case Op::ReduceMax:
      if (argType(0) != DType::F32 || type != DType::F32 ||
          levels[instr.args[0]] != Level::Column) {
        fail(i) << "reduces a column-level f32 value";
        return message;
      }
      break;
    case Op::Random:
      if (argType(0) != DType::I64 || argType(1) != DType::I64 ||
          argType(2) != DType::I64 || type != DType::F32) {
        fail(i) << "takes three i64 values (key, counter high, counter low) "
                   "to an f32";
        return message;
      }
      break;
    case Op::Select:
      if (argType(0) != DType::I1 || argType(1) != type ||
          argType(2) != type) {
        fail(i) << "needs an i1 condition and two " << dtypeName(type)
                << " values";
        return message;
      }
      break;
    default:
      if (isUnaryFloat(instr.op)) {
        if (argType(0) != DType::F32 || type != DType::F32) {
          fail(i) << "operates on f32";
          return message;
        }
      } else if (isCompare(instr.op)) {
        if (argType(0) != argType(1) || type != DType::I1) {
          fail(i) << "compares two values of one type to i1";
          return message;
        }
      } else if (isBinary(instr.op)) {
        bool intOnly = instr.op == Op::Rem;
        if (argType(0) != type || argType(1) != type ||
            (type != DType::F32 && type != DType::I64) ||
            (intOnly && type != DType::I64)) {
          fail(i) << "needs two " << (intOnly ? "i64" : "f32 or i64")
                  << " arguments of the result type";
          return message;
        }
      }
      break;
    }
    types.push_back(instr.op == Op::Store ? DType::I1 : type);
  }
  return message;
}

int64_t llmc::kir::countFlops(const Kernel &kernel) {
  std::vector<Level> levels = computeLevels(kernel);
  int64_t perRow = 0;
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instr &instr = kernel.body[i];
    // Roundings are conversions, not arithmetic.
    bool rounding = instr.op == Op::RoundF16 || instr.op == Op::RoundBF16;
    bool arithmetic = instr.type == DType::F32 && !rounding &&
                      (isUnaryFloat(instr.op) || isBinary(instr.op) ||
                       instr.op == Op::ReduceSum ||
                       instr.op == Op::ReduceMax || instr.op == Op::Random);
    if (!arithmetic)
      continue;
    bool perColumn = levels[i] == Level::Column ||
                     instr.op == Op::ReduceSum || instr.op == Op::ReduceMax;
    perRow += perColumn ? kernel.rowLength() : 1;
  }
  return perRow * kernel.numRows();
}

std::string llmc::kir::formatShape(llvm::ArrayRef<int64_t> values) {
  std::string text = "[";
  for (auto [i, value] : llvm::enumerate(values))
    text += (i ? ", " : "") + std::to_string(value);
  return text + "]";
}

void llmc::kir::printKernel(llvm::raw_ostream &os, const Kernel &kernel) {
  os << "kernel @" << kernel.name << " domain " << formatShape(kernel.domain);
  if (!kernel.origin.empty())
    os << " from \"" << kernel.origin << "\"";
  os << " {\n";
  for (auto [index, access] : llvm::enumerate(kernel.operands)) {
    os << "  operand " << index << ": buffer " << access.buffer << " "
       << dtypeName(access.dtype) << " offset " << access.offset
       << " strides " << formatShape(access.strides) << "\n";
  }
  std::vector<Level> levels = computeLevels(kernel);
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instr &instr = kernel.body[i];
    os << "  ";
    if (instr.op != Op::Store)
      os << "%" << i << " = ";
    os << opName(instr.op);
    switch (instr.op) {
    case Op::Const:
      if (instr.type == DType::I64)
        os << " " << int64_t(instr.imm);
      else
        os << " " << llvm::formatv("{0:e9}", instr.imm).str();
      break;
    case Op::Index:
      os << " " << instr.dim;
      break;
    case Op::Load:
    case Op::Store: {
      if (instr.op == Op::Store)
        os << " %" << instr.args[0] << " to";
      os << " operand " << instr.operand;
      llvm::ArrayRef<int32_t> at = indexOverrides(instr);
      if (!at.empty()) {
        os << " at [";
        for (size_t d = 0; d < at.size(); ++d) {
          if (d)
            os << ", ";
          if (at[d] < 0)
            os << "i" << d;
          else
            os << "%" << at[d];
        }
        os << "]";
      }
      break;
    }
    default:
      for (size_t a = 0; a < instr.args.size(); ++a)
        os << (a ? ", %" : " %") << instr.args[a];
      break;
    }
    if (instr.op != Op::Store)
      os << " : " << dtypeName(instr.type);
    os << (levels[i] == Level::Column ? "  // column" : "  // row") << "\n";
  }
  os << "}\n";
}

bool llmc::kir::isReduction(Op op) {
  return op == Op::ReduceSum || op == Op::ReduceMax;
}

std::vector<int> llmc::kir::computePhases(const Kernel &kernel,
                                          int &numReductionPasses) {
  std::vector<int> phases(kernel.body.size(), 0);
  numReductionPasses = 0;
  for (size_t i = 0; i < kernel.body.size(); ++i) {
    const Instr &instr = kernel.body[i];
    int phase = 0;
    for (int32_t arg : instr.args)
      if (arg >= 0)
        phase = std::max(phase, phases[arg]);
    if (isReduction(instr.op))
      numReductionPasses = std::max(numReductionPasses, ++phase);
    phases[i] = phase;
  }
  return phases;
}

llvm::BitVector llmc::kir::columnClosure(const Kernel &kernel,
                                         llvm::ArrayRef<Level> levels,
                                         llvm::ArrayRef<int32_t> roots) {
  llvm::BitVector needed(kernel.body.size());
  llvm::SmallVector<int32_t> stack(roots.begin(), roots.end());
  while (!stack.empty()) {
    int32_t value = stack.pop_back_val();
    if (value < 0 || levels[value] != Level::Column || needed[value])
      continue;
    needed.set(value);
    for (int32_t arg : kernel.body[value].args)
      stack.push_back(arg);
  }
  return needed;
}

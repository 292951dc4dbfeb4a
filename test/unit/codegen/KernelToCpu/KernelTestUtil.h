// Building kernel IR by hand and running it compiled, for the CPU tests.
#ifndef LLMC_TEST_UNIT_CODEGEN_KERNELTOCPU_KERNELTESTUTIL_H
#define LLMC_TEST_UNIT_CODEGEN_KERNELTOCPU_KERNELTESTUTIL_H

#include "ir/kernel/KernelIR.h"
#include "codegen/KernelToCpu/KernelToCpu.h"
#include "runtime/Cpu/CpuKernels.h"

#include <gtest/gtest.h>

#include <map>
#include <memory>
#include <string>
#include <vector>

namespace llmc::test {

/// Appends instructions to a kernel; each returns the value it defines.
struct KernelBuilder {
  kir::Kernel kernel;

  KernelBuilder(std::string name, std::vector<int64_t> domain) {
    kernel.name = std::move(name);
    kernel.domain = std::move(domain);
  }
  int operand(int32_t buffer, kir::DType dtype, std::vector<int64_t> strides,
              int64_t offset = 0) {
    kernel.operands.push_back({buffer, dtype, offset, std::move(strides)});
    return kernel.operands.size() - 1;
  }
  int32_t add(kir::Instr instr) {
    kernel.body.push_back(std::move(instr));
    return kernel.body.size() - 1;
  }
  int32_t load(int operand, std::vector<int32_t> overrides = {}) {
    kir::Instr instr;
    instr.op = kir::Op::Load;
    instr.type = kir::computeType(kernel.operands[operand].dtype);
    instr.operand = operand;
    instr.args = std::move(overrides);
    return add(instr);
  }
  int32_t constant(float value) {
    kir::Instr instr;
    instr.op = kir::Op::Const;
    instr.type = kir::DType::F32;
    instr.imm = value;
    return add(instr);
  }
  int32_t intConstant(int64_t value) {
    kir::Instr instr;
    instr.op = kir::Op::Const;
    instr.type = kir::DType::I64;
    instr.imm = double(value);
    return add(instr);
  }
  int32_t index(int32_t dim) {
    kir::Instr instr;
    instr.op = kir::Op::Index;
    instr.type = kir::DType::I64;
    instr.dim = dim;
    return add(instr);
  }
  kir::DType type(int32_t value) const { return kernel.body[value].type; }
  int32_t unary(kir::Op op, int32_t x) {
    kir::Instr instr;
    instr.op = op;
    instr.type = op == kir::Op::IToF ? kir::DType::F32 : type(x);
    instr.args = {x};
    return add(instr);
  }
  int32_t binary(kir::Op op, int32_t x, int32_t y) {
    kir::Instr instr;
    instr.op = op;
    bool compare = op == kir::Op::CmpLt || op == kir::Op::CmpLe ||
                   op == kir::Op::CmpEq;
    instr.type = compare ? kir::DType::I1 : type(x);
    instr.args = {x, y};
    return add(instr);
  }
  int32_t select(int32_t condition, int32_t x, int32_t y) {
    kir::Instr instr;
    instr.op = kir::Op::Select;
    instr.type = type(x);
    instr.args = {condition, x, y};
    return add(instr);
  }
  /// `overrides`: none, or one index per domain dim (-1 keeps it): a
  /// scatter.
  void store(int operand, int32_t value,
             std::vector<int32_t> overrides = {}) {
    kir::Instr instr;
    instr.op = kir::Op::Store;
    instr.operand = operand;
    instr.args = {value};
    instr.args.insert(instr.args.end(), overrides.begin(), overrides.end());
    add(instr);
  }
};

/// Kernels compiled for the host and linked; false if either step failed
/// (the failure is reported to gtest).
struct Compiled {
  std::unique_ptr<cpu::CpuKernels> kernels;
  std::map<std::string, cpu::CpuKernelFn> functions;

  explicit operator bool() const { return kernels != nullptr; }
  void run(const std::string &name, std::vector<void *> operands,
           int64_t rowBegin, int64_t rowEnd) const {
    functions.at(name)(operands.data(), rowBegin, rowEnd);
  }
};

inline Compiled compileKernels(const std::vector<kir::Kernel> &kernels,
                               const cpu::CpuTargetOptions &options = {}) {
  Compiled compiled;
  for (const kir::Kernel &kernel : kernels) {
    std::string problem = kir::verifyKernel(kernel);
    if (!problem.empty()) {
      ADD_FAILURE() << problem;
      return compiled;
    }
  }
  auto object = cpu::compileKernelsToObject(kernels, options);
  if (!object) {
    ADD_FAILURE() << llvm::toString(object.takeError());
    return compiled;
  }
  auto loaded = cpu::CpuKernels::load(*object);
  if (!loaded) {
    ADD_FAILURE() << llvm::toString(loaded.takeError());
    return compiled;
  }
  for (const kir::Kernel &kernel : kernels) {
    auto function = (*loaded)->lookup(kernel.name);
    if (!function) {
      ADD_FAILURE() << llvm::toString(function.takeError());
      return compiled;
    }
    compiled.functions[kernel.name] = *function;
  }
  compiled.kernels = std::move(*loaded);
  return compiled;
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_KERNELTOCPU_KERNELTESTUTIL_H

// A double-precision reference interpreter of llmc functions, for the
// gradient tests: every forward and backward op written plainly from its
// definition in ir/LlmcOps.td, independent of code generation and of the
// VJP rules.
#ifndef LLMC_TEST_UNIT_PASSES_INTERPRETER_H
#define LLMC_TEST_UNIT_PASSES_INTERPRETER_H

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "llvm/ADT/ArrayRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <vector>

namespace llmc::test {

/// A row-major tensor of doubles. Ids (i32/i64 tensors) hold exact integers.
/// Every float type (f32, f16, bf16) is computed in double: the interpreter
/// does not model storage rounding, so `llmc.cast` is the identity.
struct Tensor {
  std::vector<int64_t> shape;
  std::vector<double> data;

  static Tensor zeros(std::vector<int64_t> shape);
  int64_t numel() const { return static_cast<int64_t>(data.size()); }
};

/// The run seed and step that the runtime would supply in the `rng` buffer;
/// dropout masks are a function of them, the stream and the element index.
struct RngState {
  uint64_t seed = 0;
  uint64_t step = 0;
};

/// Philox4x32-10 as the conventions of issue 4 define the kir Random op:
/// key {lo32(key), hi32(key)}, counter {lo32(counterLow), hi32(counterLow),
/// lo32(counterHigh), hi32(counterHigh)}, result (word 0 >> 8) * 2^-24.
double philoxUniform(uint64_t key, uint64_t counterHigh, uint64_t counterLow);

/// Runs `func` (a single block of llmc ops) on one tensor per argument and
/// returns its results. Fails with a message naming the op it cannot run.
llvm::Expected<std::vector<Tensor>>
interpret(mlir::func::FuncOp func, llvm::ArrayRef<Tensor> args,
          RngState rng = {});

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_PASSES_INTERPRETER_H

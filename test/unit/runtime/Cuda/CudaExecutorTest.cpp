// The CUDA executor where there is no GPU: creation fails with an error
// that says the driver is missing (these tests run on machines without
// one; on a GPU machine they are skipped).
#include "codegen/KernelToCuda/CudaCompiler.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaExecutor.h"

#include "gtest/gtest.h"

using namespace llmc;

namespace {

/// The smallest valid program: one kernel copying an input to an output.
kir::Program copyProgram() {
  kir::Program program;
  program.function = "forward";
  kir::Buffer input;
  input.name = "x";
  input.kind = kir::BufferKind::Input;
  input.shape = {4};
  kir::Buffer output;
  output.name = "y";
  output.kind = kir::BufferKind::Arena;
  output.shape = {4};
  output.offset = 0;
  program.buffers = {input, output};
  program.inputs = {{"x", 0}};
  program.outputs = {{"y", 1}};
  program.arenaBytes = 16;
  kir::Kernel kernel;
  kernel.name = "copy";
  kernel.domain = {4};
  kernel.operands = {{0, kir::DType::F32, 0, {1}}, {1, kir::DType::F32, 0, {1}}};
  kir::Instr load;
  load.op = kir::Op::Load;
  load.operand = 0;
  kir::Instr store;
  store.op = kir::Op::Store;
  store.operand = 1;
  store.args = {0};
  kernel.body = {load, store};
  program.kernels = {kernel};
  kir::Step step;
  step.kind = kir::StepKind::Kernel;
  step.kernel = 0;
  program.steps = {step};
  return program;
}

bool haveDriver() {
  llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver();
  if (driver)
    return true;
  llvm::consumeError(driver.takeError());
  return false;
}

TEST(CudaExecutorTest, CreationWithoutDriverSaysSo) {
  if (haveDriver())
    GTEST_SKIP() << "this machine has a CUDA driver";
  llvm::Expected<std::unique_ptr<runtime::CudaExecutor>> executor =
      runtime::CudaExecutor::create(copyProgram(), cuda::cudaCompiler());
  ASSERT_FALSE(bool(executor));
  std::string message = llvm::toString(executor.takeError());
  EXPECT_NE(message.find("no CUDA driver (libcuda.so.1) on this machine"),
            std::string::npos)
      << message;
}

TEST(CudaExecutorTest, StoreWithoutDriverSaysSo) {
  if (haveDriver())
    GTEST_SKIP() << "this machine has a CUDA driver";
  auto store = runtime::CudaPersistentStore::create();
  ASSERT_FALSE(bool(store));
  EXPECT_NE(llvm::toString(store.takeError()).find("no CUDA driver"),
            std::string::npos);
}

TEST(CudaExecutorTest, DriverErrorIsStable) {
  // The driver is loaded once per process: a second attempt gives the same
  // answer without retrying dlopen.
  bool first = haveDriver(), second = haveDriver();
  EXPECT_EQ(first, second);
}

} // namespace

// The memory a run needs and the refusal when it cannot fit.
#include "runtime/Exec/MemoryBudget.h"

#include "ir/kernel/Program.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

using namespace llmc;
using ::testing::HasSubstr;

namespace {

kir::Program program(int64_t arena, int64_t wteRows, const char *state) {
  kir::Program p;
  p.arenaBytes = arena;
  kir::Buffer wte;
  wte.name = "wte";
  wte.kind = kir::BufferKind::Param;
  wte.shape = {wteRows, 4};
  kir::Buffer moment = wte;
  moment.name = state;
  moment.kind = kir::BufferKind::State;
  kir::Buffer tokens;
  tokens.name = "tokens";
  tokens.kind = kir::BufferKind::Input;
  tokens.dtype = kir::DType::I32;
  tokens.shape = {2, 8};
  p.buffers = {wte, moment, tokens};
  return p;
}

TEST(MemoryBudget, PersistentTensorsCountOncePerName) {
  kir::Program grad = program(1000, 16, "grad.wte"),
               update = program(24, 16, "adam.m.wte");
  runtime::MemoryNeed need = runtime::memoryNeed({&grad, &update});
  EXPECT_EQ(need.persistentBytes, 3 * 16 * 4 * 4); // wte, grad, moment
  EXPECT_EQ(need.arenaBytes, 1024);
  EXPECT_EQ(need.inputBytes, 2 * 2 * 8 * 4);
  EXPECT_EQ(need.total(), 768 + 1024 + 128);
}

TEST(MemoryBudget, RefusesWithBothFiguresAndAdvice) {
  runtime::MemoryNeed need{int64_t(3) << 40, int64_t(5) << 30, 512};
  runtime::AvailableMemory available{int64_t(16) << 30, "MemAvailable"};
  EXPECT_FALSE(bool(runtime::checkMemoryFits(need, {need.total(), "x"},
                                             "the training step", true)));
  std::string message = llvm::toString(
      runtime::checkMemoryFits(need, available, "the training step", true));
  EXPECT_EQ(message,
            "the training step needs 3.00 TiB of memory (parameters and state "
            "3.00 TiB, activations and temporaries 5.00 GiB, inputs 512 "
            "bytes) but 16.00 GiB is available (MemAvailable); no kernel was "
            "compiled. To fit: ZeRO sharding over more ranks (parallel.zero) "
            "or a smaller model shrinks the parameters, gradients and "
            "optimizer state; a smaller micro-batch or sequence length, "
            "activation checkpointing (--remat selective or full) or "
            "--precision bf16 shrinks the activations");
  // Activations first when they dominate; a forward gets forward advice.
  need = {int64_t(1) << 30, int64_t(2) << 40, 0};
  EXPECT_THAT(llvm::toString(runtime::checkMemoryFits(need, available,
                                                       "step", true)),
              HasSubstr("To fit: a smaller micro-batch"));
  EXPECT_THAT(llvm::toString(runtime::checkMemoryFits(need, available,
                                                       "running m.llmc", false)),
              HasSubstr("To fit: a smaller batch or sequence length (llmc "
                        "compile --batch, --seq-len)"));
}

TEST(MemoryBudget, HostMemoryIsKnownOnLinux) {
  std::optional<runtime::AvailableMemory> available =
      runtime::availableHostMemory();
  ASSERT_TRUE(available.has_value());
  EXPECT_GT(available->bytes, 0);
  EXPECT_FALSE(available->source.empty());
}

} // namespace

// Runs a kir::Program on the CPU: inputs and the one arena in host memory,
// parameters and state in a PersistentStore shared with other executors;
// kernel steps through JIT-compiled kernels split by rows over a thread
// pool (chunks dealt to whichever thread asks; small loops on the caller
// alone); GEMMs through BLAS (single-threaded library calls on chunks of
// rows or columns, a row chunk's epilogue run on it while it is in cache);
// attention and its gradient through BLAS products and a masked softmax;
// embedding gradients by a deterministic per-row scatter-add. f16/bf16
// GEMM operands and attention heads are computed in f32 from per-thread
// staging copies, outside the arena (Executor.cpp).
#ifndef LLMC_RUNTIME_EXECUTOR_H
#define LLMC_RUNTIME_EXECUTOR_H

#include "ir/kernel/Program.h"
#include "runtime/Cpu/KernelCache.h"
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Cpu/SparseMatmul.h"
#include "runtime/Cpu/ThreadPool.h"
#include "runtime/Exec/Executor.h"
#include "runtime/Exec/PersistentStore.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/Error.h"

#include <map>
#include <memory>
#include <optional>
#include <vector>

namespace llmc::runtime {

/// A JIT-compiled kernel: runs rows [rowBegin, rowEnd) of its domain with
/// `operands[i]` the base address of operand i's buffer.
using cpu::CpuKernelFn;

/// Time spent per kind of step, accumulated over runs while profiling.
struct StepProfile {
  double kernelSeconds = 0, gemmSeconds = 0, attentionSeconds = 0;
  double attentionGradSeconds = 0, embeddingGradSeconds = 0;
  std::vector<double> stepSeconds; // per program step, summed over runs
  /// Per program step, the fastest of the runs: on a machine shared with
  /// other work a run's time includes waits for a descheduled thread, so
  /// the best run is the step's own cost.
  std::vector<double> stepBestSeconds;
  int64_t runs = 0;
};

class CpuExecutor : public Executor {
public:
  /// `kernels[i]` runs program.kernels[i]. `numThreads` <= 0: the CPUs
  /// this process may use (runtime/Exec/CpuBudget.h). Param and State buffers are bound by name to `store`
  /// (created zero-filled there if new; a dtype or shape that differs from
  /// the store's tensor is an error); null: a store of its own.
  static llvm::Expected<std::unique_ptr<CpuExecutor>>
  create(kir::Program program, std::vector<CpuKernelFn> kernels,
         int numThreads = 0, std::shared_ptr<PersistentStore> store = nullptr);
  ~CpuExecutor();

  const kir::Program &program() const override { return prog; }
  int numThreads() const { return pool.size(); }
  const std::shared_ptr<PersistentStore> &store() const { return persistent; }

  /// Copies a parameter, state or input in. The name, shape and dtype must
  /// match the program's; the error says which tensor differs and how.
  llvm::Error setTensor(llvm::StringRef name, const HostTensor &tensor) override;
  /// Hands `fill` the store's memory of a parameter or state.
  llvm::Error
  writeTensor(llvm::StringRef name,
              llvm::function_ref<void(llvm::MutableArrayRef<char>)> fill)
      override;
  /// Sets the `rng` input (seed, step) of a program with random ops; does
  /// nothing for a program without.
  void setRng(uint64_t seed, uint64_t step) override;

  llvm::Error setMesh(const Mesh &mesh) override;
  CollectiveStats collectiveStats() const override { return collectives; }
  void describeMemory(MemoryLedger &ledger,
                      llvm::StringRef label) const override;

  /// Runs the schedule once. Fails (before running anything) if an input
  /// id lies outside the table it indexes. Collectives run on the mesh's
  /// communicators while the steps between their start and wait compute.
  llvm::Error run() override;

  /// An output (loss, logits) or any buffer named by a binding (params,
  /// states, inputs), as stored.
  llvm::Expected<HostTensor> output(llvm::StringRef name) const override;

  /// Runs once with the arena filled with a canary pattern and returns the
  /// highest arena byte the run wrote, plus one: the measured high-water
  /// mark, to compare with the planned peak (Program::arenaBytes).
  llvm::Expected<int64_t> measureArenaHighWater();

  /// Whether some step writes a parameter (a training step's update); an
  /// inference program's do not, so its parameters may be read-only memory.
  bool writesParameters() const { return writesParams; }

  void setProfiling(bool enabled) { profiling = enabled; }
  /// The f32 GEMM libraries this executor multiplies with: the process's
  /// (cpu::sgemmSetup(), LLMC_CPU_SGEMM) unless a benchmark sets others to
  /// compare them.
  void setSgemmLibraries(const cpu::SgemmSetup &libraries) {
    sgemmLibs = libraries;
  }
  const StepProfile &profile() const { return stepProfile; }

  /// GEMM steps marked kir::GemmStep::sparseWeight whose weight is 2:4 run
  /// the 2:4 kernels (runtime/Cpu/SparseMatmul.h, on `cpuIsa()`) when
  /// they have at most this many rows (batch * m); above it, the dense
  /// BLAS product, which is faster there. 0: never. The default is the
  /// crossover bench-sparse measures (docs/sparsity.md, bench/README.md).
  static constexpr int64_t kDefaultSparseMaxRows = 16;
  void setSparseMaxRows(int64_t rows) { sparseMaxRows = rows; }
  /// The instruction set of the executor's hand-vectorized products (2:4,
  /// few-row, attention's tiles).
  cpu::CpuIsa cpuIsa() const { return isa; }
  /// How a packed weight stores its kept values. Auto: bf16 when every
  /// kept value is a bf16 exactly (weights loaded from a bf16 file: no
  /// loss, half the value bytes), f32 otherwise. F32, BF16: always; BF16
  /// rounds f32 values to nearest even, which changes the products (the
  /// docs/sparsity.md gives the effect on GPT-2's logits). Set before the
  /// first run.
  enum class SparseValuesMode : uint8_t { Auto, F32, BF16 };
  void setSparseValues(SparseValuesMode mode) { sparseValuesMode = mode; }
  /// What the 2:4 path did: weights found 2:4 (packed) and not, and the
  /// GEMM steps run from a packed weight, since the executor was created.
  struct SparseStats {
    int64_t packedWeights = 0, denseWeights = 0, sparseSteps = 0;
    int64_t bf16Weights = 0; // packed with bf16 values
    int64_t packedBytes = 0, denseBytes = 0; // of the packed weights
  };
  const SparseStats &sparseStats() const { return sparse; }
  /// GEMM steps run by the few-row kernel (runtime/Cpu/FewRowGemm.h).
  int64_t fewRowGemmSteps() const { return fewRowSteps; }
  std::string sparseSummary() const override;

private:
  CpuExecutor(kir::Program program, std::vector<CpuKernelFn> kernels,
              int numThreads, std::shared_ptr<PersistentStore> store);
  llvm::Error bindBuffers();
  char *base(int32_t buffer) const { return bases[buffer]; }
  /// fn over [0, n) on the pool, or on this thread alone when `small`
  /// (below the work where one thread is faster: CpuExecutor.cpp).
  void forChunks(int64_t n, bool small, const ThreadPool::LoopBody &fn);
  void runKernel(int32_t kernel);
  void runGemm(const kir::GemmStep &gemm);
  /// A GEMM with an f16/bf16 operand or result: tiles through f32 staging.
  void runNarrowGemm(const kir::GemmStep &gemm);
  void stagedNarrowGemm(const kir::GemmStep &gemm, int64_t aM, int64_t aK,
                        int64_t bK, int64_t bN);
  /// runFewRowGemm's product when `gemm` is one it takes (f32 A of
  /// at most kFewRowGemmMaxRows rows, f32, bf16 or f16 B, f32 C); false
  /// otherwise.
  bool runFewRowGemm(const kir::GemmStep &gemm);
  /// The GEMM step's epilogue kernel, if any, over its batch * m rows split
  /// over the threads (after a product that split the columns).
  void runEpilogueByRows(const kir::GemmStep &gemm);
  /// The 2:4 copy of a sparseWeight step's B when it is 2:4 and the step
  /// should use it; packed on first use and again after the store is
  /// written (a new load, or a training step).
  const cpu::PackedTwoOfFour *sparseWeightOf(const kir::GemmStep &gemm);
  void runAttention(const kir::AttentionStep &attention);
  void runAttentionGrad(const kir::AttentionGradStep &grad);
  void runEmbeddingGrad(const kir::EmbeddingGradStep &grad);
  llvm::Error checkIds() const;

  friend llvm::Expected<std::unique_ptr<CpuExecutor>>
  createCpuExecutor(kir::Program, cpu::CompileObjectFn, int, cpu::CacheStats *,
                    const cpu::KernelCacheOptions &,
                    std::shared_ptr<PersistentStore>);

  kir::Program prog;
  // Keeps kernelFns alive when they were JIT-linked (createCpuExecutor);
  // shared, so that this class's code never names ~CpuKernels (LLVM ORC)
  // and links into exported binaries without it.
  std::shared_ptr<cpu::CpuKernels> code;
  std::vector<CpuKernelFn> kernelFns;
  ThreadPool pool;
  std::shared_ptr<PersistentStore> persistent; // Param and State buffers
  char *arena = nullptr;
  std::vector<char *> owned;  // input allocations
  std::vector<char *> bases;  // per buffer: where element 0 lives
  std::vector<std::vector<void *>> kernelOperands; // per kernel: its bases
  // Per thread: attention scores and packed K and V, f32 staging of
  // f16/bf16 operands.
  std::vector<std::vector<float>> scratch;
  // stagedNarrowGemm's operand block shared by the threads (and its f32
  // sums of a narrow C when K is blocked).
  std::vector<float> narrowStage;
  bool profiling = false;
  StepProfile stepProfile;
  Mesh mesh;
  std::vector<comm::Ticket> tickets; // per CollectiveStart step
  CollectiveStats collectives;
  // 2:4: packed weights by (B's buffer, offset), each with the store's
  // write count it was read at; none when the weight is not 2:4.
  struct PackedWeight {
    std::optional<cpu::PackedTwoOfFour> packed;
    uint64_t writeCount = 0;
    bool checked = false;
  };
  std::map<std::pair<int32_t, int64_t>, PackedWeight> packedWeights;
  int64_t sparseMaxRows = kDefaultSparseMaxRows;
  SparseValuesMode sparseValuesMode = SparseValuesMode::Auto;
  cpu::CpuIsa isa;
  cpu::SgemmSetup sgemmLibs; // f32 GEMM libraries (cpu::sgemmSetup())
  bool writesParams = false; // some step writes a Param
  SparseStats sparse;
  int64_t fewRowSteps = 0; // GEMM steps run by runFewRowGemm
};

/// Loads the program's kernels from the kernel cache, or compiles them with
/// `compile` (codegen's compileKernelsToObject; the runtime has no MLIR),
/// links them and creates an executor (`store` as in CpuExecutor::create).
/// Defined in runtime/Cpu/JitExecutor.cpp (library LlmcRuntime), apart from
/// the executor (LlmcRuntimeCore), which exported binaries link without ORC.
llvm::Expected<std::unique_ptr<CpuExecutor>>
createCpuExecutor(kir::Program program, cpu::CompileObjectFn compile,
                  int numThreads = 0, cpu::CacheStats *stats = nullptr,
                  const cpu::KernelCacheOptions &cache = {},
                  std::shared_ptr<PersistentStore> store = nullptr);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_EXECUTOR_H

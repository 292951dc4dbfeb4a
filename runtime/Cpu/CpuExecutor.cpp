// The CPU executor: buffers, kernel launches over the thread pool, BLAS
// GEMMs with their epilogues, attention (its per-head products on
// register tiles, runtime/Cpu/TileGemm.h).
//
// f16/bf16 library steps compute in f32, as the CUDA backend does on
// tensor cores: narrow GEMM operands and attention heads are widened into
// per-thread staging buffers, multiplied in f32, and narrow results
// rounded back to nearest even (runtime/Cpu/LowPrecision.h). The staging
// buffers are the executor's scratch (`scratch`, like attention's scores,
// and `narrowStage`), not tensors of the program: they live outside the
// arena, so the arena's measured high-water mark still equals the planned
// peak, and they are cache-sized (a GEMM's blocks of at most 8 MiB shared
// and 2 MiB a thread, one head of attention per thread).
#include "runtime/Cpu/CpuExecutor.h"
#include "runtime/Cpu/Bf16Gemm.h"
#include "runtime/Cpu/FewRowGemm.h"
#include "runtime/Cpu/LowPrecision.h"
#include "runtime/Cpu/Sgemm.h"
#include "runtime/Cpu/SignalMask.h"
#include "runtime/Cpu/TileGemm.h"
#include "runtime/Cpu/VectorExp.h"
#include "runtime/Exec/HostMemory.h"
#include "runtime/Exec/MemoryReport.h"
#include "runtime/Weights/Sparsity.h"

#include "llvm/Support/FormatVariadic.h"

#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>

using namespace llmc;
using namespace llmc::runtime;
using kir::BufferKind;

namespace {

/// One operand of a BLAS call: element (row i, column j) of the logical
/// (possibly transposed) matrix is at data[i * rowStride + j * colStride].
struct Matrix {
  float *data;
  int64_t rowStride, colStride;
};

/// Products with every side at most this (a small model's GEMM steps) run
/// on OpenBLAS whatever the GEMM library: at 64 x 64 x 64 on one thread
/// OpenBLAS is faster in every layout, oneDNN's per-call cost being higher.
constexpr int64_t kSmallGemm = 128;

/// Loops smaller than these run on the calling thread alone: below them
/// handing the loop to the pool and waiting for its chunks costs more
/// than the threads save, and on a busy machine the caller alone also never
/// waits for a thread that lost its core. Two measures, since a product
/// does far more arithmetic per element than a fused elementwise kernel:
/// elements for kernels (and epilogues, staging, scatter-adds),
/// multiply-adds times two for products. Each is a power of two at which
/// one thread's time for the loop is several times the pool's cost of a
/// loop (the hand-out and the wait that ThreadPoolTests' loops and
/// bench-threads time), so the split wins where both cores are free; above
/// the old elementwise threshold, since a batch-1 decode step of a small
/// model ran faster on one thread than on two. bench-threads prints where
/// the pool starts to win on a machine (bench/README.md: on a loaded one,
/// only at far larger sizes, which is what the pool's stall detection in
/// ThreadPool.h is for).
constexpr int64_t kSerialElements = int64_t(1) << 14;
constexpr int64_t kSerialFlops = int64_t(1) << 21;

/// A GEMM split over the pool packs the operand it does not split once per
/// chunk: chunks of at least this many rows or columns, and at most two
/// per thread, keep the repacking a small part of each chunk's product.
constexpr int64_t kMinGemmChunk = 64;
constexpr int64_t kGemmChunksPerThread = 2;

/// C[m x n] = alpha A[m x k] * B[k x n] + beta C on row-major storage for
/// matrices given by strides, one of which is 1 for each, on the calling
/// thread: one row on BLAS's GEMV, small products (kSmallGemm) on
/// OpenBLAS, else on the f32 GEMM library of `libs` (runtime/Cpu/Sgemm.h).
void sgemm(const cpu::SgemmSetup &libs, int64_t m, int64_t n, int64_t k,
           Matrix a, Matrix b, float *c, int64_t ldc, float alpha = 1.0f,
           float beta = 0.0f) {
  if (m == 1) {
    // One row: a matrix-vector product. OpenBLAS's GEMM repacks the whole
    // of B for it and runs several times slower than its GEMV
    // (bench/sgemm-peers, M = 1).
    if (b.colStride == 1) // B row-major [k, n]: c = B^T a
      cblas_sgemv(CblasRowMajor, CblasTrans, k, n, alpha, b.data,
                  std::max(b.rowStride, n), a.data, a.colStride, beta, c, 1);
    else // B stored as [n, k] (a weight): c = W a
      cblas_sgemv(CblasRowMajor, CblasNoTrans, n, k, alpha, b.data,
                  b.colStride, a.data, a.colStride, beta, c, 1);
    return;
  }
  // Row-major with unit column stride: no transpose; otherwise the
  // transpose of a row-major matrix.
  auto layout = [](const Matrix &x, int64_t cols) {
    if (x.colStride == 1)
      return std::make_pair(false, std::max(x.rowStride, cols));
    return std::make_pair(true, x.colStride);
  };
  auto [transA, lda] = layout(a, k);
  auto [transB, ldb] = layout(b, n);
  bool small = m <= kSmallGemm && n <= kSmallGemm && k <= kSmallGemm;
  cpu::sgemm(small ? cpu::SgemmLibrary::OpenBlas : libs.library, transA,
             transB, m, n, k, alpha, a.data, lda, b.data, ldb, beta, c, ldc);
}

/// Block [r0, r0 + rows) x [c0, c0 + cols) of the matrix whose element
/// (r, c) is element r * rowStride + c * colStride of `data` (of `type`;
/// one stride is 1), as an f32 Matrix: in place for f32, else widened
/// into `staging` (rows * cols floats) in the layout it is stored in.
Matrix stageBlock(kir::DType type, char *data, int64_t rowStride,
                  int64_t colStride, int64_t r0, int64_t c0, int64_t rows,
                  int64_t cols, float *staging) {
  int64_t first = r0 * rowStride + c0 * colStride;
  if (type == kir::DType::F32)
    return {reinterpret_cast<float *>(data) + first, rowStride, colStride};
  int64_t bytes = kir::dtypeBytes(type);
  if (colStride == 1) {
    for (int64_t r = 0; r < rows; ++r)
      cpu::widenToFloat(type, data + (first + r * rowStride) * bytes, cols,
                        staging + r * cols);
    return {staging, cols, 1};
  }
  for (int64_t c = 0; c < cols; ++c)
    cpu::widenToFloat(type, data + (first + c * colStride) * bytes, rows,
                      staging + c * rows);
  return {staging, 1, rows};
}

/// Head (b, h) of an attention view [batch, heads, seq, headDim] with a
/// unit headDim stride, `rows` x `cols`, as an f32 matrix (data, row
/// stride): in place for f32; else `staging` (rows x cols, contiguous),
/// filled with the widened head when `load`.
std::pair<float *, int64_t> headMatrix(char *data, kir::DType type,
                                       const kir::View &view, int64_t b,
                                       int64_t h, int64_t rows, int64_t cols,
                                       float *staging, bool load) {
  int64_t first = view.offset + b * view.strides[0] + h * view.strides[1];
  if (type == kir::DType::F32)
    return {reinterpret_cast<float *>(data) + first, view.strides[2]};
  if (load)
    for (int64_t t = 0; t < rows; ++t)
      cpu::widenToFloat(type,
                        data + (first + t * view.strides[2]) *
                                   kir::dtypeBytes(type),
                        cols, staging + t * cols);
  return {staging, cols};
}

/// Rounds a staged head (headMatrix of a narrow view) back into the view.
void storeHead(char *data, kir::DType type, const kir::View &view, int64_t b,
               int64_t h, int64_t rows, int64_t cols, const float *staging) {
  if (type == kir::DType::F32)
    return;
  int64_t first = view.offset + b * view.strides[0] + h * view.strides[1];
  for (int64_t t = 0; t < rows; ++t)
    cpu::narrowFromFloat(type, staging + t * cols, cols,
                         data + (first + t * view.strides[2]) *
                                    kir::dtypeBytes(type));
}

} // namespace

CpuExecutor::CpuExecutor(kir::Program program, std::vector<CpuKernelFn> kernels,
                         int numThreads, std::shared_ptr<PersistentStore> store)
    : prog(std::move(program)), kernelFns(std::move(kernels)), pool(numThreads),
      persistent(std::move(store)), isa(cpu::bestCpuIsa()) {
  // Our threads split the work; BLAS must not start threads of its own.
  openblas_set_num_threads(1);
  if (!persistent)
    persistent = std::make_shared<PersistentStore>();
  arena = allocateHostMemory(prog.arenaBytes);
  scratch.resize(pool.size());
}

llvm::Error CpuExecutor::bindBuffers() {
  if (!arena)
    return llvm::createStringError("cannot allocate the " +
                                   llvm::Twine(prog.arenaBytes) +
                                   "-byte arena of the program");
  bases.resize(prog.buffers.size(), nullptr);
  for (auto [index, buffer] : llvm::enumerate(prog.buffers)) {
    if (buffer.kind == BufferKind::Arena) {
      bases[index] = arena + buffer.offset;
    } else if (kir::isPersistent(buffer.kind)) {
      llvm::Expected<char *> memory =
          persistent->bind(buffer.name, buffer.dtype, buffer.shape,
                           buffer.initialValue);
      if (!memory)
        return memory.takeError();
      bases[index] = *memory;
    } else {
      char *memory = allocateHostMemory(buffer.bytes());
      if (!memory)
        return llvm::createStringError("cannot allocate " +
                                       llvm::Twine(buffer.bytes()) +
                                       " bytes for input '" + buffer.name +
                                       "'");
      std::memset(memory, 0, buffer.bytes());
      owned.push_back(memory);
      bases[index] = memory;
    }
  }
  // Operand base addresses never change: computed once, not per launch.
  for (const kir::Kernel &kernel : prog.kernels) {
    std::vector<void *> &operands = kernelOperands.emplace_back();
    for (const kir::Access &access : kernel.operands)
      operands.push_back(base(access.buffer));
  }
  // Whether a run writes parameters (an update step): then it tells the
  // store, whose write count the 2:4 copies of weights are checked by.
  // States (a KV cache, optimizer moments) change every run and are never
  // packed, so their writes do not count.
  auto paramBuffer = [&](int32_t buffer) {
    return prog.buffers[buffer].kind == kir::BufferKind::Param;
  };
  for (const kir::Step &step : prog.steps) {
    if (step.kind == kir::StepKind::Kernel) {
      const kir::Kernel &kernel = prog.kernels[step.kernel];
      for (const kir::Instr &instr : kernel.body)
        if (instr.op == kir::Op::Store &&
            paramBuffer(kernel.operands[instr.operand].buffer))
          writesParams = true;
    }
    kir::forEachView(step, [&](const char *, const kir::View &view,
                               kir::ViewRole role, const auto &) {
      if (role != kir::ViewRole::Read && paramBuffer(view.buffer))
        writesParams = true;
    });
  }
  return llvm::Error::success();
}

void CpuExecutor::describeMemory(MemoryLedger &ledger,
                                 llvm::StringRef label) const {
  using Source = MemoryLedger::Source;
  ledger.add("arena: " + label.str(), Source::Planned, arena, prog.arenaBytes);
  for (auto [index, buffer] : llvm::enumerate(prog.buffers))
    if (buffer.kind != BufferKind::Arena && !kir::isPersistent(buffer.kind))
      ledger.add("executor inputs", Source::Malloc, bases[index],
                 buffer.bytes());
  for (const std::vector<float> &buffer : scratch)
    ledger.add("executor scratch (attention scores and packed K and V, "
               "f16/bf16 staging)",
               Source::Malloc, buffer.data(),
               int64_t(buffer.capacity() * sizeof(float)));
  ledger.add("executor scratch (attention scores and packed K and V, "
             "f16/bf16 staging)",
             Source::Malloc, narrowStage.data(),
             int64_t(narrowStage.capacity() * sizeof(float)));
  if (code)
    for (auto [data, bytes] : code->memory())
      ledger.add("JIT code and data", Source::Mapped, data, bytes);
  for (auto [data, bytes] : pool.stacks())
    ledger.add("thread stacks", Source::Mapped, data, bytes);
}

CpuExecutor::~CpuExecutor() {
  std::free(arena);
  for (char *memory : owned)
    std::free(memory);
}

llvm::Expected<std::unique_ptr<CpuExecutor>>
CpuExecutor::create(kir::Program program, std::vector<CpuKernelFn> kernels,
                    int numThreads, std::shared_ptr<PersistentStore> store) {
  std::string error = kir::verifyProgram(program);
  if (!error.empty())
    return llvm::createStringError("invalid program: " + error);
  if (kernels.size() != program.kernels.size())
    return llvm::createStringError(
        llvm::formatv("{0} kernel entry points for {1} kernels",
                      kernels.size(), program.kernels.size()));
  for (auto [index, fn] : llvm::enumerate(kernels))
    if (!fn)
      return llvm::createStringError("no code for kernel '" +
                                     program.kernels[index].name + "'");
  llvm::Expected<const cpu::SgemmSetup &> libs = cpu::sgemmSetup();
  if (!libs)
    return libs.takeError();
  std::unique_ptr<CpuExecutor> executor(new CpuExecutor(
      std::move(program), std::move(kernels), numThreads, std::move(store)));
  executor->sgemmLibs = *libs;
  if (llvm::Error error = executor->bindBuffers())
    return error;
  return executor;
}

llvm::Error CpuExecutor::setTensor(llvm::StringRef name,
                                   const HostTensor &tensor) {
  for (const std::vector<kir::Binding> *list :
       {&prog.params, &prog.states, &prog.inputs})
    for (const kir::Binding &binding : *list) {
      if (binding.name != name)
        continue;
      const kir::Buffer &buffer = prog.buffers[binding.buffer];
      if (tensor.shape != buffer.shape)
        return llvm::createStringError(
            "tensor '" + name + "' has shape " + kir::formatShape(tensor.shape) +
            ", the model expects " + kir::formatShape(buffer.shape));
      if (tensor.dtype != buffer.dtype)
        return llvm::createStringError(
            "tensor '" + name + "' is " + kir::dtypeName(tensor.dtype) +
            ", the model expects " + kir::dtypeName(buffer.dtype));
      std::memcpy(base(binding.buffer), tensor.bytes.data(), buffer.bytes());
      if (buffer.kind == kir::BufferKind::Param)
        persistent->noteWrite();
      return llvm::Error::success();
    }
  return llvm::createStringError(
      "the model has no parameter, state or input '" + name + "'");
}

llvm::Error CpuExecutor::writeTensor(
    llvm::StringRef name,
    llvm::function_ref<void(llvm::MutableArrayRef<char>)> fill) {
  for (const std::vector<kir::Binding> *list : {&prog.params, &prog.states})
    for (const kir::Binding &binding : *list) {
      if (binding.name != name)
        continue;
      const kir::Buffer &buffer = prog.buffers[binding.buffer];
      fill({base(binding.buffer), size_t(buffer.bytes())});
      if (buffer.kind == kir::BufferKind::Param)
        persistent->noteWrite();
      return llvm::Error::success();
    }
  return llvm::createStringError("the model has no parameter or state '" +
                                 name + "'");
}

void CpuExecutor::setRng(uint64_t seed, uint64_t step) {
  for (const kir::Binding &input : prog.inputs)
    if (input.scalar == kir::StepScalar::Rng) {
      auto *words = reinterpret_cast<uint64_t *>(base(input.buffer));
      words[0] = seed;
      words[1] = step;
    }
}

llvm::Expected<HostTensor> CpuExecutor::output(llvm::StringRef name) const {
  for (const std::vector<kir::Binding> *list :
       {&prog.outputs, &prog.params, &prog.states, &prog.inputs})
    for (const kir::Binding &binding : *list) {
      if (binding.name != name)
        continue;
      const kir::Buffer &buffer = prog.buffers[binding.buffer];
      HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
      std::memcpy(tensor.bytes.data(), base(binding.buffer), buffer.bytes());
      return tensor;
    }
  return llvm::createStringError("the program has no output '" + name + "'");
}

llvm::Error CpuExecutor::checkIds() const {
  for (const kir::Binding &input : prog.inputs) {
    const kir::Buffer &buffer = prog.buffers[input.buffer];
    if (buffer.idBound <= 0)
      continue;
    for (int64_t i = 0; i < buffer.numElements(); ++i) {
      int64_t id = buffer.dtype == kir::DType::I32
                       ? reinterpret_cast<const int32_t *>(base(input.buffer))[i]
                       : reinterpret_cast<const int64_t *>(base(input.buffer))[i];
      if (id < 0 || id >= buffer.idBound)
        return llvm::createStringError(llvm::formatv(
            "input '{0}' holds id {1} at position {2}, outside [0, {3})",
            input.name, id, i, buffer.idBound));
    }
  }
  return llvm::Error::success();
}

void CpuExecutor::forChunks(int64_t n, bool small,
                            const ThreadPool::LoopBody &fn) {
  if (small)
    fn(0, n, 0);
  else
    pool.parallelFor(n, fn);
}

void CpuExecutor::runKernel(int32_t index) {
  const kir::Kernel &kernel = prog.kernels[index];
  CpuKernelFn fn = kernelFns[index];
  const std::vector<void *> &operands = kernelOperands[index];
  int64_t rows = kernel.numRows();
  forChunks(rows, rows * kernel.rowLength() < kSerialElements,
            [&](int64_t begin, int64_t end, int) {
              fn(operands.data(), begin, end);
            });
}

const cpu::PackedTwoOfFour *
CpuExecutor::sparseWeightOf(const kir::GemmStep &g) {
  if (!g.sparseWeight || g.batch * g.m > sparseMaxRows ||
      prog.buffers[g.a.buffer].dtype != kir::DType::F32 ||
      prog.buffers[g.c.buffer].dtype != kir::DType::F32 ||
      (g.transA ? g.a.strides[1] : g.a.strides[2]) != 1)
    return nullptr;
  PackedWeight &entry = packedWeights[{g.b.buffer, g.b.offset}];
  uint64_t writes = persistent->writeCount();
  if (!entry.checked || entry.writeCount != writes) {
    // The weight as the GEMM reads it: [n, k] rows at B's row stride.
    const float *w =
        reinterpret_cast<const float *>(base(g.b.buffer)) + g.b.offset;
    // A dense weight fails in its first groups: scan in place before
    // copying, so that it costs no copy (GPT-2's tied classifier is 154 MB).
    auto plainlyDense = [&] {
      if (g.k % 4 != 0)
        return false; // compressTwoOfFour says why
      for (int64_t r = 0; r < g.n; ++r)
        for (int64_t c = 0; c < g.k; c += 4) {
          const float *group = w + r * g.b.strides[1] + c;
          if ((group[0] != 0.0f) + (group[1] != 0.0f) + (group[2] != 0.0f) +
                  (group[3] != 0.0f) >
              2)
            return true;
        }
      return false;
    };
    entry.packed.reset();
    if (!plainlyDense()) {
      std::vector<float> dense(g.n * g.k);
      for (int64_t r = 0; r < g.n; ++r)
        std::copy_n(w + r * g.b.strides[1], g.k, dense.begin() + r * g.k);
      llvm::Expected<CompressedTwoOfFour> compressed = compressTwoOfFour(
          prog.buffers[g.b.buffer].name, dense, g.n, g.k);
      if (compressed)
        entry.packed = cpu::packForCpu(*compressed);
      else
        llvm::consumeError(compressed.takeError()); // not 2:4: dense
    }
    if (entry.packed &&
        (sparseValuesMode == SparseValuesMode::BF16 ||
         (sparseValuesMode == SparseValuesMode::Auto &&
          cpu::exactlyBf16(*entry.packed)))) {
      entry.packed = cpu::toBf16Values(*entry.packed);
      ++sparse.bf16Weights;
    }
    if (entry.packed) {
      ++sparse.packedWeights;
      sparse.packedBytes += entry.packed->bytes();
      sparse.denseBytes += g.n * g.k * int64_t(sizeof(float));
    } else {
      ++sparse.denseWeights;
    }
    entry.writeCount = writes;
    entry.checked = true;
  }
  return entry.packed ? &*entry.packed : nullptr;
}

std::string CpuExecutor::sparseSummary() const {
  int64_t marked = llvm::count_if(prog.steps, [](const kir::Step &step) {
    return step.kind == kir::StepKind::Gemm && step.gemm.sparseWeight;
  });
  if (marked == 0)
    return "";
  return llvm::formatv("2:4 kernels ({0}, up to {1} rows): {2} weights "
                       "packed, {7} of them with bf16 values ({3:f1} of "
                       "{4:f1} MiB), {5} not 2:4, {6} GEMM steps run sparse",
                       cpu::cpuIsaName(isa), sparseMaxRows,
                       sparse.packedWeights, sparse.packedBytes / 1048576.0,
                       sparse.denseBytes / 1048576.0, sparse.denseWeights,
                       sparse.sparseSteps, sparse.bf16Weights)
      .str();
}

void CpuExecutor::runGemm(const kir::GemmStep &g) {
  bool f32 = prog.buffers[g.a.buffer].dtype == kir::DType::F32 &&
             prog.buffers[g.b.buffer].dtype == kir::DType::F32 &&
             prog.buffers[g.c.buffer].dtype == kir::DType::F32;
  // A 2:4 weight runs on the 2:4 kernels; else few rows on fewRowGemm.
  const cpu::PackedTwoOfFour *packed = f32 ? sparseWeightOf(g) : nullptr;
  if (!packed && runFewRowGemm(g))
    return;
  if (!f32)
    return runNarrowGemm(g);
  auto at = [&](const kir::View &view) {
    return reinterpret_cast<float *>(base(view.buffer)) + view.offset;
  };
  CpuKernelFn epilogue = g.epilogue >= 0 ? kernelFns[g.epilogue] : nullptr;
  if (packed) {
    // 2:4: W's rows split over the threads (one x row is a GEMV), then
    // the epilogue by rows.
    int64_t rowStride = g.transA ? g.a.strides[2] : g.a.strides[1];
    forChunks(g.n, g.batch * g.m * g.n * g.k < kSerialFlops,
              [&](int64_t begin, int64_t end, int) {
      for (int64_t batch = 0; batch < g.batch; ++batch)
        cpu::sparseMatmulF32(isa, *packed, at(g.a) + batch * g.a.strides[0],
                             g.m, rowStride,
                             at(g.c) + batch * g.c.strides[0],
                             g.c.strides[1], begin, end);
    });
    ++sparse.sparseSteps;
    runEpilogueByRows(g);
    return;
  }
  // Strides of op(A) [m x k] and op(B) [k x n] from the stored layouts.
  int64_t aM = g.transA ? g.a.strides[2] : g.a.strides[1];
  int64_t aK = g.transA ? g.a.strides[1] : g.a.strides[2];
  int64_t bK = g.transB ? g.b.strides[2] : g.b.strides[1];
  int64_t bN = g.transB ? g.b.strides[1] : g.b.strides[2];
  float *a = at(g.a), *b = at(g.b), *c = at(g.c);
  void *const *epilogueOperands =
      epilogue ? kernelOperands[g.epilogue].data() : nullptr;
  // Accumulating: each block of rows or columns adds into its own block of C.
  float beta = g.accumulate ? 1.0f : 0.0f;

  int64_t rows = g.batch * g.m;
  // Rows of C (over all batches) per thread, the epilogue on each thread's
  // block right after its product; or columns per thread, then the
  // epilogue by rows. Each thread packs its share of the operand it splits
  // and all of the other, so the longer side of C is split: the smaller
  // operand is the one packed twice. Besides:
  // - with few rows (generation), columns: BLAS runs short, wide blocks
  //   faster than shorter ones;
  // - x W^T (NT: the forward's products, W stored [N, K]) by columns
  //   whatever its shape: the transposed operand costs the most to pack.
  // Against rows for every product of 128 rows or more, both rules made
  // GPT-2 124M's products faster with oneDNN (bench-train --gemm-shapes),
  // the NT products most.
  auto rowBlock = [&](int64_t begin, int64_t end, int) {
    for (int64_t batch = begin / g.m; batch * g.m < end; ++batch) {
      int64_t first = std::max(begin, batch * g.m) - batch * g.m;
      int64_t last = std::min(end, (batch + 1) * g.m) - batch * g.m;
      sgemm(sgemmLibs, last - first, g.n, g.k,
            {a + batch * g.a.strides[0] + first * aM, aM, aK},
            {b + batch * g.b.strides[0], bK, bN},
            c + batch * g.c.strides[0] + first * g.c.strides[1],
            g.c.strides[1], 1.0f, beta);
    }
    if (epilogue)
      epilogue(epilogueOperands, begin, end);
  };
  int64_t threads = pool.size();
  if (2 * rows * g.n * g.k < kSerialFlops) {
    rowBlock(0, rows, 0);
    return;
  }
  bool xTimesWt = g.transB && !g.transA;
  bool splitRows = g.n < kMinGemmChunk * threads ||
                   (rows >= kMinGemmChunk * threads && rows >= g.n &&
                    !xTimesWt);
  auto minChunk = [&](int64_t items) {
    return std::max(kMinGemmChunk, items / (kGemmChunksPerThread * threads));
  };
  if (splitRows) {
    pool.parallelFor(rows, rowBlock, minChunk(rows));
    return;
  }
  pool.parallelFor(g.n, [&](int64_t begin, int64_t end, int) {
    for (int64_t batch = 0; batch < g.batch; ++batch)
      sgemm(sgemmLibs, g.m, end - begin, g.k, {a + batch * g.a.strides[0], aM, aK},
            {b + batch * g.b.strides[0] + begin * bN, bK, bN},
            c + batch * g.c.strides[0] + begin, g.c.strides[1], 1.0f, beta);
  }, minChunk(g.n));
  runEpilogueByRows(g);
}

void CpuExecutor::runEpilogueByRows(const kir::GemmStep &g) {
  if (g.epilogue < 0)
    return;
  CpuKernelFn epilogue = kernelFns[g.epilogue];
  void *const *operands = kernelOperands[g.epilogue].data();
  forChunks(g.batch * g.m, g.batch * g.m * g.n < kSerialElements,
            [&](int64_t begin, int64_t end, int) {
              epilogue(operands, begin, end);
            });
}

bool CpuExecutor::runFewRowGemm(const kir::GemmStep &g) {
  // Few rows of f32 A times a B read in place (decode): f32, or bf16 and
  // f16 (llmc export --precision bf16|fp16) widened in registers, never
  // staged. OpenBLAS's f32 GEMM at these shapes reaches under half a
  // core's FMA rate (FewRowGemm.h). Larger products take BLAS, or
  // runNarrowGemm's tiles.
  kir::DType bType = prog.buffers[g.b.buffer].dtype;
  if (g.m > cpu::kFewRowGemmMaxRows || g.transA ||
      prog.buffers[g.a.buffer].dtype != kir::DType::F32 ||
      (bType != kir::DType::F32 && bType != kir::DType::BF16 &&
       bType != kir::DType::F16) ||
      prog.buffers[g.c.buffer].dtype != kir::DType::F32 ||
      g.a.strides[2] != 1 || g.b.strides[2] != 1 || g.c.strides[2] != 1)
    return false;
  auto at = [&](const kir::View &view) {
    return reinterpret_cast<float *>(base(view.buffer)) + view.offset;
  };
  int64_t bBytes = kir::dtypeBytes(bType);
  const char *b = base(g.b.buffer) + g.b.offset * bBytes;
  float *a = at(g.a), *c = at(g.c);
  forChunks(g.n, 2 * g.batch * g.m * g.n * g.k < kSerialFlops,
            [&](int64_t begin, int64_t end, int) {
    for (int64_t batch = 0; batch < g.batch; ++batch)
      cpu::fewRowGemm(isa, bType, a + batch * g.a.strides[0], g.m,
                      g.a.strides[1], b + batch * g.b.strides[0] * bBytes,
                      g.b.strides[1], /*wNK=*/g.transB, g.k,
                      c + batch * g.c.strides[0], g.c.strides[1], begin, end,
                      g.accumulate);
  });
  ++fewRowSteps;
  runEpilogueByRows(g);
  return true;
}

void CpuExecutor::stagedNarrowGemm(const kir::GemmStep &g, int64_t aM,
                                   int64_t aK, int64_t bK, int64_t bN) {
  // Cache-blocked widening around sgemm. The longer of M and N is split
  // into panels, the other operand's block (`shared`, sRows of the shorter
  // dimension x kc) is widened once by all threads into `narrowStage`, and
  // each thread widens one panel at a time (kc x its columns of B, or its
  // rows of A x kc) into its own scratch, which stays in the caches (L2,
  // else L3), and multiplies it at once: one sgemm per panel. Every narrow
  // element is read once from memory and converted once (an accumulated
  // narrow C twice), no widened copy of a whole weight ever goes out to
  // DRAM, and narrow C is rounded per panel while it is still in the
  // cache. K is blocked only when the shared block would not fit otherwise
  // (the vocabulary's dX, k = V): then narrow C is summed in an f32 block
  // over all of K before its one rounding.
  // Sizes chosen on a 2-core Zen 4 (1 MiB L2 a core, 32 MiB L3) at GPT-2
  // 124M's shapes: smaller panels lose to repacking the shared block for
  // each narrow panel, larger ones to cache misses, and in whole bf16
  // steps both, and K blocked at 4096, were slower than these.
  constexpr int64_t kPanelFloats = int64_t(1) << 19;  // 2 MiB a thread
  constexpr int64_t kSharedFloats = int64_t(1) << 21; // 8 MiB, in L3
  constexpr int64_t kMaxK = 1024; // longer K is blocked
  constexpr int64_t kMaxCRows = 1024; // rows of a staged narrow C panel
  kir::DType aType = prog.buffers[g.a.buffer].dtype;
  kir::DType bType = prog.buffers[g.b.buffer].dtype;
  kir::DType cType = prog.buffers[g.c.buffer].dtype;
  int64_t aBytes = kir::dtypeBytes(aType), bBytes = kir::dtypeBytes(bType),
          cBytes = kir::dtypeBytes(cType);
  int64_t ldc = g.c.strides[1];
  bool cF32 = cType == kir::DType::F32;
  if (g.m == 0 || g.n == 0)
    return;
  if (g.k == 0) { // C = 0, or unchanged when accumulating
    if (!g.accumulate)
      for (int64_t batch = 0; batch < g.batch; ++batch)
        for (int64_t r = 0; r < g.m; ++r) {
          char *row = base(g.c.buffer) +
                      (g.c.offset + batch * g.c.strides[0] + r * ldc) * cBytes;
          std::memset(row, 0, size_t(g.n * cBytes)); // +0.0 in every type
        }
    return;
  }
  // Split N (panels of B's columns, A shared) or M (panels of A's rows, B
  // shared), whichever is longer.
  bool splitN = g.n >= g.m;
  int64_t split = splitN ? g.n : g.m, other = splitN ? g.m : g.n;
  int64_t kc = g.k <= kMaxK ? g.k : kMaxK;
  bool kBlocked = kc < g.k;
  // Rows of the shorter side per shared block; with K blocked, narrow C's
  // f32 sums (sRows x split) are bounded by the same budget.
  int64_t sRows = std::clamp<int64_t>(kSharedFloats / kc, 1, other);
  if (kBlocked && !cF32)
    sRows = std::clamp<int64_t>(kSharedFloats / split, 1, sRows);
  if (!kBlocked && !cF32)
    sRows = std::min(sRows, kMaxCRows);
  // Panels: a multiple of the threads, each at most kPanelFloats widened
  // elements (and sRows x width of C staging), widths rounded to 16.
  int64_t threads = pool.size();
  int64_t perColumn = kc + (cF32 || kBlocked ? 0 : sRows);
  int64_t maxWidth = std::max<int64_t>(16, kPanelFloats / perColumn / 16 * 16);
  int64_t panels = (split + maxWidth - 1) / maxWidth;
  panels = (panels + threads - 1) / threads * threads;
  int64_t width = std::min(split, ((split + panels - 1) / panels + 15) / 16 *
                                      16);
  panels = (split + width - 1) / width;
  narrowStage.resize(std::max<size_t>(
      narrowStage.size(),
      size_t(sRows * kc + (kBlocked && !cF32 ? sRows * split : 0))));
  float *sharedStage = narrowStage.data();
  float *cSums = sharedStage + sRows * kc; // kBlocked, narrow C only
  for (int64_t batch = 0; batch < g.batch; ++batch) {
    auto at = [&](const kir::View &view, int64_t bytes) {
      return base(view.buffer) +
             (view.offset + batch * view.strides[0]) * bytes;
    };
    char *a = at(g.a, aBytes), *b = at(g.b, bBytes), *c = at(g.c, cBytes);
    // Element (i, j) of C's row-major block as bytes.
    auto cAt = [&](int64_t i, int64_t j) {
      return c + (i * ldc + j) * cBytes;
    };
    for (int64_t s0 = 0; s0 < other; s0 += sRows) {
      int64_t sc = std::min(sRows, other - s0);
      for (int64_t k0 = 0; k0 < g.k; k0 += kc) {
        int64_t kk = std::min(kc, g.k - k0);
        bool first = k0 == 0, last = k0 + kk == g.k;
        // The shared block: A rows [s0, s0 + sc) x K [k0, k0 + kk), or B
        // K [k0, k0 + kk) x columns [s0, s0 + sc), widened by all threads.
        Matrix shared;
        {
          kir::DType type = splitN ? aType : bType;
          char *data = splitN ? a : b;
          int64_t rowStride = splitN ? aM : bK, colStride = splitN ? aK : bN;
          int64_t r0 = splitN ? s0 : k0, c0 = splitN ? k0 : s0;
          int64_t rows = splitN ? sc : kk, cols = splitN ? kk : sc;
          if (type == kir::DType::F32) {
            shared = stageBlock(type, data, rowStride, colStride, r0, c0,
                                rows, cols, nullptr); // in place
          } else {
            bool byRows = colStride == 1;
            forChunks(byRows ? rows : cols, rows * cols < kSerialElements,
                      [&](int64_t begin, int64_t end, int) {
              if (byRows)
                stageBlock(type, data, rowStride, colStride, r0 + begin, c0,
                           end - begin, cols, sharedStage + begin * cols);
              else
                stageBlock(type, data, rowStride, colStride, r0, c0 + begin,
                           rows, end - begin, sharedStage + begin * rows);
            });
            shared = byRows ? Matrix{sharedStage, cols, 1}
                            : Matrix{sharedStage, 1, rows};
          }
        }
        pool.parallelFor(panels, [&](int64_t begin, int64_t end,
                                     int thread) {
          std::vector<float> &staging = scratch[thread];
          size_t need = size_t(kk * width + (cF32 || kBlocked ? 0 : sc * width));
          staging.resize(std::max(staging.size(), need));
          float *panelStage = staging.data(),
                *cStage = panelStage + kk * width;
          for (int64_t panel = begin; panel < end; ++panel) {
            int64_t p0 = panel * width, pw = std::min(width, split - p0);
            int64_t i0 = splitN ? s0 : p0, j0 = splitN ? p0 : s0;
            int64_t mc = splitN ? sc : pw, nc = splitN ? pw : sc;
            Matrix aBlock, bBlock;
            if (splitN) {
              aBlock = shared;
              bBlock = stageBlock(bType, b, bK, bN, k0, j0, kk, nc,
                                  panelStage);
            } else {
              aBlock = stageBlock(aType, a, aM, aK, i0, k0, mc, kk,
                                  panelStage);
              bBlock = shared;
            }
            // Where this panel's f32 sums go: C itself (f32), the block's
            // sums over K (narrow, K blocked) or a tile rounded right
            // after its product.
            float *cTile;
            int64_t cLd;
            if (cF32) {
              cTile = reinterpret_cast<float *>(cAt(i0, j0));
              cLd = ldc;
            } else if (kBlocked) {
              // cSums is [sc x split] (split N) or [split x sc] (split M).
              cTile = splitN ? cSums + p0 : cSums + p0 * sc;
              cLd = splitN ? split : sc;
            } else {
              cTile = cStage;
              cLd = nc;
            }
            bool accumulate = g.accumulate || !first;
            if (!cF32 && g.accumulate && first)
              for (int64_t r = 0; r < mc; ++r)
                cpu::widenToFloat(cType, cAt(i0 + r, j0), nc,
                                  cTile + r * cLd);
            sgemm(sgemmLibs, mc, nc, kk, aBlock, bBlock, cTile, cLd, 1.0f,
                  accumulate ? 1.0f : 0.0f);
            if (!cF32 && last)
              for (int64_t r = 0; r < mc; ++r)
                cpu::narrowFromFloat(cType, cTile + r * cLd, nc,
                                     cAt(i0 + r, j0));
          }
        });
      }
    }
  }
}

void CpuExecutor::runNarrowGemm(const kir::GemmStep &g) {
  // OpenBLAS has no f16 or bf16 GEMM here (Debian's build lacks sbgemm).
  // bf16 A and B on a CPU with AVX-512 BF16: tiles of C, kTileM x kTileN,
  // each one bf16Gemm (runtime/Cpu/Bf16Gemm.h: packed pairs, vdpbf16ps,
  // f32 sums), nothing widened; threads take whole tiles, of 256 columns
  // so that GPT-2's widths split evenly over them. C is summed in f32 (C
  // itself when f32, else a staged tile rounded into C at the end: one
  // rounding). Otherwise the operands are widened for sgemm
  // (stagedNarrowGemm).
  constexpr int64_t kTileM = 256, kTileN = 256;
  kir::DType aType = prog.buffers[g.a.buffer].dtype;
  kir::DType bType = prog.buffers[g.b.buffer].dtype;
  kir::DType cType = prog.buffers[g.c.buffer].dtype;
  // Strides of op(A) [m x k] and op(B) [k x n] from the stored layouts.
  int64_t aM = g.transA ? g.a.strides[2] : g.a.strides[1];
  int64_t aK = g.transA ? g.a.strides[1] : g.a.strides[2];
  int64_t bK = g.transB ? g.b.strides[2] : g.b.strides[1];
  int64_t bN = g.transB ? g.b.strides[1] : g.b.strides[2];
  std::optional<cpu::Bf16DotPath> dot;
  if (aType == kir::DType::BF16 && bType == kir::DType::BF16)
    dot = cpu::executorBf16Dot();
  if (!dot)
    stagedNarrowGemm(g, aM, aK, bK, bN);
  int64_t cBytes = kir::dtypeBytes(cType), ldc = g.c.strides[1];
  int64_t tilesM = (g.m + kTileM - 1) / kTileM;
  int64_t tilesN = (g.n + kTileN - 1) / kTileN;
  if (dot)
    forChunks(g.batch * tilesM * tilesN,
              2 * g.batch * g.m * g.n * g.k < kSerialFlops,
              [&](int64_t begin, int64_t end, int thread) {
      std::vector<float> &staging = scratch[thread];
      staging.resize(std::max<size_t>(staging.size(), kTileM * kTileN));
      float *cStage = staging.data();
      for (int64_t tile = begin; tile < end; ++tile) {
        int64_t batch = tile / (tilesM * tilesN);
        int64_t i0 = tile / tilesN % tilesM * kTileM,
                j0 = tile % tilesN * kTileN;
        int64_t mc = std::min(kTileM, g.m - i0),
                nc = std::min(kTileN, g.n - j0);
        auto view = [&](const kir::View &v, int64_t rowStride,
                        int64_t colStride, int64_t r0, int64_t c0) {
          return cpu::Bf16View{reinterpret_cast<const uint16_t *>(
                                   base(v.buffer)) +
                                   v.offset + batch * v.strides[0] +
                                   r0 * rowStride + c0 * colStride,
                               rowStride, colStride};
        };
        char *c = base(g.c.buffer) +
                  (g.c.offset + batch * g.c.strides[0]) * cBytes;
        auto cRow = [&](int64_t r) {
          return c + ((i0 + r) * ldc + j0) * cBytes;
        };
        float *cTile = reinterpret_cast<float *>(cRow(0));
        int64_t cLd = ldc;
        if (cType != kir::DType::F32) {
          cTile = cStage;
          cLd = nc;
          if (g.accumulate)
            for (int64_t r = 0; r < mc; ++r)
              cpu::widenToFloat(cType, cRow(r), nc, cStage + r * nc);
        }
        cpu::bf16Gemm(*dot, mc, nc, g.k, view(g.a, aM, aK, i0, 0),
                      view(g.b, bK, bN, 0, j0), cTile, cLd, g.accumulate);
        if (cType != kir::DType::F32)
          for (int64_t r = 0; r < mc; ++r)
            cpu::narrowFromFloat(cType, cStage + r * nc, nc, cRow(r));
      }
    });
  runEpilogueByRows(g);
}

// Causal attention runs in blocks of query rows: a block multiplies only
// the keys its rows see (its last row's prefix), so Q K^T and P V cost
// about half of the full products, as the FLOP count (kir::countFlops)
// already assumes; a block's scores are its rows only. Without a causal
// mask one block holds every row. The products run on cpu::tileGemm's
// register tiles, which pack nothing per call: each head's K and V (K^T,
// V^T, K for the gradient) are packed once into column panels and every
// block reads them. With no packing per product, blocks of 32 rows (half
// the masked triangle of 64) are faster than blocks of 64 (with BLAS they
// were not: its per-call packing ate the saving), and blocks of 16 gain
// nothing over 32. The softmax's exponentials are vectorized
// (runtime/Cpu/VectorExp.h).
constexpr int64_t kCausalQueryBlock = 32;

void CpuExecutor::runAttention(const kir::AttentionStep &att) {
  int64_t T = att.seq, S = att.keys(), D = att.headDim;
  int64_t block = att.causal ? std::min(kCausalQueryBlock, T) : T;
  // One type for q, k, v and out (kir::verifyProgram); f16/bf16 heads are
  // staged in f32 after the scores: q and out [T, D], k and v [S, D].
  kir::DType type = prog.buffers[att.q.buffer].dtype;
  int64_t staged = type == kir::DType::F32 ? 0 : 2 * (T + S) * D;
  // The head's K^T and V in cpu::tileGemm's column panels.
  int64_t packed = cpu::tilePanelFloats(D, S) + cpu::tilePanelFloats(S, D);
  const int32_t *positions =
      att.positioned()
          ? reinterpret_cast<const int32_t *>(base(att.positions.buffer))
          : nullptr;
  // The keys query t of batch b sees: a prefix of the S keys.
  auto visibleKeys = [&](int64_t b, int64_t t) -> int64_t {
    if (!att.causal)
      return S;
    int64_t last = positions ? positions[att.positions.offset +
                                         b * att.positions.strides[0] +
                                         t * att.positions.strides[1]]
                             : t + S - T;
    return std::clamp<int64_t>(last + 1, 0, S);
  };
  // Q K^T and P V: 4 T S D flops a head (half of it under a causal mask).
  forChunks(att.batch * att.heads,
            4 * att.batch * att.heads * T * S * D < kSerialFlops,
            [&](int64_t begin, int64_t end, int thread) {
    std::vector<float> &scratchFloats = scratch[thread];
    scratchFloats.resize(
        std::max<size_t>(scratchFloats.size(), block * S + staged + packed));
    float *scores = scratchFloats.data();
    float *kt = scores + block * S + staged;
    float *vp = kt + cpu::tilePanelFloats(D, S);
    for (int64_t pair = begin; pair < end; ++pair) {
      int64_t b = pair / att.heads, h = pair % att.heads;
      // Only the keys some query sees are read (a KV cache's filled prefix).
      int64_t keys = 0;
      for (int64_t t = 0; t < T; ++t)
        keys = std::max(keys, visibleKeys(b, t));
      float *staging = scores + block * S;
      auto head = [&](const kir::View &view, int64_t rows, bool load) {
        auto matrix = headMatrix(base(view.buffer), type, view, b, h, rows, D,
                                 staging, load);
        staging += rows * D;
        return matrix;
      };
      auto [q, qs] = head(att.q, T, true);
      auto [k, ks] = head(att.k, keys, true);
      auto [v, vs] = head(att.v, keys, true);
      auto [out, os] = head(att.out, T, false);
      float *lse = reinterpret_cast<float *>(base(att.lse.buffer)) +
                   att.lse.offset + b * att.lse.strides[0] +
                   h * att.lse.strides[1];
      cpu::packTilePanels(isa, {k, 1, ks}, D, keys, kt);
      cpu::packTilePanels(isa, {v, vs, 1}, keys, D, vp);
      for (int64_t t0 = 0; t0 < T; t0 += block) {
        int64_t rows = std::min(block, T - t0);
        int64_t blockKeys = 0;
        for (int64_t t = t0; t < t0 + rows; ++t)
          blockKeys = std::max(blockKeys, visibleKeys(b, t));
        if (blockKeys == 0) { // no key visible to these rows: out is 0
          for (int64_t t = t0; t < t0 + rows; ++t) {
            std::fill_n(out + t * os, D, 0.0f);
            lse[t * att.lse.strides[2]] = -INFINITY;
          }
          continue;
        }
        // S = scale * Q K^T.
        cpu::tileGemm(isa, rows, blockKeys, D, {q + t0 * qs, qs, 1},
                      cpu::packedTilePanels(kt, D), scores, blockKeys,
                      att.scale, false);
        for (int64_t t = t0; t < t0 + rows; ++t) {
          float *row = scores + (t - t0) * blockKeys;
          int64_t visible = visibleKeys(b, t);
          float max = cpu::rowMax(row, visible);
          float sum = cpu::expShiftSum(row, visible, max);
          // A query that sees no key (a position before the cache) gets 0.
          float inv = visible ? 1.0f / sum : 0.0f;
          for (int64_t s = 0; s < visible; ++s)
            row[s] *= inv;
          std::fill(row + visible, row + blockKeys, 0.0f);
          lse[t * att.lse.strides[2]] =
              visible ? max + std::log(sum) : -INFINITY;
        }
        // Out = P V.
        cpu::tileGemm(isa, rows, D, blockKeys, {scores, blockKeys, 1},
                      cpu::packedTilePanels(vp, keys), out + t0 * os, os, 1.0f,
                      false);
      }
      storeHead(base(att.out.buffer), type, att.out, b, h, T, D, out);
    }
  });
}

void CpuExecutor::runAttentionGrad(const kir::AttentionGradStep &att) {
  int64_t T = att.seq, D = att.headDim;
  int64_t block = att.causal ? std::min(kCausalQueryBlock, T) : T;
  // One type for all eight tensors (kir::verifyProgram); f16/bf16 heads
  // are staged in f32 after P, dP and delta.
  kir::DType type = prog.buffers[att.q.buffer].dtype;
  int64_t staged = type == kir::DType::F32 ? 0 : 8 * T * D;
  // The head's K^T, V^T and K in cpu::tileGemm's column panels.
  int64_t panelsT = cpu::tilePanelFloats(D, T),
          panelsK = cpu::tilePanelFloats(T, D);
  // Five products of 2 T T D flops a head (about half under a causal mask).
  forChunks(att.batch * att.heads,
            10 * att.batch * att.heads * T * T * D < kSerialFlops,
            [&](int64_t begin, int64_t end, int thread) {
    // A block's P (then dS) and dP, block x T each, delta, and the head's
    // packed K^T, V^T and K, per thread.
    std::vector<float> &buffer = scratch[thread];
    buffer.resize(std::max<size_t>(buffer.size(), 2 * block * T + T + staged +
                                                      2 * panelsT + panelsK));
    float *p = buffer.data(), *dp = p + block * T, *delta = dp + block * T;
    float *staging = delta + T;
    float *kt = staging + staged, *vt = kt + panelsT, *kp = vt + panelsT;
    for (int64_t pair = begin; pair < end; ++pair) {
      int64_t b = pair / att.heads, h = pair % att.heads;
      auto head = [&](const kir::View &view, int64_t slot, bool load) {
        return headMatrix(base(view.buffer), type, view, b, h, T, D,
                          staging + slot * T * D, load);
      };
      auto [q, qs] = head(att.q, 0, true);
      auto [k, ks] = head(att.k, 1, true);
      auto [v, vs] = head(att.v, 2, true);
      auto [out, os] = head(att.out, 3, true);
      auto [dout, dos] = head(att.dout, 4, true);
      auto [dq, dqs] = head(att.dq, 5, false);
      auto [dk, dks] = head(att.dk, 6, false);
      auto [dv, dvs] = head(att.dv, 7, false);
      const float *lse = reinterpret_cast<float *>(base(att.lse.buffer)) +
                         att.lse.offset + b * att.lse.strides[0] +
                         h * att.lse.strides[1];
      cpu::packTilePanels(isa, {k, 1, ks}, D, T, kt);
      cpu::packTilePanels(isa, {v, 1, vs}, D, T, vt);
      cpu::packTilePanels(isa, {k, ks, 1}, T, D, kp);
      // delta = rowsum(dO * O); dK and dV gather every block's share.
      for (int64_t t = 0; t < T; ++t) {
        float sum = 0.0f;
        for (int64_t d = 0; d < D; ++d)
          sum += dout[t * dos + d] * out[t * os + d];
        delta[t] = sum;
        std::fill_n(dk + t * dks, D, 0.0f);
        std::fill_n(dv + t * dvs, D, 0.0f);
      }
      for (int64_t t0 = 0; t0 < T; t0 += block) {
        int64_t rows = std::min(block, T - t0);
        int64_t kv = att.causal ? t0 + rows : T; // keys the block sees
        float *qBlock = q + t0 * qs, *doBlock = dout + t0 * dos;
        // P = exp(scale Q K^T - lse), zero where masked: the forward's
        // probabilities, recomputed.
        cpu::tileGemm(isa, rows, kv, D, {qBlock, qs, 1},
                      cpu::packedTilePanels(kt, D), p, kv, att.scale, false);
        for (int64_t t = t0; t < t0 + rows; ++t) {
          float *row = p + (t - t0) * kv;
          int64_t visible = att.causal ? t + 1 : T;
          cpu::expShiftSum(row, visible, lse[t * att.lse.strides[2]]);
          std::fill(row + visible, row + kv, 0.0f);
        }
        // dV += P^T dO.
        cpu::tileGemm(isa, kv, D, rows, {p, 1, kv},
                      {doBlock, dos, cpu::kTilePanel}, dv, dvs, 1.0f, true);
        // dP = dO V^T, then dS = P (dP - delta) in place of P.
        cpu::tileGemm(isa, rows, kv, D, {doBlock, dos, 1},
                      cpu::packedTilePanels(vt, D), dp, kv, 1.0f, false);
        for (int64_t t = t0; t < t0 + rows; ++t) {
          float *row = p + (t - t0) * kv;
          const float *dpRow = dp + (t - t0) * kv;
          for (int64_t s = 0; s < kv; ++s)
            row[s] *= dpRow[s] - delta[t];
        }
        // dQ = scale dS K (this block's rows), dK += scale dS^T Q.
        cpu::tileGemm(isa, rows, D, kv, {p, kv, 1},
                      cpu::packedTilePanels(kp, T), dq + t0 * dqs, dqs,
                      att.scale, false);
        cpu::tileGemm(isa, kv, D, rows, {p, 1, kv},
                      {qBlock, qs, cpu::kTilePanel}, dk, dks, att.scale, true);
      }
      storeHead(base(att.dq.buffer), type, att.dq, b, h, T, D, dq);
      storeHead(base(att.dk.buffer), type, att.dk, b, h, T, D, dk);
      storeHead(base(att.dv.buffer), type, att.dv, b, h, T, D, dv);
    }
  });
}

void CpuExecutor::runEmbeddingGrad(const kir::EmbeddingGradStep &e) {
  // Positions bucketed by id (a counting sort, stable: each bucket keeps
  // increasing positions), then each table row sums its bucket in order:
  // rows are independent, so threads split them with no atomics and the
  // result does not depend on the thread count.
  const kir::Buffer &idBuffer = prog.buffers[e.ids.buffer];
  auto idAt = [&](int64_t p) -> int64_t {
    int64_t element = e.ids.offset + p * e.ids.strides[0];
    if (idBuffer.dtype == kir::DType::I32)
      return reinterpret_cast<const int32_t *>(base(e.ids.buffer))[element];
    return reinterpret_cast<const int64_t *>(base(e.ids.buffer))[element];
  };
  // Ids are checked before a run (Buffer::idBound); one that is not (a
  // computed id) and lies outside the table selects no row.
  auto valid = [&](int64_t id) { return id >= 0 && id < e.rows; };
  std::vector<int64_t> start(e.rows + 1, 0), order(e.positions);
  for (int64_t p = 0; p < e.positions; ++p)
    if (int64_t id = idAt(p); valid(id))
      ++start[id + 1];
  for (int64_t r = 0; r < e.rows; ++r)
    start[r + 1] += start[r];
  std::vector<int64_t> fill(start.begin(), start.end() - 1);
  for (int64_t p = 0; p < e.positions; ++p)
    if (int64_t id = idAt(p); valid(id))
      order[fill[id]++] = p;

  const float *grad =
      reinterpret_cast<const float *>(base(e.grad.buffer)) + e.grad.offset;
  float *out = reinterpret_cast<float *>(base(e.out.buffer)) + e.out.offset;
  int64_t C = e.channels;
  forChunks(e.rows, (e.rows + e.positions) * C < kSerialElements,
            [&](int64_t begin, int64_t end, int) {
    for (int64_t r = begin; r < end; ++r) {
      float *row = out + r * e.out.strides[0];
      if (!e.accumulate)
        std::fill(row, row + C, 0.0f);
      for (int64_t i = start[r]; i < start[r + 1]; ++i) {
        const float *g = grad + order[i] * e.grad.strides[0];
        int64_t cs = e.grad.strides[1];
        if (cs == 1)
          for (int64_t c = 0; c < C; ++c)
            row[c] += g[c];
        else
          for (int64_t c = 0; c < C; ++c)
            row[c] += g[c * cs];
      }
    }
  });
}

llvm::Error CpuExecutor::setMesh(const Mesh &newMesh) {
  if (llvm::Error error = checkMesh(prog, newMesh))
    return error;
  mesh = newMesh;
  return llvm::Error::success();
}

llvm::Error CpuExecutor::run() {
  if (llvm::Error error = checkIds())
    return error;
  if (llvm::Error error = checkMesh(prog, mesh))
    return error;
  // This thread runs kernels and library GEMMs as the pool's chunk 0: no
  // asynchronous signal may interrupt them (runtime/Cpu/SignalMask.h).
  cpu::AsyncSignalsBlocked shield;
  using Clock = std::chrono::steady_clock;
  tickets.assign(prog.steps.size(), 0);
  if (profiling) {
    stepProfile.stepSeconds.resize(prog.steps.size());
    stepProfile.stepBestSeconds.resize(prog.steps.size(), 1e30);
  }
  for (auto [index, step] : llvm::enumerate(prog.steps)) {
    Clock::time_point start = profiling ? Clock::now() : Clock::time_point();
    double *bucket = nullptr;
    switch (step.kind) {
    case kir::StepKind::Kernel:
      runKernel(step.kernel);
      bucket = &stepProfile.kernelSeconds;
      break;
    case kir::StepKind::Gemm:
      runGemm(step.gemm);
      bucket = &stepProfile.gemmSeconds;
      break;
    case kir::StepKind::Attention:
      runAttention(step.attention);
      bucket = &stepProfile.attentionSeconds;
      break;
    case kir::StepKind::AttentionGrad:
      runAttentionGrad(step.attentionGrad);
      bucket = &stepProfile.attentionGradSeconds;
      break;
    case kir::StepKind::EmbeddingGrad:
      runEmbeddingGrad(step.embeddingGrad);
      bucket = &stepProfile.embeddingGradSeconds;
      break;
    case kir::StepKind::CollectiveStart: {
      const kir::CollectiveStep &c = step.collective;
      // A receive has no input; a send's output is its f32 placeholder.
      bool recv = c.kind == kir::CollectiveKind::Recv;
      kir::DType dtype =
          prog.buffers[recv ? c.output.buffer : c.input.buffer].dtype;
      int64_t size = kir::dtypeBytes(dtype);
      int64_t outSize = kir::dtypeBytes(prog.buffers[c.output.buffer].dtype);
      tickets[index] = startCollective(
          mesh, c, dtype,
          recv ? nullptr : base(c.input.buffer) + c.input.offset * size,
          base(c.output.buffer) + c.output.offset * outSize);
      ++collectives.collectives;
      collectives.bytes += c.count * size;
      break;
    }
    case kir::StepKind::CollectiveWait: {
      Clock::time_point waitStart = Clock::now();
      if (llvm::Error error = waitCollective(mesh, step.collective,
                                             tickets[step.collective.start]))
        return error;
      collectives.waitSeconds +=
          std::chrono::duration<double>(Clock::now() - waitStart).count();
      break;
    }
    }
    if (profiling && bucket) {
      double seconds =
          std::chrono::duration<double>(Clock::now() - start).count();
      *bucket += seconds;
      stepProfile.stepSeconds[index] += seconds;
      stepProfile.stepBestSeconds[index] =
          std::min(stepProfile.stepBestSeconds[index], seconds);
    }
  }
  if (profiling)
    ++stepProfile.runs;
  if (writesParams)
    persistent->noteWrite();
  return llvm::Error::success();
}

llvm::Expected<int64_t> CpuExecutor::measureArenaHighWater() {
  // 0xFF bytes: a float ending in one is NaN or below -2^127, never data.
  constexpr unsigned char canary = 0xFF;
  std::memset(arena, canary, prog.arenaBytes);
  if (llvm::Error error = run())
    return error;
  int64_t high = prog.arenaBytes;
  while (high > 0 && static_cast<unsigned char>(arena[high - 1]) == canary)
    --high;
  return high;
}

// The CUDA executor's GEMM planning without a GPU (runtime::describeGemm,
// what CudaLaunch.cpp hands cuBLASLt): every GEMM of GPT-2's training
// programs in f32, bf16 (llmc-amp) and fp16 (llmc-amp + loss scaling) is
// described with types cuBLASLt takes (bf16/f16 A and B on the tensor
// cores with f32 accumulation, C in its buffer's type, f32 master-weight
// gradients accumulated in f32), and each description's column-major
// layouts address exactly the elements the kernel IR's views do (checked
// element by element against the views, an independent reading of the
// strides). Which epilogue each GEMM hands to cuBLASLt (bias, bias + GELU,
// the GELU gradient; f32 and narrow C alike), with its bias or aux vector,
// which epilogue kernels are then no longer launched, and what keeps one
// (a misaligned bias, an aux leading dimension not a multiple of 8). What
// is not checked here: that cuBLASLt's heuristic finds an algorithm for
// each, with its epilogue (it needs a GPU).
#include "runtime/Cuda/GemmDescription.h"

#include "codegen/KernelToCuda/MultiTensor.h"
#include "training/Programs.h"
#include "frontend/GptBuilder.h"
#include "frontend/ModelConfig.h"
#include "ir/LlmcDialect.h"
#include "test/unit/codegen/KernelToCuda/CudaTestUtil.h"
#include "test/unit/codegen/LlmcToKernel/AmpEpilogues.h"

#include "mlir/Dialect/Func/IR/FuncOps.h"
#include "mlir/IR/MLIRContext.h"

#include "gtest/gtest.h"

#include <cstdio>
#include <map>
#include <tuple>

using namespace llmc;
using namespace llmc::runtime;
using llmc::test::deviceBases;

namespace {

/// The training programs of `config` at batch x seq in `precision`.
std::vector<std::pair<std::string, kir::Program>>
trainingPrograms(const mlir::llmc::ModelConfig &config,
                 PrecisionConfig::Kind precision, int64_t batch, int64_t seq) {
  mlir::MLIRContext context;
  context.loadDialect<mlir::llmc::LlmcDialect, mlir::func::FuncDialect>();
  auto module = mlir::llmc::buildForwardModule(context, config, {batch, seq});
  EXPECT_TRUE(bool(module));
  TrainingStepOptions options;
  options.precision.kind = precision;
  options.forCuda = true;
  auto programs = training::compileTrainingStep(**module, options);
  EXPECT_TRUE(bool(programs)) << llvm::toString(programs.takeError());
  std::vector<std::pair<std::string, kir::Program>> out;
  out.push_back({"forward", std::move(programs->forward)});
  out.push_back({"grad_step", std::move(programs->gradStep)});
  out.push_back({"update_step", std::move(programs->updateStep)});
  return out;
}

std::vector<std::pair<std::string, kir::Program>>
trainingPrograms(PrecisionConfig::Kind precision) {
  auto parsed = mlir::llmc::parseModelConfig(test::kGpt2TwoLayers, "test.yaml");
  EXPECT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  return trainingPrograms(*parsed, precision, 2, 8);
}

size_t typeBytes(cudaDataType_t type) {
  return type == CUDA_R_32F ? 4 : 2;
}

/// Byte address of element (row, col) of op(X) for cuBLASLt operand `x`.
uint64_t ltAddress(uint64_t base, const LtOperand &x, cudaDataType_t type,
                   int64_t batch, int64_t batchStride, int64_t row,
                   int64_t col) {
  int64_t element = x.op == CUBLAS_OP_N ? row + col * x.ld : col + row * x.ld;
  return base + (batch * batchStride + element) * typeBytes(type);
}

/// Byte address of element (i, j) of a kir view read as [batch, rows, cols].
uint64_t viewAddress(const kir::Program &program,
                     const std::vector<uint64_t> &bases, const kir::View &v,
                     bool transposed, int64_t batch, int64_t i, int64_t j) {
  int64_t element = v.offset + batch * v.strides[0] +
                    (transposed ? j * v.strides[1] + i * v.strides[2]
                                : i * v.strides[1] + j * v.strides[2]);
  return bases[v.buffer] +
         element * kir::dtypeBytes(program.buffers[v.buffer].dtype);
}

/// C = op(A) op(B) row-major is C^T = op(B)^T op(A)^T column-major: every
/// element of the three cuBLASLt operands is where the views put it.
void expectLayoutsMatchViews(const kir::Program &program,
                             const std::vector<uint64_t> &bases,
                             const kir::Step &step,
                             const GemmDescription &d) {
  const kir::GemmStep &g = step.gemm;
  // Our op(B) is k x n; cuBLASLt's op(A) is its transpose, n x k.
  int64_t mismatches = 0;
  for (int64_t b = 0; b < g.batch; ++b) {
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t kk = 0; kk < g.k; ++kk)
        mismatches += ltAddress(d.addressA, d.a, d.typeA, b, d.batchStrideA,
                                j, kk) !=
                      viewAddress(program, bases, g.b, g.transB, b, kk, j);
    for (int64_t kk = 0; kk < g.k; ++kk)
      for (int64_t i = 0; i < g.m; ++i)
        mismatches += ltAddress(d.addressB, d.b, d.typeB, b, d.batchStrideB,
                                kk, i) !=
                      viewAddress(program, bases, g.a, g.transA, b, i, kk);
    for (int64_t j = 0; j < g.n; ++j)
      for (int64_t i = 0; i < g.m; ++i)
        mismatches += ltAddress(d.addressC, d.c, d.typeC, b, d.batchStrideC,
                                j, i) !=
                      viewAddress(program, bases, g.c, false, b, i, j);
  }
  EXPECT_EQ(mismatches, 0) << step.origin << " (" << d.name << ")";
  // op(A) is n x k, op(B) k x m, C n x m.
  auto opRows = [](const LtOperand &x) {
    return x.op == CUBLAS_OP_N ? x.rows : x.cols;
  };
  auto opCols = [](const LtOperand &x) {
    return x.op == CUBLAS_OP_N ? x.cols : x.rows;
  };
  EXPECT_EQ(opRows(d.a), uint64_t(g.n));
  EXPECT_EQ(opCols(d.a), uint64_t(g.k));
  EXPECT_EQ(opRows(d.b), uint64_t(g.k));
  EXPECT_EQ(opCols(d.b), uint64_t(g.m));
  EXPECT_EQ(d.c.rows, uint64_t(g.n));
  EXPECT_EQ(d.c.cols, uint64_t(g.m));
  // Leading dimensions cover the stored rows.
  for (const LtOperand *x : {&d.a, &d.b, &d.c})
    EXPECT_GE(uint64_t(x->ld), x->rows) << step.origin;
}

cudaDataType_t expectedType(kir::DType dtype) {
  return dtype == kir::DType::BF16  ? CUDA_R_16BF
         : dtype == kir::DType::F16 ? CUDA_R_16F
                                    : CUDA_R_32F;
}

struct Counts {
  int gemms = 0, narrow = 0, narrowIntoF32 = 0, accumulating = 0, fused = 0;
};

/// Describes every GEMM of `program`, checks it (the layouts element by
/// element where `checkLayouts`), and counts.
Counts planProgram(const kir::Program &program, bool allowTf32,
                   bool checkLayouts = true) {
  Counts counts;
  std::vector<uint64_t> bases = deviceBases(program);
  for (const kir::Step &step : program.steps) {
    if (step.kind != kir::StepKind::Gemm)
      continue;
    ++counts.gemms;
    auto d = describeGemm(program, step, bases, allowTf32, true);
    if (!d) {
      ADD_FAILURE() << llvm::toString(d.takeError());
      continue;
    }
    const kir::Buffer &a = program.buffers[step.gemm.a.buffer];
    const kir::Buffer &b = program.buffers[step.gemm.b.buffer];
    const kir::Buffer &c = program.buffers[step.gemm.c.buffer];
    EXPECT_EQ(d->typeA, expectedType(b.dtype)) << step.origin;
    EXPECT_EQ(d->typeB, expectedType(a.dtype)) << step.origin;
    EXPECT_EQ(d->typeC, expectedType(c.dtype)) << step.origin;
    EXPECT_TRUE(cublasLtTakes(d->compute, d->scaleType, d->typeA, d->typeB,
                              d->typeC))
        << step.origin;
    bool narrow = a.dtype != kir::DType::F32;
    // Narrow operands: tensor cores with f32 accumulation, never TF32.
    EXPECT_EQ(d->compute, !narrow && allowTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                               : CUBLAS_COMPUTE_32F)
        << step.origin;
    counts.narrow += narrow;
    counts.narrowIntoF32 += narrow && c.dtype == kir::DType::F32;
    counts.accumulating += step.gemm.accumulate;
    counts.fused += d->fused != kir::EpilogueKind::None;
    if (step.gemm.accumulate) { // gradients accumulate in f32
      EXPECT_EQ(c.dtype, kir::DType::F32) << step.origin;
    }
    if (checkLayouts)
      expectLayoutsMatchViews(program, bases, step, *d);
  }
  return counts;
}

TEST(GemmPlanTest, Gpt2TrainingProgramsPlanInEveryPrecision) {
  for (auto [precision, name] :
       {std::pair{PrecisionConfig::Kind::FP32, "fp32"},
        std::pair{PrecisionConfig::Kind::BF16, "bf16"},
        std::pair{PrecisionConfig::Kind::FP16, "fp16"}}) {
    for (const auto &[function, program] : trainingPrograms(precision)) {
      SCOPED_TRACE(std::string(name) + " @" + function);
      Counts counts = planProgram(program, /*allowTf32=*/true);
      std::printf("[ gemm plan ] %s @%s: %d GEMMs, %d on bf16/f16 tensor "
                  "cores (%d into f32 C), %d accumulating into f32 "
                  "gradients, %d epilogues in cuBLASLt\n",
                  name, function.c_str(), counts.gemms, counts.narrow,
                  counts.narrowIntoF32, counts.accumulating, counts.fused);
      if (function == "update_step") {
        EXPECT_EQ(counts.gemms, 0);
        continue;
      }
      EXPECT_GT(counts.gemms, 0);
      // Bias epilogues (and GELU ones) in cuBLASLt, f32 or narrow C
      // (per GEMM: AmpEpiloguesRunInCublasLt).
      EXPECT_GT(counts.fused, 0);
      if (precision == PrecisionConfig::Kind::FP32) {
        EXPECT_EQ(counts.narrow, 0);
      } else {
        // llmc-amp puts every matmul on the narrow type.
        EXPECT_EQ(counts.narrow, counts.gemms);
      }
      if (function == "grad_step") {
        // Per layer 4 weight gradients, and the tied wte's: all summed
        // into their f32 gradient buffers by the GEMM (beta = 1).
        EXPECT_GE(counts.accumulating, 2 * 4 + 1);
      }
    }
  }
}

// GPT-2 124M at B=16, T=1024 and GPT-2 medium (350M) at B=8, T=1024 in
// bf16, the sizes issue 19 trains at: every GEMM plans on the bf16 tensor
// cores, and the device memory of a training run fits an 80 GB GPU. Each
// CudaExecutor owns its program's arena (the memory plan's peak) and a
// cuBLASLt workspace; parameters, gradients and Adam moments live once in
// the shared CudaPersistentStore (the non-arena buffers of the programs,
// by name; inputs once per executor).
TEST(GemmPlanTest, Gpt2AtTrainingSizesPlansInBf16AndFits80GB) {
  struct Size {
    const char *preset;
    int64_t batch, seq;
  };
  for (Size size : {Size{"gpt2", 16, 1024}, Size{"gpt2-medium", 8, 1024}}) {
    SCOPED_TRACE(size.preset);
    auto config = mlir::llmc::getModelPreset(size.preset);
    ASSERT_TRUE(config.has_value());
    auto programs = trainingPrograms(*config, PrecisionConfig::Kind::BF16,
                                     size.batch, size.seq);
    std::map<std::string, int64_t> persistent; // by name
    int64_t arenas = 0, inputs = 0, parameters = 0;
    for (const auto &[function, program] : programs) {
      Counts counts = planProgram(program, false, /*checkLayouts=*/false);
      EXPECT_EQ(counts.narrow, counts.gemms) << function;
      int64_t programInputs = 0;
      for (const kir::Buffer &buffer : program.buffers) {
        if (buffer.kind == kir::BufferKind::Param ||
            buffer.kind == kir::BufferKind::State)
          persistent[buffer.name] = buffer.bytes();
        else if (buffer.kind != kir::BufferKind::Arena)
          programInputs += buffer.bytes();
      }
      arenas += program.arenaBytes;
      inputs += programInputs;
      if (function == "update_step") {
        // The AdamW updates as three multi-tensor launches (with weight
        // decay and a bf16 copy to write; without decay, with a copy
        // (biases) and without (the norms, read in f32)) and the gradient
        // zeroing as one, the gradient norm's sums of squares as one
        // multi-tensor sum (two launches); alone remain wpe's update (the
        // only decayed parameter read in f32: nothing to batch it with)
        // and 4 scalar kernels.
        cuda::KernelBatches batches = cuda::planKernelBatches(program);
        int64_t before = cuda::countKernelLaunches(program, {});
        int64_t after = cuda::countKernelLaunches(program, batches.batches);
        int64_t params = int64_t(program.params.size()), sums = 0;
        for (const cuda::CudaKernelBatch &batch : batches.batches)
          if (batch.kind == cuda::CudaKernelBatch::Kind::Sum)
            sums += int64_t(batch.members());
        std::printf("[ launches ] %s bf16 @update_step: %lld parameters, "
                    "%lld kernel launches -> %lld (%zu multi-tensor "
                    "batches, %lld sums of squares in Sum batches)\n",
                    size.preset, (long long)params, (long long)before,
                    (long long)after, batches.batches.size(),
                    (long long)sums);
        EXPECT_EQ(sums, params);
        EXPECT_EQ(after, 4 + 2 + 1 + 4);
      }
      std::printf("[ memory   ] %s B=%lld T=%lld bf16 @%s: arena %.3f GB, "
                  "inputs and outputs %.3f MB, %d GEMMs (bf16 tensor "
                  "cores)\n",
                  size.preset, (long long)size.batch, (long long)size.seq,
                  function.c_str(), program.arenaBytes / 1e9,
                  programInputs / 1e6, counts.gemms);
    }
    int64_t stored = 0;
    for (const auto &[name, bytes] : persistent) {
      stored += bytes;
      if (!llvm::StringRef(name).starts_with("grad.") &&
          !llvm::StringRef(name).starts_with("adam_") &&
          !llvm::StringRef(name).starts_with("cast."))
        parameters += bytes / 4;
    }
    int64_t workspaces = 3 * (int64_t(32) << 20);
    int64_t total = arenas + inputs + stored + workspaces;
    std::printf("[ memory   ] %s B=%lld T=%lld bf16: persistent %.3f GB "
                "(f32 params, bf16 copies, f32 grads, Adam m and v; %.1fM "
                "parameters), "
                "arenas %.3f GB, total %.3f GB of 80\n",
                size.preset, (long long)size.batch, (long long)size.seq,
                stored / 1e9, parameters / 1e6, arenas / 1e9, total / 1e9);
    EXPECT_LT(total, int64_t(80e9));
    // f32 master weights, gradients and two moments, 16 bytes a
    // parameter, and the bf16 copies of those the GEMMs read.
    EXPECT_GE(stored, 16 * parameters);
    EXPECT_LE(stored, 18 * parameters);
  }
}

/// The kernel launches of `program`'s schedule on the executor (no
/// multi-tensor batches): kernel steps, and each GEMM's epilogue kernel
/// unless cuBLASLt runs it (launchesEpilogueKernel, as CudaLaunch.cpp
/// enqueues), with epilogues fused or not.
int64_t kernelLaunches(const kir::Program &program,
                       const std::vector<uint64_t> &bases, bool fuse) {
  int64_t launches = 0;
  for (const kir::Step &step : program.steps) {
    if (step.kind == kir::StepKind::Kernel)
      ++launches;
    if (step.kind != kir::StepKind::Gemm)
      continue;
    auto d = describeGemm(program, step, bases, false, fuse);
    if (!d) {
      ADD_FAILURE() << llvm::toString(d.takeError());
      continue;
    }
    launches += launchesEpilogueKernel(step.gemm, d->fused);
  }
  return launches;
}

/// The device address of element 0 of `view` at `bases`.
uint64_t addressOf(const kir::Program &program,
                   const std::vector<uint64_t> &bases, const kir::View &view) {
  return bases[view.buffer] +
         view.offset * kir::dtypeBytes(program.buffers[view.buffer].dtype);
}

// GPT-2's bf16 and fp16 (loss scaling) training programs: which GEMM hands
// which epilogue to cuBLASLt, GEMM by GEMM in schedule order, with the bias
// vector (the parameter's persistent bf16/f16 copy, BIAS_DATA_TYPE the narrow
// type) or the GELU input (aux: the saved c_fc pre-activation, of C's type,
// ld 4C) at the addresses the views give; those epilogue kernels are no
// longer launched, the others still are. The products cast back up to f32
// (logits, and each dX into the f32 residual stream) keep their rounding
// kernel. f32 fuses the same GEMMs (and has no such casts).
TEST(GemmPlanTest, AmpEpiloguesRunInCublasLt) {
  using K = kir::EpilogueKind;
  const test::EpilogueTable *expected[2] = {&test::ampForwardEpilogues(),
                                            &test::ampGradStepEpilogues()};
  for (auto [precision, name, type] :
       {std::tuple{PrecisionConfig::Kind::BF16, "bf16", CUDA_R_16BF},
        std::tuple{PrecisionConfig::Kind::FP16, "fp16", CUDA_R_16F},
        std::tuple{PrecisionConfig::Kind::FP32, "fp32", CUDA_R_32F}}) {
    auto programs = trainingPrograms(precision);
    for (int p = 0; p < 2; ++p) {
      const auto &[function, program] = programs[p];
      SCOPED_TRACE(std::string(name) + " @" + function);
      std::vector<uint64_t> bases = deviceBases(program);
      std::vector<std::pair<std::string, K>> got;
      std::map<K, int> kinds;
      int epilogues = 0;
      for (const kir::Step &step : program.steps) {
        if (step.kind != kir::StepKind::Gemm)
          continue;
        const kir::GemmStep &g = step.gemm;
        auto d = describeGemm(program, step, bases, false, true);
        ASSERT_TRUE(bool(d)) << llvm::toString(d.takeError());
        if (g.epilogue < 0) {
          EXPECT_EQ(d->fused, K::None) << step.origin;
          EXPECT_FALSE(launchesEpilogueKernel(g, d->fused));
          continue;
        }
        ++epilogues;
        ++kinds[d->fused];
        got.push_back({step.origin, d->fused});
        EXPECT_EQ(d->fused, g.epilogueKind) << step.origin;
        EXPECT_EQ(launchesEpilogueKernel(g, d->fused), d->fused == K::None)
            << step.origin;
        if (d->fused == K::None) {
          EXPECT_EQ(d->bias, 0u);
          EXPECT_EQ(d->aux, 0u);
          continue;
        }
        // cuBLASLt's D is our C, in the program's type; bias and aux too.
        EXPECT_EQ(d->typeC, type) << step.origin;
        if (d->fused == K::DGelu) {
          EXPECT_EQ(d->aux, addressOf(program, bases, g.epilogueAux));
          EXPECT_EQ(d->auxLd, 256) << step.origin; // 4C, the pre-activation
          EXPECT_EQ(d->auxLd % 8, 0);
          EXPECT_EQ(d->bias, 0u);
          EXPECT_EQ(expectedType(program.buffers[g.epilogueAux.buffer].dtype),
                    type);
        } else {
          EXPECT_EQ(d->bias, addressOf(program, bases, g.epilogueBias));
          EXPECT_EQ(d->biasType, type) << step.origin;
          EXPECT_EQ(d->aux, 0u);
          EXPECT_EQ(program.buffers[g.epilogueBias.buffer].numElements(), g.n);
        }
        EXPECT_GE(alignmentOf(d->fused == K::DGelu ? d->aux : d->bias), 16u);
      }
      // f32 programs have no casts back up: the same list without them.
      test::EpilogueTable want = *expected[p];
      if (type == CUDA_R_32F)
        llvm::erase_if(
            want, [](const auto &entry) { return entry.second == K::None; });
      EXPECT_EQ(got, want);
      int64_t unfused = kernelLaunches(program, bases, false);
      int64_t fused = kernelLaunches(program, bases, true);
      int inCublas = epilogues - kinds[K::None];
      EXPECT_EQ(unfused - fused, inCublas);
      std::printf("[ epilogue ] %s @%s: %d of %d epilogue kernels in "
                  "cuBLASLt (%d bias, %d bias + GELU, %d GELU gradient); "
                  "kernel launches %lld -> %lld\n",
                  name, function.c_str(), inCublas, epilogues, kinds[K::Bias],
                  kinds[K::GeluBias], kinds[K::DGelu], (long long)unfused,
                  (long long)fused);
    }
  }
}

// What keeps an epilogue kernel in a narrow program: a bias vector that is
// not 16-byte aligned, and a GELU input whose leading dimension is not a
// multiple of 8 elements (GPT-2 at width 39: 4C = 156), both of which
// cuBLASLt requires. The other epilogues of the same program still fuse.
TEST(GemmPlanTest, MisalignedBiasOrAuxLdKeepsTheKernel) {
  for (auto precision :
       {PrecisionConfig::Kind::BF16, PrecisionConfig::Kind::FP16}) {
    auto programs = trainingPrograms(precision);
    const kir::Program &grad = programs[1].second;
    std::vector<uint64_t> bases = deviceBases(grad);
    int checked = 0;
    for (const kir::Step &step : grad.steps) {
      if (step.kind != kir::StepKind::Gemm ||
          step.gemm.epilogueKind != kir::EpilogueKind::Bias)
        continue;
      auto aligned = describeGemm(grad, step, bases, false, true);
      ASSERT_TRUE(bool(aligned));
      EXPECT_EQ(aligned->fused, kir::EpilogueKind::Bias);
      // The bias one bf16/f16 element (2 bytes) off a 16-byte boundary.
      std::vector<uint64_t> moved = bases;
      moved[step.gemm.epilogueBias.buffer] += 2;
      auto d = describeGemm(grad, step, moved, false, true);
      ASSERT_TRUE(bool(d));
      EXPECT_EQ(d->fused, kir::EpilogueKind::None) << step.origin;
      EXPECT_EQ(d->bias, 0u);
      EXPECT_TRUE(launchesEpilogueKernel(step.gemm, d->fused));
      ++checked;
    }
    EXPECT_EQ(checked, 4);

    auto parsed = mlir::llmc::parseModelConfig(
        "name: g\nn_layer: 2\nn_head: 3\nn_embd: 39\nseq_len: 16\n"
        "vocab_size: 128\n",
        "test.yaml");
    ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
    auto odd = trainingPrograms(*parsed, precision, 2, 8);
    const kir::Program &oddGrad = odd[1].second;
    std::vector<uint64_t> oddBases = deviceBases(oddGrad);
    std::map<kir::EpilogueKind, int> classified, fused;
    for (const kir::Step &step : oddGrad.steps) {
      if (step.kind != kir::StepKind::Gemm || step.gemm.epilogue < 0)
        continue;
      auto d = describeGemm(oddGrad, step, oddBases, false, true);
      ASSERT_TRUE(bool(d)) << llvm::toString(d.takeError());
      ++classified[step.gemm.epilogueKind];
      ++fused[d->fused];
      if (step.gemm.epilogueKind == kir::EpilogueKind::DGelu) {
        EXPECT_EQ(step.gemm.epilogueAux.strides[0], 156);
        EXPECT_EQ(d->fused, kir::EpilogueKind::None) << step.origin;
        EXPECT_TRUE(launchesEpilogueKernel(step.gemm, d->fused));
      }
    }
    EXPECT_EQ(classified[kir::EpilogueKind::DGelu], 2); // matched, kept
    EXPECT_EQ(fused[kir::EpilogueKind::DGelu], 0);
    EXPECT_EQ(fused[kir::EpilogueKind::Bias], 4); // bias rows still fuse
  }
}

TEST(GemmPlanTest, MixedOperandTypesAreRefusedByName) {
  auto programs = trainingPrograms(PrecisionConfig::Kind::BF16);
  kir::Program &program = programs[1].second; // grad_step
  std::vector<uint64_t> bases = deviceBases(program);
  for (const kir::Step &step : program.steps) {
    if (step.kind != kir::StepKind::Gemm)
      continue;
    // f32 A times a bf16 B: the CPU backend widens a narrow-stored weight
    // in registers; cuBLASLt has no such kernel.
    program.buffers[step.gemm.a.buffer].dtype = kir::DType::F32;
    auto d = describeGemm(program, step, bases, false, true);
    ASSERT_FALSE(bool(d));
    std::string message = llvm::toString(d.takeError());
    EXPECT_NE(message.find("GEMM step '" + step.origin + "'"),
              std::string::npos)
        << message;
    EXPECT_NE(message.find("cuBLASLt has no GEMM of A f32 x B bf16"),
              std::string::npos)
        << message;
    return;
  }
  FAIL() << "no GEMM step";
}

TEST(GemmPlanTest, SupportedTypeTable) {
  EXPECT_TRUE(cublasLtTakes(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF,
                            CUDA_R_16BF, CUDA_R_16BF));
  EXPECT_TRUE(cublasLtTakes(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16BF,
                            CUDA_R_16BF, CUDA_R_32F));
  EXPECT_TRUE(cublasLtTakes(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F,
                            CUDA_R_16F, CUDA_R_32F));
  EXPECT_FALSE(cublasLtTakes(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_16F,
                             CUDA_R_16F, CUDA_R_16BF));
  EXPECT_FALSE(cublasLtTakes(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F,
                             CUDA_R_16BF, CUDA_R_32F));
  EXPECT_FALSE(cublasLtTakes(CUBLAS_COMPUTE_32F_FAST_TF32, CUDA_R_32F,
                             CUDA_R_16BF, CUDA_R_16BF, CUDA_R_32F));
  EXPECT_FALSE(cublasLtTakes(CUBLAS_COMPUTE_32F, CUDA_R_32F, CUDA_R_32F,
                             CUDA_R_32F, CUDA_R_16BF));
}

} // namespace

// bench-sparse-cuda: the 2:4 sparse tensor-core GEMM
// (codegen/KernelToCuda/SparseGemm.h, mma.sp through NVRTC) against
// cuBLASLt's dense bf16 GEMM on the same GPU, y = x · Wᵀ with bf16 x and W
// and f32 y, over GPT-2 124M's and a ~350M model's block weights at decode
// (M = 1, 8 tokens) and prefill (M = 128..2048) shapes: time per product,
// TFLOP/s of the dense product's 2 M N K, the bytes of W each reads and
// the 2:4 result's largest error against cuBLASLt's (relative to the
// largest |y|). Without a GPU it says so and exits 0.
//
//   bench-sparse-cuda [--reps N]
#include "bench/CudaBench.h"
#include "bench/Options.h"

#include "codegen/KernelToCuda/Nvrtc.h"
#include "codegen/KernelToCuda/SparseGemm.h"
#include "runtime/Cuda/CudaApi.h"
#include "runtime/Weights/Sparsity.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <algorithm>
#include <cmath>
#include <random>

using namespace llmc;

namespace {

llvm::cl::opt<bool> compileOnlyFlag(
    "compile-only", llvm::cl::cat(llmc::bench::benchOptions()),
    llvm::cl::desc("Compile the CUDA module with NVRTC and exit (no GPU "
                   "needed)"));
llvm::cl::opt<int> reps("reps", llvm::cl::cat(llmc::bench::benchOptions()),
                        llvm::cl::desc("Timed runs per case (best "
                                       "counts; default 20)"),
                        llvm::cl::init(20));

using bench::orDie;

struct Gpu : bench::CudaBenchGpu {
  const cuda::CublasLtApi *lt = nullptr;
  cublasLtHandle_t handle = nullptr;
  CUfunction sparse = nullptr;
  CUdeviceptr workspace = 0;
  static constexpr size_t kWorkspace = 32 << 20;
};

/// cuBLASLt's y[m, n] (row-major, f32) = x[m, k] (bf16) · W[n, k]ᵀ (bf16):
/// column-major, yᵀ (n x m) = op_T(W as k x n) · xᵀ (k x m).
struct DenseGemm {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulAlgo_t algo{};

  DenseGemm(Gpu &gpu, int64_t m, int64_t n, int64_t k) {
    const cuda::CublasLtApi &lt = *gpu.lt;
    orDie(cuda::checkCublas(
              lt, lt.matmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
              "cublasLtMatmulDescCreate"),
          "dense GEMM");
    cublasOperation_t transA = CUBLAS_OP_T, transB = CUBLAS_OP_N;
    lt.matmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSA, &transA,
                              sizeof(transA));
    lt.matmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_TRANSB, &transB,
                              sizeof(transB));
    lt.matrixLayoutCreate(&a, CUDA_R_16BF, uint64_t(k), uint64_t(n), k);
    lt.matrixLayoutCreate(&b, CUDA_R_16BF, uint64_t(k), uint64_t(m), k);
    lt.matrixLayoutCreate(&c, CUDA_R_32F, uint64_t(n), uint64_t(m), n);
    cublasLtMatmulPreference_t preference = nullptr;
    lt.matmulPreferenceCreate(&preference);
    uint64_t bytes = Gpu::kWorkspace;
    lt.matmulPreferenceSetAttribute(preference,
                                    CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                    &bytes, sizeof(bytes));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    cublasStatus_t status = lt.matmulAlgoGetHeuristic(
        gpu.handle, desc, a, b, c, c, preference, 1, &result, &found);
    lt.matmulPreferenceDestroy(preference);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      llvm::errs() << "bench-sparse-cuda: cuBLASLt has no bf16 algorithm for "
                   << m << " x " << n << " x " << k << "\n";
      std::exit(1);
    }
    algo = result.algo;
  }
  ~DenseGemm() = default;

  void run(Gpu &gpu, CUdeviceptr w, CUdeviceptr x, CUdeviceptr y) const {
    float one = 1.0f, zero = 0.0f;
    orDie(cuda::checkCublas(
              *gpu.lt,
              gpu.lt->matmul(
                  gpu.handle, desc, &one, reinterpret_cast<void *>(w), a,
                  reinterpret_cast<void *>(x), b, &zero,
                  reinterpret_cast<void *>(y), c, reinterpret_cast<void *>(y),
                  c, &algo, reinterpret_cast<void *>(gpu.workspace),
                  Gpu::kWorkspace, gpu.stream),
              "cublasLtMatmul"),
          "dense GEMM");
  }
};

/// One shape: W [n, k] 2:4, x [m, k]; prints a row.
void benchShape(Gpu &gpu, const char *name, int64_t m, int64_t n, int64_t k) {
  std::mt19937 rng(uint32_t(n * 7 + k));
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<float> w(n * k), mask(n * k);
  for (float &v : w)
    v = normal(rng);
  runtime::maskTwoOfFour(w, k, mask);
  std::vector<uint16_t> wDense(n * k), x(m * k);
  for (size_t i = 0; i < w.size(); ++i) {
    w[i] *= mask[i];
    wDense[i] = runtime::floatToBFloat16(w[i]);
  }
  for (uint16_t &v : x)
    v = runtime::floatToBFloat16(normal(rng) * 50.0f);
  runtime::TensorCoreTwoOfFour packed = runtime::packForTensorCores(
      cantFail(runtime::compressTwoOfFour(name, w, n, k)));

  CUdeviceptr dW = gpu.upload(wDense.data(), wDense.size() * 2);
  CUdeviceptr dValues =
      gpu.upload(packed.values.data(), packed.values.size() * 4);
  CUdeviceptr dMeta = gpu.upload(packed.meta.data(), packed.meta.size() * 4);
  CUdeviceptr dX = gpu.upload(x.data(), x.size() * 2);
  std::vector<float> zeros(m * n, 0.0f);
  CUdeviceptr dDense = gpu.upload(zeros.data(), zeros.size() * 4);
  CUdeviceptr dSparse = gpu.upload(zeros.data(), zeros.size() * 4);

  DenseGemm dense(gpu, m, n, k);
  cuda::SparseGemmArgs args = cuda::sparseGemmArgs(
      m, n, k, reinterpret_cast<const void *>(dValues),
      reinterpret_cast<const void *>(dMeta), reinterpret_cast<const void *>(dX),
      k, reinterpret_cast<float *>(dSparse), n);
  cuda::CudaLaunch launch = cuda::sparseGemmLaunch(n, m);
  auto runSparse = [&] { gpu.launch(gpu.sparse, launch, &args, "2:4 GEMM"); };
  double denseMs = gpu.bestMs(reps, [&] { dense.run(gpu, dW, dX, dDense); });
  double sparseMs = gpu.bestMs(reps, runSparse);

  std::vector<float> yDense(m * n), ySparse(m * n);
  gpu.cu->memcpyDtoHAsync(yDense.data(), dDense, yDense.size() * 4, gpu.stream);
  gpu.cu->memcpyDtoHAsync(ySparse.data(), dSparse, ySparse.size() * 4,
                          gpu.stream);
  gpu.cu->streamSynchronize(gpu.stream);
  double worst = 0, largest = 0;
  for (size_t i = 0; i < yDense.size(); ++i) {
    worst = std::max(worst, double(std::fabs(yDense[i] - ySparse[i])));
    largest = std::max(largest, double(std::fabs(yDense[i])));
  }
  double flops = 2.0 * m * n * k;
  llvm::outs() << llvm::format(
      "  %-12s %5lld %6lld %6lld %9.1f %9.1f %8.2fx %8.1f %8.1f %9.1e\n", name,
      (long long)m, (long long)n, (long long)k, denseMs * 1e3, sparseMs * 1e3,
      denseMs / sparseMs, flops / (denseMs * 1e9), flops / (sparseMs * 1e9),
      worst / std::max(largest, 1e-30));
  for (CUdeviceptr p : {dW, dValues, dMeta, dX, dDense, dSparse})
    gpu.cu->memFree(p);
}

} // namespace

int main(int argc, char **argv) {
  llmc::bench::parseOptions(
      argc, argv,
      "bench-sparse-cuda: 2:4 mma.sp GEMM vs cuBLASLt dense bf16\n");
  bench::cudaBenchName() = "bench-sparse-cuda";
  if (compileOnlyFlag)
    return bench::compileOnly(cuda::emitSparseGemmModule(), "sparse_gemm.cu");
  std::optional<bench::CudaBenchGpu> opened =
      bench::CudaBenchGpu::open("sparse tensor cores");
  if (!opened)
    return 0;
  Gpu gpu;
  static_cast<bench::CudaBenchGpu &>(gpu) = *opened;
  gpu.lt = orDie(cuda::loadCublasLt(), "cuBLASLt");
  orDie(
      cuda::checkCublas(*gpu.lt, gpu.lt->create(&gpu.handle), "cublasLtCreate"),
      "cuBLASLt");
  gpu.cu->memAlloc(&gpu.workspace, Gpu::kWorkspace);
  gpu.sparse =
      gpu.function(gpu.load(cuda::emitSparseGemmModule(), "sparse_gemm.cu"),
                   cuda::sparseGemmName(false));

  llvm::outs() << "bench-sparse-cuda: " << gpu.describe() << ", cuBLASLt "
               << gpu.lt->getVersion() << ", best of " << reps << " runs\n";
  llvm::outs() << "y = x W^T, bf16 x and W, f32 y and accumulation; W 2:4 "
                  "(dense: cuBLASLt on the masked W; 2:4: mma.sp on the "
                  "packed W)\n";
  llvm::outs() << llvm::format("  %-12s %5s %6s %6s %9s %9s %9s %8s %8s %9s\n",
                               "weight", "M", "N", "K", "dense us", "2:4 us",
                               "speedup", "dense TF", "2:4 TF", "max err");
  struct Model {
    const char *name;
    int64_t d;
  };
  for (Model model : {Model{"gpt2 124M", 768}, Model{"gpt-350M", 1024}}) {
    llvm::outs() << model.name << " (d = " << model.d << "):\n";
    int64_t d = model.d;
    struct Weight {
      const char *name;
      int64_t n, k;
    } weights[] = {{"attn.c_attn", 3 * d, d},
                   {"attn.c_proj", d, d},
                   {"mlp.c_fc", 4 * d, d},
                   {"mlp.c_proj", d, 4 * d}};
    for (int64_t m : {1, 8, 128, 512, 2048})
      for (const Weight &w : weights)
        benchShape(gpu, w.name, m, w.n, w.k);
  }
  return 0;
}

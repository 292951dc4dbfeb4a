// compileCudaModules: the CUDA executor's modules from a program, the
// embedding-gradient kernels' source, and the library kernels' launches.
#include "codegen/KernelToCuda/CudaCompiler.h"

#include "codegen/KernelToCuda/KernelToCuda.h"
#include "codegen/KernelToCuda/MultiTensor.h"

#include "llvm/ADT/STLExtras.h"

#include <algorithm>

using namespace llmc;
using namespace llmc::cuda;

namespace {

// The deterministic embedding gradient (kir::EmbeddingGradStep): one thread
// per channel walks the positions in increasing order, so every out element
// sums its positions in the CPU executor's order, without atomics. Reads
// of grad and writes of out are coalesced across a warp's channels.
const char *kEmbeddingGradSource = R"cuda(
extern "C" __global__ void llmc_embedding_zero(float *out, long long offset,
    long long rowStride, long long colStride, long long rows,
    long long channels) {
  long long total = rows * channels;
  for (long long i = blockIdx.x * (long long)blockDim.x + threadIdx.x;
       i < total; i += (long long)gridDim.x * blockDim.x)
    out[offset + (i / channels) * rowStride + (i % channels) * colStride] = 0.0f;
}
template <typename Id>
__device__ void llmc_embedding_grad(const Id *ids, long long idsOffset,
    long long idsStride, const float *grad, long long gradOffset,
    long long gradPosStride, long long gradColStride, float *out,
    long long outOffset, long long outRowStride, long long outColStride,
    long long positions, long long channels) {
  long long c = blockIdx.x * (long long)blockDim.x + threadIdx.x;
  if (c >= channels)
    return;
  for (long long p = 0; p < positions; ++p) {
    long long row = (long long)ids[idsOffset + p * idsStride];
    if (row < 0) // another tp rank's id (kir::EmbeddingGradStep)
      continue;
    out[outOffset + row * outRowStride + c * outColStride] +=
        grad[gradOffset + p * gradPosStride + c * gradColStride];
  }
}
extern "C" __global__ void llmc_embedding_grad_i32(const int *ids,
    long long a, long long b, const float *grad, long long c, long long d,
    long long e, float *out, long long f, long long g, long long h,
    long long positions, long long channels) {
  llmc_embedding_grad<int>(ids, a, b, grad, c, d, e, out, f, g, h, positions,
                           channels);
}
extern "C" __global__ void llmc_embedding_grad_i64(const long long *ids,
    long long a, long long b, const float *grad, long long c, long long d,
    long long e, float *out, long long f, long long g, long long h,
    long long positions, long long channels) {
  llmc_embedding_grad<long long>(ids, a, b, grad, c, d, e, out, f, g, h,
                                 positions, channels);
}
)cuda";

} // namespace

std::string llmc::cuda::cudaLibrarySource(
    llvm::ArrayRef<FlashAttentionVariant> variants) {
  return emitFlashAttentionModule(variants) + kEmbeddingGradSource;
}

llvm::Expected<CudaModules>
llmc::cuda::compileCudaModules(const kir::Program &prog,
                               const CudaCompilerOptions &options) {
  CudaModules modules;
  // The program's kernels: the artifact's binaries or NVRTC now.
  if (!prog.kernels.empty()) {
    if (options.kernelBinaries) {
      modules.kernels = *options.kernelBinaries;
      modules.kernelsPrecompiled = true;
    } else {
      std::string source = emitCudaModule(prog);
      if (options.multiTensor) {
        KernelBatches batches = planKernelBatches(prog);
        source += batches.source;
        modules.batches = std::move(batches.batches);
      }
      llvm::Expected<CudaBinaries> compiled = compileCuda(
          source, prog.function + ".cu", options.nvrtc, &modules.kernelStats);
      if (!compiled)
        return compiled.takeError();
      modules.kernels = std::move(*compiled);
    }
    for (auto [index, kernel] : llvm::enumerate(prog.kernels))
      modules.kernelLaunches.push_back(
          options.kernelLaunches.size() == prog.kernels.size()
              ? options.kernelLaunches[index]
              : chooseLaunch(kernel));
  }

  // Attention and embedding kernels: one library module for what the
  // schedule needs, and per step the kernels it launches.
  std::vector<FlashAttentionVariant> variants;
  bool needEmbedding = false;
  modules.stepKernels.resize(prog.steps.size());
  for (auto [index, step] : llvm::enumerate(prog.steps)) {
    std::vector<LibraryKernel> &kernels = modules.stepKernels[index];
    if (step.kind == kir::StepKind::Attention) {
      const kir::AttentionStep &att = step.attention;
      FlashAttentionVariant variant{att.headDim,
                                    prog.buffers[att.q.buffer].dtype};
      variants.push_back(variant);
      kernels.push_back({flashForwardName(variant),
                         flashForwardLaunch(variant, att.batch, att.heads, att.seq)});
    } else if (step.kind == kir::StepKind::AttentionGrad) {
      const kir::AttentionGradStep &att = step.attentionGrad;
      FlashAttentionVariant variant{att.headDim,
                                    prog.buffers[att.q.buffer].dtype};
      variants.push_back(variant);
      kernels.push_back(
          {flashBackwardDkDvName(variant),
           flashBackwardDkDvLaunch(variant, att.batch, att.heads, att.seq)});
      kernels.push_back({flashBackwardDqName(variant),
                         flashBackwardDqLaunch(variant, att.batch, att.heads, att.seq)});
    } else if (step.kind == kir::StepKind::EmbeddingGrad) {
      const kir::EmbeddingGradStep &e = step.embeddingGrad;
      needEmbedding = true;
      LibraryKernel zero{"llmc_embedding_zero", {}};
      zero.launch.block[0] = 256;
      zero.launch.grid[0] =
          std::clamp<int64_t>((e.rows * e.channels + 255) / 256, 1, 8192);
      LibraryKernel scatter{prog.buffers[e.ids.buffer].dtype == kir::DType::I64
                                ? "llmc_embedding_grad_i64"
                                : "llmc_embedding_grad_i32",
                            {}};
      scatter.launch.block[0] = 128;
      scatter.launch.grid[0] = std::max<int64_t>((e.channels + 127) / 128, 1);
      kernels = {zero, scatter};
    }
  }
  for (const FlashAttentionVariant &variant : variants) {
    std::string why;
    if (!isSupported(variant, &why))
      return llvm::createStringError(why);
  }
  if (!variants.empty() || needEmbedding) {
    llvm::Expected<CudaBinaries> compiled =
        compileCuda(cudaLibrarySource(variants), "llmc_library.cu",
                    options.nvrtc, &modules.libraryStats);
    if (!compiled)
      return compiled.takeError();
    modules.library = std::move(*compiled);
    modules.hasLibrary = true;
  }
  return modules;
}

CudaCompileFn llmc::cuda::cudaCompiler(CudaCompilerOptions options) {
  return [options = std::move(options)](const kir::Program &program) {
    return compileCudaModules(program, options);
  };
}

// The CUDA executor: device buffers, kernels compiled by codegen (the
// compile callback), cuBLASLt GEMMs (epilogue kernels codegen classified as
// a bias add, bias + GELU, GELU or the GELU gradient run inside cuBLASLt),
// flash attention, embedding gradients, CUDA graph replay and per-step
// event timing.
#include "runtime/Cuda/CudaExecutor.h"

#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaDeviceStore.h"
#include "runtime/PersistentStore.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/FormatVariadic.h"
#include "llvm/Support/JSON.h"

#include <algorithm>
#include <cmath>
#include <cstring>

using namespace llmc;
using namespace llmc::runtime;
using cuda::checkCublas;
using cuda::checkDriver;
using kir::BufferKind;

namespace {

// cuBLASLt's scratch space; 32 MiB is what NVIDIA recommends for Hopper.
constexpr size_t kGemmWorkspaceBytes = 32 << 20;

cudaDataType_t cudaType(kir::DType dtype) {
  switch (dtype) {
  case kir::DType::F16:
    return CUDA_R_16F;
  case kir::DType::BF16:
    return CUDA_R_16BF;
  default:
    return CUDA_R_32F;
  }
}

/// The largest power of two (up to 256) dividing `address`: cuBLASLt's
/// heuristic must not pick kernels that assume more alignment.
uint32_t alignmentOf(uint64_t address) {
  uint32_t alignment = 256;
  while (alignment > 1 && address % alignment != 0)
    alignment /= 2;
  return alignment;
}

std::string shapeKey(const kir::Buffer &buffer) {
  return std::string(kir::dtypeName(buffer.dtype)) +
         kir::formatShape(buffer.shape);
}

} // namespace

//===----------------------------------------------------------------------===//
// CudaExecutor::Impl
//===----------------------------------------------------------------------===//

namespace {

struct GemmPlan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t layoutA = nullptr, layoutB = nullptr,
                         layoutC = nullptr;
  cublasLtMatmulAlgo_t algo{};
  CUdeviceptr a = 0, b = 0, c = 0; // cuBLASLt's A (our B), B (our A), C
  // The epilogue kernel cuBLASLt runs (None: the kernel runs after it).
  kir::EpilogueKind fused = kir::EpilogueKind::None;
  std::string name;
};

struct KernelPlan {
  CUfunction function = nullptr;
  cuda::CudaLaunch launch;
  std::vector<CUdeviceptr> operands;
  std::vector<void *> params; // &operands[i]
};

struct AttentionPlan {
  CUfunction forward = nullptr, dkdv = nullptr, dq = nullptr;
  cuda::CudaLaunch forwardLaunch, dkdvLaunch, dqLaunch;
  cuda::AttentionForwardArgs forwardArgs;
  cuda::AttentionBackwardArgs backwardArgs;
  std::string forwardName, dkdvName, dqName;
};

struct EmbeddingPlan {
  CUfunction zero = nullptr, scatter = nullptr;
  cuda::CudaLaunch zeroLaunch, scatterLaunch;
  // The arguments of both kernels, in order; pointers to them below.
  CUdeviceptr ids = 0, grad = 0, out = 0;
  long long idsOffset, idsStride, gradOffset, gradPosStride, gradColStride,
      outOffset, outRowStride, outColStride, positions, rows, channels;
};

} // namespace

struct CudaExecutor::Impl {
  const cuda::DriverApi *cu = nullptr;
  const cuda::CublasLtApi *lt = nullptr;
  CUdevice device = 0;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  CUdeviceptr arena = 0, workspace = 0;
  std::vector<CUdeviceptr> owned; // inputs
  CUmodule kernelModule = nullptr, libraryModule = nullptr;
  cublasLtHandle_t ltHandle = nullptr;
  bool allowTf32 = false;

  std::vector<KernelPlan> kernels;             // per program kernel
  std::vector<GemmPlan> gemms;                 // per GEMM step, in order
  std::vector<AttentionPlan> attentions;       // per attention (grad) step
  std::vector<EmbeddingPlan> embeddings;       // per embedding-grad step
  std::vector<int32_t> stepPlan;               // step -> index in its list
  std::vector<CUevent> stepEvents;             // 2 per step, when profiling
  CUevent runStart = nullptr, runEnd = nullptr;

  ~Impl();
  llvm::Error launch(CUfunction function, const cuda::CudaLaunch &launch,
                     void **params);
};

CudaExecutor::Impl::~Impl() {
  if (!cu)
    return;
  cu->ctxSetCurrent(context);
  if (stream)
    cu->streamSynchronize(stream);
  if (lt) {
    for (GemmPlan &plan : gemms) {
      if (plan.layoutA)
        lt->matrixLayoutDestroy(plan.layoutA);
      if (plan.layoutB)
        lt->matrixLayoutDestroy(plan.layoutB);
      if (plan.layoutC)
        lt->matrixLayoutDestroy(plan.layoutC);
      if (plan.desc)
        lt->matmulDescDestroy(plan.desc);
    }
    if (ltHandle)
      lt->destroy(ltHandle);
  }
  for (CUevent event : stepEvents)
    cu->eventDestroy(event);
  if (runStart)
    cu->eventDestroy(runStart);
  if (runEnd)
    cu->eventDestroy(runEnd);
  if (kernelModule)
    cu->moduleUnload(kernelModule);
  if (libraryModule)
    cu->moduleUnload(libraryModule);
  if (arena)
    cu->memFree(arena);
  if (workspace)
    cu->memFree(workspace);
  for (CUdeviceptr memory : owned)
    cu->memFree(memory);
  if (stream)
    cu->streamDestroy(stream);
  if (context)
    cu->devicePrimaryCtxRelease(device);
}

llvm::Error CudaExecutor::Impl::launch(CUfunction function,
                                       const cuda::CudaLaunch &l,
                                       void **params) {
  return checkDriver(*cu,
                     cu->launchKernel(function, l.grid[0], l.grid[1],
                                      l.grid[2], l.block[0], l.block[1],
                                      l.block[2], l.sharedBytes, stream,
                                      params, nullptr),
                     "cuLaunchKernel");
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

namespace {

/// One operand of cuBLASLt: a column-major matrix `rows` x `cols` with
/// leading dimension `ld`, used as-is or transposed.
struct LtOperand {
  cublasOperation_t op = CUBLAS_OP_N;
  uint64_t rows = 0, cols = 0;
  int64_t ld = 0;
};

/// The column-major operand whose op() is the `r` x `c` matrix with
/// element (i, j) at i * rowStride + j * colStride (one stride is 1).
std::optional<LtOperand> columnMajor(int64_t r, int64_t c, int64_t rowStride,
                                     int64_t colStride) {
  if (rowStride == 1 || c == 1) // stored column-major r x c
    return LtOperand{CUBLAS_OP_N, uint64_t(r), uint64_t(c),
                     std::max<int64_t>({colStride, r, 1})};
  if (colStride == 1 || r == 1) // stored column-major c x r, transposed
    return LtOperand{CUBLAS_OP_T, uint64_t(c), uint64_t(r),
                     std::max<int64_t>({rowStride, c, 1})};
  return std::nullopt;
}

} // namespace

CudaExecutor::CudaExecutor(kir::Program program)
    : prog(std::move(program)), impl(std::make_unique<Impl>()) {}

CudaExecutor::~CudaExecutor() {
  if (graphExec && impl->cu) {
    impl->cu->ctxSetCurrent(impl->context);
    impl->cu->graphExecDestroy(static_cast<CUgraphExec>(graphExec));
  }
}

llvm::Expected<std::unique_ptr<CudaExecutor>>
CudaExecutor::create(kir::Program program, const cuda::CudaCompileFn &compile,
                     CudaExecutorOptions options) {
  // The driver first: without it nothing else matters, and the error must
  // say so plainly.
  llvm::Expected<const cuda::DriverApi *> driver = cuda::loadDriver();
  if (!driver)
    return driver.takeError();
  const cuda::DriverApi &cu = **driver;
  std::string invalid = kir::verifyProgram(program);
  if (!invalid.empty())
    return llvm::createStringError("invalid program: " + invalid);

  std::unique_ptr<CudaExecutor> executor(new CudaExecutor(std::move(program)));
  const kir::Program &prog = executor->prog;
  Impl &impl = *executor->impl;
  CudaExecutorInfo &info = executor->creationInfo;
  executor->useGraphs = options.useGraphs;
  impl.cu = &cu;
  impl.allowTf32 = options.allowTf32;
  llvm::Expected<CUcontext> context =
      cuda::enterContext(cu, options.device, &impl.device);
  if (!context) {
    impl.cu = nullptr; // nothing to release
    return context.takeError();
  }
  impl.context = *context;
  auto check = [&](CUresult result, const char *what) {
    return checkDriver(cu, result, what);
  };

  int major = 0, minor = 0;
  char name[256] = {0};
  size_t totalMemory = 0;
  cu.deviceGetAttribute(&major, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR,
                        impl.device);
  cu.deviceGetAttribute(&minor, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR,
                        impl.device);
  cu.deviceGetName(name, sizeof(name) - 1, impl.device);
  cu.deviceTotalMem(&totalMemory, impl.device);
  info.deviceName = name;
  info.computeCapability = major * 10 + minor;
  info.deviceMemoryBytes = totalMemory;

  llvm::Expected<const cuda::CublasLtApi *> lt = cuda::loadCublasLt();
  if (!lt)
    return lt.takeError();
  impl.lt = *lt;
  if (llvm::Error error =
          checkCublas(**lt, (*lt)->create(&impl.ltHandle), "cublasLtCreate"))
    return error;
  if (llvm::Error error =
          check(cu.streamCreate(&impl.stream, CU_STREAM_NON_BLOCKING),
                "cuStreamCreate"))
    return error;
  if (llvm::Error error = check(cu.eventCreate(&impl.runStart, CU_EVENT_DEFAULT),
                                "cuEventCreate"))
    return error;
  if (llvm::Error error =
          check(cu.eventCreate(&impl.runEnd, CU_EVENT_DEFAULT), "cuEventCreate"))
    return error;

  // Memory: the arena, persistent tensors from the store, inputs.
  if (llvm::Error error = check(
          cu.memAlloc(&impl.arena, std::max<int64_t>(prog.arenaBytes, 1)),
          "cuMemAlloc (arena)"))
    return llvm::createStringError(
        llvm::formatv("{0} ({1} bytes planned)",
                      llvm::toString(std::move(error)), prog.arenaBytes));
  executor->persistent = options.store;
  if (!executor->persistent) {
    auto store = CudaPersistentStore::create();
    if (!store)
      return store.takeError();
    executor->persistent = *store;
  }
  executor->bases.resize(prog.buffers.size(), 0);
  for (auto [index, buffer] : llvm::enumerate(prog.buffers)) {
    if (buffer.kind == BufferKind::Arena) {
      executor->bases[index] = impl.arena + buffer.offset;
    } else if (kir::isPersistent(buffer.kind)) {
      llvm::Expected<uint64_t> address =
          executor->persistent->bind(buffer.name, buffer.dtype, buffer.shape,
                                     buffer.initialValue);
      if (!address)
        return address.takeError();
      executor->bases[index] = *address;
    } else {
      CUdeviceptr memory = 0;
      if (llvm::Error error =
              check(cu.memAlloc(&memory, std::max<int64_t>(buffer.bytes(), 1)),
                    "cuMemAlloc (input)"))
        return error;
      impl.owned.push_back(memory);
      if (llvm::Error error = check(
              cu.memsetD8Async(memory, 0, buffer.bytes(), impl.stream),
              "cuMemsetD8Async"))
        return error;
      executor->bases[index] = memory;
      executor->hostInputs[index] =
          HostTensor::zeros(buffer.dtype, buffer.shape);
    }
  }
  if (llvm::Error error = check(cu.memAlloc(&impl.workspace,
                                            kGemmWorkspaceBytes),
                                "cuMemAlloc (cuBLASLt workspace)"))
    return error;

  // What codegen compiled for this program: its kernels, the library
  // module and the library kernels each step launches.
  llvm::Expected<cuda::CudaModules> compiled = compile(prog);
  if (!compiled)
    return compiled.takeError();
  const cuda::CudaModules &modules = *compiled;
  info.kernelsPrecompiled = modules.kernelsPrecompiled;
  info.kernelStats = modules.kernelStats;
  info.libraryStats = modules.libraryStats;
  if (modules.stepKernels.size() != prog.steps.size() ||
      (!prog.kernels.empty() &&
       modules.kernelLaunches.size() != prog.kernels.size()))
    return llvm::createStringError(
        "the CUDA compiler returned modules of another program");
  auto loadModule = [&](const cuda::CudaBinaries &binaries,
                        CUmodule *module) -> llvm::Error {
    llvm::Expected<cuda::CudaImage> image =
        binaries.imageFor(info.computeCapability);
    if (!image)
      return image.takeError();
    if (module == &impl.kernelModule)
      info.kernelImage = llvm::formatv("{0}_{1} {2}", image->isPtx ? "compute" : "sm",
                                       image->arch, image->isPtx ? "PTX" : "cubin")
                             .str();
    return check(cu.moduleLoadData(module, image->data), "cuModuleLoadData");
  };
  if (!prog.kernels.empty()) {
    if (llvm::Error error = loadModule(modules.kernels, &impl.kernelModule))
      return error;
    for (auto [index, kernel] : llvm::enumerate(prog.kernels)) {
      KernelPlan &plan = impl.kernels.emplace_back();
      if (llvm::Error error =
              check(cu.moduleGetFunction(&plan.function, impl.kernelModule,
                                         kernel.name.c_str()),
                    "cuModuleGetFunction"))
        return llvm::createStringError("kernel '" + kernel.name + "': " +
                                       llvm::toString(std::move(error)));
      plan.launch = modules.kernelLaunches[index];
      for (const kir::Access &access : kernel.operands)
        plan.operands.push_back(executor->bases[access.buffer]);
    }
    // The operand vectors no longer move: point the parameters at them.
    for (KernelPlan &plan : impl.kernels)
      for (CUdeviceptr &operand : plan.operands)
        plan.params.push_back(&operand);
  }
  if (modules.hasLibrary)
    if (llvm::Error error = loadModule(modules.library, &impl.libraryModule))
      return error;
  auto libraryFunction = [&](const std::string &fn,
                             CUfunction *out) -> llvm::Error {
    if (!impl.libraryModule)
      return llvm::createStringError("kernel '" + fn +
                                     "': the CUDA compiler made no library "
                                     "module");
    if (llvm::Error error = check(
            cu.moduleGetFunction(out, impl.libraryModule, fn.c_str()),
            "cuModuleGetFunction"))
      return llvm::createStringError("kernel '" + fn + "': " +
                                     llvm::toString(std::move(error)));
    return llvm::Error::success();
  };
  // The library kernels of step `index` (as many as its kind launches).
  auto stepKernels = [&](size_t index, size_t count)
      -> llvm::Expected<const std::vector<cuda::LibraryKernel> *> {
    const std::vector<cuda::LibraryKernel> &kernels =
        modules.stepKernels[index];
    if (kernels.size() != count)
      return llvm::createStringError(llvm::formatv(
          "step {0} ('{1}'): the CUDA compiler gave {2} library kernels, "
          "not {3}",
          index, prog.steps[index].origin, kernels.size(), count));
    return &kernels;
  };

  // Per step: its plan.
  auto address = [&](const kir::View &view) {
    return executor->bases[view.buffer];
  };
  auto viewArgs = [](const kir::View &view) {
    cuda::AttentionViewArgs args;
    args.offset = view.offset;
    args.batch = view.strides.size() > 0 ? view.strides[0] : 0;
    args.head = view.strides.size() > 1 ? view.strides[1] : 0;
    args.seq = view.strides.size() > 2 ? view.strides[2] : 0;
    args.dim = view.strides.size() > 3 ? view.strides[3] : 0;
    return args;
  };
  // Per GEMM key: the algorithm, and whether it runs the epilogue.
  std::map<std::string, std::pair<cublasLtMatmulAlgo_t, bool>> algoCache;
  for (auto [stepIndex, step] : llvm::enumerate(prog.steps)) {
    switch (step.kind) {
    case kir::StepKind::Kernel:
      impl.stepPlan.push_back(step.kernel);
      break;
    case kir::StepKind::Gemm: {
      const kir::GemmStep &g = step.gemm;
      impl.stepPlan.push_back(impl.gemms.size());
      GemmPlan &plan = impl.gemms.emplace_back();
      const kir::Buffer &bufA = prog.buffers[g.a.buffer];
      const kir::Buffer &bufB = prog.buffers[g.b.buffer];
      const kir::Buffer &bufC = prog.buffers[g.c.buffer];
      int64_t elemA = kir::dtypeBytes(bufA.dtype);
      int64_t elemB = kir::dtypeBytes(bufB.dtype);
      int64_t elemC = kir::dtypeBytes(bufC.dtype);
      plan.name = llvm::formatv("gemm {0}x{1}x{2}{3}", g.m, g.n, g.k,
                                g.batch > 1 ? llvm::formatv(" b{0}", g.batch).str()
                                            : std::string())
                      .str();
      // Row-major C = op(A) op(B) is column-major C^T = op(B)^T op(A)^T:
      // cuBLASLt's A is our B and its B our A.
      int64_t aM = g.transA ? g.a.strides[2] : g.a.strides[1];
      int64_t aK = g.transA ? g.a.strides[1] : g.a.strides[2];
      int64_t bK = g.transB ? g.b.strides[2] : g.b.strides[1];
      int64_t bN = g.transB ? g.b.strides[1] : g.b.strides[2];
      std::optional<LtOperand> ltA = columnMajor(g.n, g.k, bN, bK);
      std::optional<LtOperand> ltB = columnMajor(g.k, g.m, aK, aM);
      if (!ltA || !ltB || (g.c.strides[2] != 1 && g.n != 1))
        return llvm::createStringError(
            "GEMM step '" + step.origin +
            "': an operand has no unit stride, which cuBLASLt needs");
      LtOperand ltC{CUBLAS_OP_N, uint64_t(g.n), uint64_t(g.m),
                    std::max<int64_t>({g.c.strides[1], g.n, 1})};
      plan.a = address(g.b) + g.b.offset * elemB;
      plan.b = address(g.a) + g.a.offset * elemA;
      plan.c = address(g.c) + g.c.offset * elemC;
      bool f32 = bufA.dtype == kir::DType::F32 &&
                 bufB.dtype == kir::DType::F32;
      cublasComputeType_t compute =
          f32 && impl.allowTf32 ? CUBLAS_COMPUTE_32F_FAST_TF32
                                : CUBLAS_COMPUTE_32F;
      const cuda::CublasLtApi &api = *impl.lt;
      auto lt = [&](cublasStatus_t status, const char *what) {
        return checkCublas(api, status, what);
      };
      if (llvm::Error error =
              lt(api.matmulDescCreate(&plan.desc, compute, CUDA_R_32F),
                 "cublasLtMatmulDescCreate"))
        return error;
      api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                 &ltA->op, sizeof(ltA->op));
      api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                 &ltB->op, sizeof(ltB->op));
      // The epilogue kernel runs inside cuBLASLt when codegen classified
      // it as one cuBLASLt computes (kir::GemmStep::epilogueKind) and its
      // vectors are placed as cuBLASLt wants: 16-byte aligned, the aux
      // leading dimension a multiple of 8 elements.
      kir::EpilogueKind fusedKind =
          g.epilogue >= 0 && options.fuseEpilogues ? g.epilogueKind
                                                   : kir::EpilogueKind::None;
      bool hasBias = fusedKind == kir::EpilogueKind::Bias ||
                     fusedKind == kir::EpilogueKind::GeluBias;
      bool hasAux = fusedKind == kir::EpilogueKind::DGelu;
      int64_t auxLd = hasAux ? g.epilogueAux.strides[0] : 0;
      CUdeviceptr biasPointer =
          hasBias ? executor->bases[g.epilogueBias.buffer] +
                        g.epilogueBias.offset * 4
                  : 0;
      CUdeviceptr auxPointer =
          hasAux ? executor->bases[g.epilogueAux.buffer] +
                       g.epilogueAux.offset * 4
                 : 0;
      uint32_t biasAlignment = hasBias ? alignmentOf(biasPointer) : 0;
      uint32_t auxAlignment = auxPointer ? alignmentOf(auxPointer) : 0;
      if ((hasBias && biasAlignment < 16) ||
          (auxPointer && (auxAlignment < 16 || auxLd % 8 != 0)))
        fusedKind = kir::EpilogueKind::None;
      auto setEpilogue = [&](kir::EpilogueKind kind) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        switch (kind) {
        case kir::EpilogueKind::None:
          break;
        case kir::EpilogueKind::Bias:
          epilogue = CUBLASLT_EPILOGUE_BIAS;
          break;
        case kir::EpilogueKind::GeluBias:
          epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
          break;
        case kir::EpilogueKind::Gelu:
          epilogue = CUBLASLT_EPILOGUE_GELU;
          break;
        case kir::EpilogueKind::DGelu:
          epilogue = CUBLASLT_EPILOGUE_DGELU;
          break;
        }
        api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                   &epilogue, sizeof(epilogue));
        if (kind == kir::EpilogueKind::Bias ||
            kind == kir::EpilogueKind::GeluBias)
          api.matmulDescSetAttribute(plan.desc,
                                     CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                     &biasPointer, sizeof(biasPointer));
        if (kind == kir::EpilogueKind::DGelu) {
          // The GELU input, in C's column-major layout (n x m, ld auxLd).
          api.matmulDescSetAttribute(plan.desc,
                                     CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                     &auxPointer, sizeof(auxPointer));
          api.matmulDescSetAttribute(plan.desc,
                                     CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                     &auxLd, sizeof(auxLd));
        }
        plan.fused = kind;
      };
      if (fusedKind != kir::EpilogueKind::None)
        setEpilogue(fusedKind);
      // Counted once the algorithm is known (cuBLASLt may have none).
      auto countFused = [&] {
        if (plan.fused == kir::EpilogueKind::Bias)
          ++info.fusedBiasEpilogues;
        else if (plan.fused == kir::EpilogueKind::DGelu)
          ++info.fusedDGeluEpilogues;
        else if (plan.fused != kir::EpilogueKind::None)
          ++info.fusedGeluEpilogues;
      };
      auto layout = [&](cublasLtMatrixLayout_t *out, kir::DType dtype,
                        const LtOperand &operand,
                        int64_t batchStride) -> llvm::Error {
        if (llvm::Error error = lt(
                api.matrixLayoutCreate(out, cudaType(dtype), operand.rows,
                                       operand.cols, operand.ld),
                "cublasLtMatrixLayoutCreate"))
          return error;
        if (g.batch > 1) {
          int32_t count = g.batch;
          api.matrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                       &count, sizeof(count));
          api.matrixLayoutSetAttribute(
              *out, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &batchStride,
              sizeof(batchStride));
        }
        return llvm::Error::success();
      };
      if (llvm::Error error =
              layout(&plan.layoutA, bufB.dtype, *ltA, g.b.strides[0]))
        return error;
      if (llvm::Error error =
              layout(&plan.layoutB, bufA.dtype, *ltB, g.a.strides[0]))
        return error;
      if (llvm::Error error =
              layout(&plan.layoutC, bufC.dtype, ltC, g.c.strides[0]))
        return error;
      uint32_t alignA = alignmentOf(plan.a), alignB = alignmentOf(plan.b),
               alignC = alignmentOf(plan.c);
      std::string key = llvm::formatv(
          "{0} {1} {2} {3} {4}{5}{6} {7} {8} {9} {10} {11} {12} {13} {14} {15} "
          "{16} {17} {18}",
          g.batch, g.m, g.n, g.k, int(ltA->op), int(ltB->op), int(compute),
          ltA->ld, ltB->ld, ltC.ld, g.a.strides[0], g.b.strides[0],
          g.c.strides[0], alignA, alignB, alignC,
          shapeKey(bufA) + shapeKey(bufB) + shapeKey(bufC), int(plan.fused),
          biasAlignment);
      key += llvm::formatv(" {0} {1}", auxAlignment, auxLd).str();
      auto cached = algoCache.find(key);
      if (cached != algoCache.end()) {
        plan.algo = cached->second.first;
        if (!cached->second.second && plan.fused != kir::EpilogueKind::None)
          setEpilogue(kir::EpilogueKind::None);
        countFused();
        break;
      }
      cublasLtMatmulPreference_t preference = nullptr;
      if (llvm::Error error = lt(api.matmulPreferenceCreate(&preference),
                                 "cublasLtMatmulPreferenceCreate"))
        return error;
      uint64_t workspaceBytes = kGemmWorkspaceBytes;
      api.matmulPreferenceSetAttribute(preference,
                                       CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                       &workspaceBytes, sizeof(workspaceBytes));
      for (auto [attribute, value] :
           {std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignA},
            std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignB},
            std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
            std::pair{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}})
        api.matmulPreferenceSetAttribute(preference, attribute, &value,
                                         sizeof(value));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      cublasStatus_t status = api.matmulAlgoGetHeuristic(
          impl.ltHandle, plan.desc, plan.layoutA, plan.layoutB, plan.layoutC,
          plan.layoutC, preference, 1, &result, &found);
      if ((status != CUBLAS_STATUS_SUCCESS || found == 0) &&
          plan.fused != kir::EpilogueKind::None) {
        // No algorithm runs this epilogue here (cuBLASLt supports some
        // epilogues for some types and layouts only): the kernel does.
        setEpilogue(kir::EpilogueKind::None);
        status = api.matmulAlgoGetHeuristic(
            impl.ltHandle, plan.desc, plan.layoutA, plan.layoutB,
            plan.layoutC, plan.layoutC, preference, 1, &result, &found);
      }
      api.matmulPreferenceDestroy(preference);
      if (status != CUBLAS_STATUS_SUCCESS || found == 0)
        return llvm::createStringError(llvm::formatv(
            "cuBLASLt has no algorithm for GEMM step '{0}' ({1}, {2}): {3}",
            step.origin, plan.name, key, api.getStatusString(status)));
      plan.algo = result.algo;
      algoCache[key] = {result.algo, plan.fused != kir::EpilogueKind::None};
      countFused();
      break;
    }
    case kir::StepKind::Attention:
    case kir::StepKind::AttentionGrad: {
      impl.stepPlan.push_back(impl.attentions.size());
      AttentionPlan &plan = impl.attentions.emplace_back();
      bool forward = step.kind == kir::StepKind::Attention;
      const kir::View &q = forward ? step.attention.q : step.attentionGrad.q;
      kir::DType dtype = prog.buffers[q.buffer].dtype;
      llvm::Expected<const std::vector<cuda::LibraryKernel> *> kernels =
          stepKernels(stepIndex, forward ? 1 : 2);
      if (!kernels)
        return kernels.takeError();
      if (forward) {
        const kir::AttentionStep &att = step.attention;
        for (const kir::View *view : {&att.k, &att.v, &att.out})
          if (prog.buffers[view->buffer].dtype != dtype)
            return llvm::createStringError(
                "attention step '" + step.origin +
                "': q, k, v and out must share one dtype");
        if (prog.buffers[att.lse.buffer].dtype != kir::DType::F32)
          return llvm::createStringError("attention step '" + step.origin +
                                         "': lse must be f32");
        plan.forwardName = (**kernels)[0].name;
        if (llvm::Error error =
                libraryFunction(plan.forwardName, &plan.forward))
          return error;
        plan.forwardLaunch = (**kernels)[0].launch;
        cuda::AttentionForwardArgs &args = plan.forwardArgs;
        args.q = reinterpret_cast<const void *>(address(att.q));
        args.k = reinterpret_cast<const void *>(address(att.k));
        args.v = reinterpret_cast<const void *>(address(att.v));
        args.out = reinterpret_cast<void *>(address(att.out));
        args.lse = reinterpret_cast<float *>(address(att.lse));
        args.vq = viewArgs(att.q);
        args.vk = viewArgs(att.k);
        args.vv = viewArgs(att.v);
        args.vout = viewArgs(att.out);
        args.vlse = viewArgs(att.lse);
        args.vlse.dim = 0;
        args.batch = att.batch;
        args.heads = att.heads;
        args.seq = att.seq;
        args.causal = att.causal;
        args.scale = att.scale;
      } else {
        const kir::AttentionGradStep &att = step.attentionGrad;
        for (const kir::View *view :
             {&att.dout, &att.k, &att.v, &att.out, &att.dq, &att.dk, &att.dv})
          if (prog.buffers[view->buffer].dtype != dtype)
            return llvm::createStringError(
                "attention gradient step '" + step.origin +
                "': its tensors must share one dtype");
        plan.dkdvName = (**kernels)[0].name;
        plan.dqName = (**kernels)[1].name;
        if (llvm::Error error = libraryFunction(plan.dkdvName, &plan.dkdv))
          return error;
        if (llvm::Error error = libraryFunction(plan.dqName, &plan.dq))
          return error;
        plan.dkdvLaunch = (**kernels)[0].launch;
        plan.dqLaunch = (**kernels)[1].launch;
        cuda::AttentionBackwardArgs &args = plan.backwardArgs;
        args.dout = reinterpret_cast<const void *>(address(att.dout));
        args.q = reinterpret_cast<const void *>(address(att.q));
        args.k = reinterpret_cast<const void *>(address(att.k));
        args.v = reinterpret_cast<const void *>(address(att.v));
        args.out = reinterpret_cast<const void *>(address(att.out));
        args.lse = reinterpret_cast<const float *>(address(att.lse));
        args.dq = reinterpret_cast<void *>(address(att.dq));
        args.dk = reinterpret_cast<void *>(address(att.dk));
        args.dv = reinterpret_cast<void *>(address(att.dv));
        args.vdout = viewArgs(att.dout);
        args.vq = viewArgs(att.q);
        args.vk = viewArgs(att.k);
        args.vv = viewArgs(att.v);
        args.vout = viewArgs(att.out);
        args.vlse = viewArgs(att.lse);
        args.vlse.dim = 0;
        args.vdq = viewArgs(att.dq);
        args.vdk = viewArgs(att.dk);
        args.vdv = viewArgs(att.dv);
        args.batch = att.batch;
        args.heads = att.heads;
        args.seq = att.seq;
        args.causal = att.causal;
        args.scale = att.scale;
      }
      break;
    }
    case kir::StepKind::EmbeddingGrad: {
      const kir::EmbeddingGradStep &e = step.embeddingGrad;
      impl.stepPlan.push_back(impl.embeddings.size());
      EmbeddingPlan &plan = impl.embeddings.emplace_back();
      llvm::Expected<const std::vector<cuda::LibraryKernel> *> kernels =
          stepKernels(stepIndex, 2);
      if (!kernels)
        return kernels.takeError();
      if (llvm::Error error = libraryFunction((**kernels)[0].name, &plan.zero))
        return error;
      if (llvm::Error error =
              libraryFunction((**kernels)[1].name, &plan.scatter))
        return error;
      plan.ids = address(e.ids);
      plan.grad = address(e.grad);
      plan.out = address(e.out);
      plan.idsOffset = e.ids.offset;
      plan.idsStride = e.ids.strides[0];
      plan.gradOffset = e.grad.offset;
      plan.gradPosStride = e.grad.strides[0];
      plan.gradColStride = e.grad.strides[1];
      plan.outOffset = e.out.offset;
      plan.outRowStride = e.out.strides[0];
      plan.outColStride = e.out.strides[1];
      plan.positions = e.positions;
      plan.rows = e.rows;
      plan.channels = e.channels;
      plan.zeroLaunch = (**kernels)[0].launch;
      plan.scatterLaunch = (**kernels)[1].launch;
      break;
    }
    }
  }
  if (llvm::Error error =
          check(cu.streamSynchronize(impl.stream), "cuStreamSynchronize"))
    return error;
  return executor;
}

//===----------------------------------------------------------------------===//
// Tensors in and out
//===----------------------------------------------------------------------===//

llvm::Error CudaExecutor::setTensor(llvm::StringRef name,
                                    const HostTensor &tensor) {
  const cuda::DriverApi &cu = *impl->cu;
  for (const std::vector<kir::Binding> *list :
       {&prog.params, &prog.states, &prog.inputs})
    for (const kir::Binding &binding : *list) {
      if (binding.name != name)
        continue;
      const kir::Buffer &buffer = prog.buffers[binding.buffer];
      if (tensor.shape != buffer.shape)
        return llvm::createStringError(
            "tensor '" + name + "' has shape " +
            kir::formatShape(tensor.shape) + ", the model expects " +
            kir::formatShape(buffer.shape));
      if (tensor.dtype != buffer.dtype)
        return llvm::createStringError(
            "tensor '" + name + "' is " + kir::dtypeName(tensor.dtype) +
            ", the model expects " + kir::dtypeName(buffer.dtype));
      cu.ctxSetCurrent(impl->context);
      if (llvm::Error error = checkDriver(
              cu,
              cu.memcpyHtoDAsync(bases[binding.buffer], tensor.bytes.data(),
                                 buffer.bytes(), impl->stream),
              "cuMemcpyHtoDAsync"))
        return error;
      if (buffer.kind == BufferKind::Input)
        hostInputs[binding.buffer] = tensor;
      return checkDriver(cu, cu.streamSynchronize(impl->stream),
                         "cuStreamSynchronize");
    }
  return llvm::createStringError("the model has no parameter, state or "
                                 "input '" + name + "'");
}

void CudaExecutor::setRng(uint64_t seed, uint64_t step) {
  for (const kir::Binding &input : prog.inputs)
    if (input.name == kir::kRngInputName) {
      HostTensor rng = HostTensor::zeros(kir::DType::I64, {2});
      rng.i64()[0] = int64_t(seed);
      rng.i64()[1] = int64_t(step);
      llvm::consumeError(setTensor(input.name, rng));
    }
}

llvm::Expected<HostTensor> CudaExecutor::output(llvm::StringRef name) const {
  const cuda::DriverApi &cu = *impl->cu;
  for (const std::vector<kir::Binding> *list :
       {&prog.outputs, &prog.params, &prog.states, &prog.inputs})
    for (const kir::Binding &binding : *list) {
      if (binding.name != name)
        continue;
      const kir::Buffer &buffer = prog.buffers[binding.buffer];
      HostTensor tensor = HostTensor::zeros(buffer.dtype, buffer.shape);
      cu.ctxSetCurrent(impl->context);
      if (llvm::Error error = checkDriver(
              cu,
              cu.memcpyDtoHAsync(tensor.bytes.data(), bases[binding.buffer],
                                 buffer.bytes(), impl->stream),
              "cuMemcpyDtoHAsync"))
        return error;
      if (llvm::Error error = checkDriver(
              cu, cu.streamSynchronize(impl->stream), "cuStreamSynchronize"))
        return error;
      return tensor;
    }
  return llvm::createStringError("the program has no output '" + name + "'");
}

llvm::Error CudaExecutor::checkIds() const {
  for (const kir::Binding &input : prog.inputs) {
    const kir::Buffer &buffer = prog.buffers[input.buffer];
    if (buffer.idBound <= 0)
      continue;
    const HostTensor &tensor = hostInputs.at(input.buffer);
    for (int64_t i = 0; i < buffer.numElements(); ++i) {
      int64_t id = buffer.dtype == kir::DType::I32 ? tensor.i32()[i]
                                                   : tensor.i64()[i];
      if (id < 0 || id >= buffer.idBound)
        return llvm::createStringError(llvm::formatv(
            "input '{0}' holds id {1} at position {2}, outside [0, {3})",
            input.name, id, i, buffer.idBound));
    }
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Running
//===----------------------------------------------------------------------===//

llvm::Error CudaExecutor::enqueueSchedule(bool timed) {
  Impl &im = *impl;
  const cuda::DriverApi &cu = *im.cu;
  if (timed && im.stepEvents.size() < 2 * prog.steps.size()) {
    while (im.stepEvents.size() < 2 * prog.steps.size()) {
      CUevent event;
      if (llvm::Error error = checkDriver(
              cu, cu.eventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"))
        return error;
      im.stepEvents.push_back(event);
    }
  }
  for (auto [index, step] : llvm::enumerate(prog.steps)) {
    if (timed)
      cu.eventRecord(im.stepEvents[2 * index], im.stream);
    int32_t plan = im.stepPlan[index];
    switch (step.kind) {
    case kir::StepKind::Kernel: {
      KernelPlan &kernel = im.kernels[plan];
      if (llvm::Error error = im.launch(kernel.function, kernel.launch,
                                        kernel.params.data()))
        return error;
      break;
    }
    case kir::StepKind::Gemm: {
      GemmPlan &gemm = im.gemms[plan];
      // Accumulating (a gradient summed into its buffer): D = A x B + C, C = D.
      float alpha = 1.0f, beta = step.gemm.accumulate ? 1.0f : 0.0f;
      if (llvm::Error error = checkCublas(
              *im.lt,
              im.lt->matmul(im.ltHandle, gemm.desc, &alpha,
                            reinterpret_cast<const void *>(gemm.a),
                            gemm.layoutA,
                            reinterpret_cast<const void *>(gemm.b),
                            gemm.layoutB, &beta,
                            reinterpret_cast<const void *>(gemm.c),
                            gemm.layoutC, reinterpret_cast<void *>(gemm.c),
                            gemm.layoutC, &gemm.algo,
                            reinterpret_cast<void *>(im.workspace),
                            kGemmWorkspaceBytes, im.stream),
              "cublasLtMatmul"))
        return error;
      if (step.gemm.epilogue >= 0 && gemm.fused == kir::EpilogueKind::None) {
        KernelPlan &kernel = im.kernels[step.gemm.epilogue];
        if (llvm::Error error = im.launch(kernel.function, kernel.launch,
                                          kernel.params.data()))
          return error;
      }
      break;
    }
    case kir::StepKind::Attention: {
      AttentionPlan &att = im.attentions[plan];
      void *params[] = {&att.forwardArgs};
      if (llvm::Error error =
              im.launch(att.forward, att.forwardLaunch, params))
        return error;
      break;
    }
    case kir::StepKind::AttentionGrad: {
      AttentionPlan &att = im.attentions[plan];
      void *params[] = {&att.backwardArgs};
      if (llvm::Error error = im.launch(att.dkdv, att.dkdvLaunch, params))
        return error;
      if (llvm::Error error = im.launch(att.dq, att.dqLaunch, params))
        return error;
      break;
    }
    case kir::StepKind::EmbeddingGrad: {
      EmbeddingPlan &e = im.embeddings[plan];
      void *zero[] = {&e.out,          &e.outOffset, &e.outRowStride,
                      &e.outColStride, &e.rows,      &e.channels};
      if (!step.embeddingGrad.accumulate)
        if (llvm::Error error = im.launch(e.zero, e.zeroLaunch, zero))
          return error;
      void *scatter[] = {&e.ids,          &e.idsOffset,     &e.idsStride,
                         &e.grad,         &e.gradOffset,    &e.gradPosStride,
                         &e.gradColStride, &e.out,          &e.outOffset,
                         &e.outRowStride, &e.outColStride,  &e.positions,
                         &e.channels};
      if (llvm::Error error = im.launch(e.scatter, e.scatterLaunch, scatter))
        return error;
      break;
    }
    }
    if (timed)
      cu.eventRecord(im.stepEvents[2 * index + 1], im.stream);
  }
  return llvm::Error::success();
}

llvm::Error CudaExecutor::run() {
  if (llvm::Error error = checkIds())
    return error;
  Impl &im = *impl;
  const cuda::DriverApi &cu = *im.cu;
  cu.ctxSetCurrent(im.context);
  bool replay = graphExec && !profiling;
  cu.eventRecord(im.runStart, im.stream);
  if (replay) {
    if (llvm::Error error = checkDriver(
            cu, cu.graphLaunch(static_cast<CUgraphExec>(graphExec), im.stream),
            "cuGraphLaunch"))
      return error;
  } else if (llvm::Error error = enqueueSchedule(profiling)) {
    cu.streamSynchronize(im.stream);
    return error;
  }
  cu.eventRecord(im.runEnd, im.stream);
  if (llvm::Error error = checkDriver(cu, cu.streamSynchronize(im.stream),
                                      "running the schedule"))
    return error;
  float ms = 0;
  cu.eventElapsedTime(&ms, im.runStart, im.runEnd);
  lastRunMs = ms;

  if (profiling && !replay) {
    for (auto [index, step] : llvm::enumerate(prog.steps)) {
      float stepMs = 0;
      cu.eventElapsedTime(&stepMs, im.stepEvents[2 * index],
                          im.stepEvents[2 * index + 1]);
      double seconds = stepMs / 1000.0;
      std::string name;
      int32_t plan = im.stepPlan[index];
      switch (step.kind) {
      case kir::StepKind::Kernel:
        stepProfile.kernelSeconds += seconds;
        name = prog.kernels[step.kernel].name;
        break;
      case kir::StepKind::Gemm:
        stepProfile.gemmSeconds += seconds;
        name = im.gemms[plan].name;
        if (step.gemm.epilogue >= 0)
          name += im.gemms[plan].fused != kir::EpilogueKind::None
                      ? std::string(" +") +
                            kir::epilogueKindName(im.gemms[plan].fused) +
                            "(cuBLASLt)"
                      : " +" + prog.kernels[step.gemm.epilogue].name;
        break;
      case kir::StepKind::Attention:
        stepProfile.attentionSeconds += seconds;
        name = im.attentions[plan].forwardName;
        break;
      case kir::StepKind::AttentionGrad:
        stepProfile.attentionGradSeconds += seconds;
        name = im.attentions[plan].dkdvName + " + dq";
        break;
      case kir::StepKind::EmbeddingGrad:
        stepProfile.embeddingGradSeconds += seconds;
        name = "llmc_embedding_grad";
        break;
      }
      CudaStepProfile::Entry &entry = stepProfile.perKernel[name];
      entry.seconds += seconds;
      ++entry.launches;
    }
    ++stepProfile.runs;
  }

  // The schedule ran: capture it once for replay.
  if (useGraphs && !graphExec && !profiling) {
    if (llvm::Error error = checkDriver(
            cu,
            cu.streamBeginCapture(im.stream, CU_STREAM_CAPTURE_MODE_THREAD_LOCAL),
            "cuStreamBeginCapture"))
      return error;
    llvm::Error enqueued = enqueueSchedule(false);
    CUgraph graph = nullptr;
    CUresult ended = cu.streamEndCapture(im.stream, &graph);
    if (enqueued) {
      if (graph)
        cu.graphDestroy(graph);
      return enqueued;
    }
    if (llvm::Error error = checkDriver(cu, ended, "cuStreamEndCapture"))
      return error;
    CUgraphExec exec = nullptr;
    CUresult instantiated = cu.graphInstantiate(&exec, graph, 0);
    cu.graphDestroy(graph);
    if (llvm::Error error =
            checkDriver(cu, instantiated, "cuGraphInstantiate"))
      return error;
    graphExec = exec;
  }
  ranOnce = true;
  return llvm::Error::success();
}

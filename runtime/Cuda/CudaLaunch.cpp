// What the CUDA executor launches: modules, per-step plans, enqueueSchedule.
#include "runtime/Cuda/CudaLaunch.h"
#include "runtime/Cuda/GemmDescription.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

using namespace llmc;
using namespace llmc::runtime;
using cuda::checkCublas;
using cuda::checkDriver;
using Impl = CudaExecutor::Impl;
using GemmPlan = Impl::GemmPlan;
using KernelPlan = Impl::KernelPlan;
using AttentionPlan = Impl::AttentionPlan;
using EmbeddingPlan = Impl::EmbeddingPlan;

namespace {

cuda::AttentionViewArgs viewArgs(const kir::View &view) {
  cuda::AttentionViewArgs args;
  args.offset = view.offset;
  args.batch = view.strides.size() > 0 ? view.strides[0] : 0;
  args.head = view.strides.size() > 1 ? view.strides[1] : 0;
  args.seq = view.strides.size() > 2 ? view.strides[2] : 0;
  args.dim = view.strides.size() > 3 ? view.strides[3] : 0;
  return args;
}

/// The vectors of an epilogue cuBLASLt runs: the bias (of type biasType),
/// or the GELU input (aux, of D's type) with its leading dimension.
struct EpilogueOperands {
  CUdeviceptr bias = 0, aux = 0;
  int64_t auxLd = 0;
  cudaDataType_t biasType = CUDA_R_32F;
};

/// Makes `plan`'s descriptor run epilogue `kind` (None: cuBLASLt's default,
/// the epilogue kernel runs after the GEMM) and records it in plan.fused.
void setEpilogue(const cuda::CublasLtApi &api, GemmPlan &plan,
                 kir::EpilogueKind kind, const EpilogueOperands &operands) {
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
  if (kind == kir::EpilogueKind::Bias || kind == kir::EpilogueKind::GeluBias) {
    // Set, as llm.c does, though D's type is the default: a bf16 or f16 bias
    // for a narrow D, f32 for f32 (describeGemm requires D's type).
    int32_t biasType = operands.biasType;
    api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE,
                               &biasType, sizeof(biasType));
    api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                               &operands.bias, sizeof(operands.bias));
  }
  if (kind == kir::EpilogueKind::DGelu) {
    // The GELU input, in C's column-major layout (n x m, ld auxLd) and of
    // its type (CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_DATA_TYPE left at its
    // default, D's).
    api.matmulDescSetAttribute(plan.desc,
                               CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                               &operands.aux, sizeof(operands.aux));
    api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                               &operands.auxLd, sizeof(operands.auxLd));
  }
  plan.fused = kind;
}

/// Counts an epilogue cuBLASLt runs, once the algorithm is known (cuBLASLt
/// may have none for it).
void countFused(kir::EpilogueKind fused, CudaExecutorInfo &info) {
  if (fused == kir::EpilogueKind::Bias)
    ++info.fusedBiasEpilogues;
  else if (fused == kir::EpilogueKind::DGelu)
    ++info.fusedDGeluEpilogues;
  else if (fused != kir::EpilogueKind::None)
    ++info.fusedGeluEpilogues;
}

/// The layout of one operand of a GEMM of `batch` matrices `batchStride`
/// elements apart.
llvm::Error createLayout(const cuda::CublasLtApi &api,
                         cublasLtMatrixLayout_t *out, cudaDataType_t type,
                         const LtOperand &operand, int64_t batch,
                         int64_t batchStride) {
  if (llvm::Error error = checkCublas(
          api,
          api.matrixLayoutCreate(out, type, operand.rows,
                                 operand.cols, operand.ld),
          "cublasLtMatrixLayoutCreate"))
    return error;
  if (batch > 1) {
    int32_t count = batch;
    api.matrixLayoutSetAttribute(*out, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT,
                                 &count, sizeof(count));
    api.matrixLayoutSetAttribute(*out,
                                 CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET,
                                 &batchStride, sizeof(batchStride));
  }
  return llvm::Error::success();
}

/// Builds the launch plans of one executor: loads the modules codegen
/// compiled, then plans each step in order.
class LaunchPlanner {
public:
  LaunchPlanner(Impl &impl, const kir::Program &prog,
                const std::vector<uint64_t> &bases,
                const cuda::CudaModules &modules,
                const CudaExecutorOptions &options, CudaExecutorInfo &info)
      : impl(impl), cu(*impl.cu), prog(prog), bases(bases), modules(modules),
        options(options), info(info) {}

  /// The kernel module with a plan per program kernel, and the library
  /// module.
  llvm::Error loadModules();
  llvm::Error planStep(size_t index, const kir::Step &step);

private:
  llvm::Error loadModule(const cuda::CudaBinaries &binaries, CUmodule *module);
  /// The multi-tensor launches: functions, device tables, stepBatch.
  llvm::Error planBatches();
  llvm::Error libraryFunction(const std::string &fn, CUfunction *out);
  /// Function `name` of `module`; an error names the kernel.
  llvm::Error moduleFunction(CUmodule module, const std::string &name,
                             CUfunction *out);
  // The library kernels of step `index` (as many as its kind launches).
  llvm::Expected<const std::vector<cuda::LibraryKernel> *>
  stepKernels(size_t index, size_t count);
  uint64_t address(const kir::View &view) const { return bases[view.buffer]; }

  llvm::Error planGemm(const kir::Step &step);
  /// The algorithm for `plan` from the cache or cuBLASLt's heuristic; drops
  /// the fused epilogue where no algorithm runs it.
  llvm::Error chooseAlgorithm(const kir::Step &step, GemmPlan &plan,
                              const std::string &key, uint32_t alignA,
                              uint32_t alignB, uint32_t alignC);
  llvm::Error planAttention(size_t index, const kir::Step &step);
  llvm::Error planEmbeddingGrad(size_t index, const kir::Step &step);

  Impl &impl;
  const cuda::DriverApi &cu;
  const kir::Program &prog;
  const std::vector<uint64_t> &bases;
  const cuda::CudaModules &modules;
  const CudaExecutorOptions &options;
  CudaExecutorInfo &info;
  // Per GEMM key: the algorithm, and whether it runs the epilogue.
  std::map<std::string, std::pair<cublasLtMatmulAlgo_t, bool>> algoCache;
};

llvm::Error LaunchPlanner::loadModule(const cuda::CudaBinaries &binaries,
                                      CUmodule *module) {
  llvm::Expected<cuda::CudaImage> image =
      binaries.imageFor(info.computeCapability);
  if (!image)
    return image.takeError();
  if (module == &impl.kernelModule)
    info.kernelImage = llvm::formatv("{0}_{1} {2}", image->isPtx ? "compute" : "sm",
                                     image->arch, image->isPtx ? "PTX" : "cubin")
                           .str();
  return checkDriver(cu, cu.moduleLoadData(module, image->data),
                     "cuModuleLoadData");
}

llvm::Error LaunchPlanner::loadModules() {
  if (!prog.kernels.empty()) {
    if (llvm::Error error = loadModule(modules.kernels, &impl.kernelModule))
      return error;
    for (auto [index, kernel] : llvm::enumerate(prog.kernels)) {
      KernelPlan &plan = impl.kernels.emplace_back();
      if (llvm::Error error =
              moduleFunction(impl.kernelModule, kernel.name, &plan.function))
        return error;
      plan.launch = modules.kernelLaunches[index];
      for (const kir::Access &access : kernel.operands)
        plan.operands.push_back(bases[access.buffer]);
    }
    // The operand vectors no longer move: point the parameters at them.
    for (KernelPlan &plan : impl.kernels)
      for (CUdeviceptr &operand : plan.operands)
        plan.params.push_back(&operand);
  }
  if (modules.hasLibrary)
    if (llvm::Error error = loadModule(modules.library, &impl.libraryModule))
      return error;
  return planBatches();
}

llvm::Error LaunchPlanner::planBatches() {
  impl.stepBatch.assign(prog.steps.size(), Impl::kNoBatch);
  for (const cuda::CudaKernelBatch &batch : modules.batches) {
    if (batch.steps.size() < 2 ||
        llvm::any_of(batch.steps, [&](int32_t step) {
          return step < 0 || size_t(step) >= prog.steps.size() ||
                 prog.steps[step].kind != kir::StepKind::Kernel ||
                 impl.stepBatch[step] != Impl::kNoBatch;
        }))
      return llvm::createStringError(
          "multi-tensor launch '" + batch.name +
          "': the CUDA compiler gave steps that are not kernel steps of "
          "this program, or that another batch holds");
    bool sum = batch.kind == cuda::CudaKernelBatch::Kind::Sum;
    if (sum && (batch.memberSteps.size() < 2 ||
                llvm::any_of(batch.memberSteps, [&](auto member) {
                  return !llvm::is_contained(batch.steps, member.first) ||
                         !llvm::is_contained(batch.steps, member.second);
                })))
      return llvm::createStringError(
          "multi-tensor sum '" + batch.name +
          "': its members' steps are not the batch's steps");
    auto plan = std::make_unique<Impl::BatchPlan>();
    plan->name = batch.name;
    plan->launch = batch.launch;
    if (llvm::Error error =
            moduleFunction(impl.kernelModule, batch.name, &plan->function))
      return error;
    if (sum) {
      plan->totalLaunch = batch.totalLaunch;
      if (llvm::Error error = moduleFunction(impl.kernelModule,
                                             batch.totalName, &plan->total))
        return error;
    }
    int64_t chunks = 0;
    plan->hostTable = cuda::multiTensorTable(prog, batch, bases, chunks);
    plan->members = batch.members();
    plan->chunks = chunks;
    if (sum) {
      // Each chunk's sum, between the two kernels (rewritten every run).
      if (llvm::Error error = checkDriver(
              cu,
              cu.memAlloc(&plan->partials,
                          std::max<size_t>(chunks, 1) * sizeof(float)),
              "cuMemAlloc (multi-tensor partial sums)"))
        return error;
      impl.owned.push_back(plan->partials);
    }
    size_t bytes = plan->hostTable.size() * sizeof(int64_t);
    if (llvm::Error error =
            checkDriver(cu, cu.memAlloc(&plan->table, bytes),
                        "cuMemAlloc (multi-tensor table)"))
      return error;
    impl.owned.push_back(plan->table);
    // Copied before the executor's first run: create() waits for the
    // stream, and hostTable lives as long as the plan.
    if (llvm::Error error = checkDriver(
            cu,
            cu.memcpyHtoDAsync(plan->table, plan->hostTable.data(), bytes,
                               impl.stream),
            "cuMemcpyHtoDAsync (multi-tensor table)"))
      return error;
    impl.stepBatch[batch.steps.front()] = int32_t(impl.batches.size());
    for (int32_t step : llvm::ArrayRef(batch.steps).drop_front())
      impl.stepBatch[step] = Impl::kInBatch;
    impl.batches.push_back(std::move(plan));
  }
  for (const auto &plan : impl.batches)
    info.multiTensorLaunches += plan->total ? 2 : 1;
  for (const cuda::CudaKernelBatch &batch : modules.batches)
    info.multiTensorSteps += int(batch.steps.size());
  return llvm::Error::success();
}

llvm::Error LaunchPlanner::libraryFunction(const std::string &fn,
                                           CUfunction *out) {
  if (!impl.libraryModule)
    return llvm::createStringError("kernel '" + fn +
                                   "': the CUDA compiler made no library "
                                   "module");
  return moduleFunction(impl.libraryModule, fn, out);
}

llvm::Error LaunchPlanner::moduleFunction(CUmodule module,
                                          const std::string &name,
                                          CUfunction *out) {
  if (llvm::Error error = checkDriver(
          cu, cu.moduleGetFunction(out, module, name.c_str()),
          "cuModuleGetFunction"))
    return llvm::createStringError("kernel '" + name + "': " +
                                   llvm::toString(std::move(error)));
  return llvm::Error::success();
}

llvm::Expected<const std::vector<cuda::LibraryKernel> *>
LaunchPlanner::stepKernels(size_t index, size_t count) {
  const std::vector<cuda::LibraryKernel> &kernels = modules.stepKernels[index];
  if (kernels.size() != count)
    return llvm::createStringError(llvm::formatv(
        "step {0} ('{1}'): the CUDA compiler gave {2} library kernels, "
        "not {3}",
        index, prog.steps[index].origin, kernels.size(), count));
  return &kernels;
}

llvm::Error LaunchPlanner::planStep(size_t index, const kir::Step &step) {
  switch (step.kind) {
  case kir::StepKind::Kernel:
    impl.stepPlan.push_back(step.kernel);
    return llvm::Error::success();
  case kir::StepKind::Gemm:
    return planGemm(step);
  case kir::StepKind::Attention:
  case kir::StepKind::AttentionGrad:
    return planAttention(index, step);
  case kir::StepKind::EmbeddingGrad:
    return planEmbeddingGrad(index, step);
  case kir::StepKind::CollectiveStart:
  case kir::StepKind::CollectiveWait:
    // Run by the mesh's communicator (enqueueSchedule); nothing to plan.
    impl.stepPlan.push_back(-1);
    return llvm::Error::success();
  }
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// GEMMs through cuBLASLt
//===----------------------------------------------------------------------===//

llvm::Error LaunchPlanner::planGemm(const kir::Step &step) {
  impl.stepPlan.push_back(impl.gemms.size());
  GemmPlan &plan = impl.gemms.emplace_back();
  llvm::Expected<GemmDescription> described = describeGemm(
      prog, step, bases, impl.allowTf32, options.fuseEpilogues);
  if (!described)
    return described.takeError();
  const GemmDescription &d = *described;
  plan.name = d.name;
  plan.a = d.addressA;
  plan.b = d.addressB;
  plan.c = d.addressC;
  const cuda::CublasLtApi &api = *impl.lt;
  if (llvm::Error error = checkCublas(
          api, api.matmulDescCreate(&plan.desc, d.compute, d.scaleType),
          "cublasLtMatmulDescCreate"))
    return error;
  api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSA, &d.a.op,
                             sizeof(d.a.op));
  api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_TRANSB, &d.b.op,
                             sizeof(d.b.op));
  if (d.fused != kir::EpilogueKind::None)
    setEpilogue(api, plan, d.fused, {d.bias, d.aux, d.auxLd, d.biasType});
  if (llvm::Error error = createLayout(api, &plan.layoutA, d.typeA, d.a,
                                       d.batch, d.batchStrideA))
    return error;
  if (llvm::Error error = createLayout(api, &plan.layoutB, d.typeB, d.b,
                                       d.batch, d.batchStrideB))
    return error;
  if (llvm::Error error = createLayout(api, &plan.layoutC, d.typeC, d.c,
                                       d.batch, d.batchStrideC))
    return error;
  uint32_t alignA = alignmentOf(plan.a), alignB = alignmentOf(plan.b),
           alignC = alignmentOf(plan.c);
  std::string key = llvm::formatv(
      "{0} {1} {2} {3} {4}{5}{6} {7} {8} {9} {10} {11} {12} {13} {14} {15} "
      "{16}{17}{18} {19} {20} {21} {22}",
      d.batch, d.m, d.n, d.k,
      int(d.a.op), int(d.b.op), int(d.compute), d.a.ld, d.b.ld, d.c.ld,
      d.batchStrideA, d.batchStrideB, d.batchStrideC, alignA, alignB, alignC,
      int(d.typeA), int(d.typeB), int(d.typeC), int(d.fused),
      d.bias ? alignmentOf(d.bias) : 0, d.aux ? alignmentOf(d.aux) : 0,
      d.auxLd);
  return chooseAlgorithm(step, plan, key, alignA, alignB, alignC);
}

llvm::Error LaunchPlanner::chooseAlgorithm(const kir::Step &step,
                                           GemmPlan &plan,
                                           const std::string &key,
                                           uint32_t alignA, uint32_t alignB,
                                           uint32_t alignC) {
  const cuda::CublasLtApi &api = *impl.lt;
  auto cached = algoCache.find(key);
  if (cached != algoCache.end()) {
    plan.algo = cached->second.first;
    if (!cached->second.second && plan.fused != kir::EpilogueKind::None)
      setEpilogue(api, plan, kir::EpilogueKind::None, {});
    countFused(plan.fused, info);
    return llvm::Error::success();
  }
  cublasLtMatmulPreference_t preference = nullptr;
  if (llvm::Error error = checkCublas(api,
                                      api.matmulPreferenceCreate(&preference),
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
    setEpilogue(api, plan, kir::EpilogueKind::None, {});
    status = api.matmulAlgoGetHeuristic(
        impl.ltHandle, plan.desc, plan.layoutA, plan.layoutB, plan.layoutC,
        plan.layoutC, preference, 1, &result, &found);
  }
  api.matmulPreferenceDestroy(preference);
  if (status != CUBLAS_STATUS_SUCCESS || found == 0)
    return llvm::createStringError(llvm::formatv(
        "cuBLASLt has no algorithm for GEMM step '{0}' ({1}, {2}): {3}",
        step.origin, plan.name, key, api.getStatusString(status)));
  plan.algo = result.algo;
  algoCache[key] = {result.algo, plan.fused != kir::EpilogueKind::None};
  countFused(plan.fused, info);
  return llvm::Error::success();
}

//===----------------------------------------------------------------------===//
// Library kernels: flash attention, embedding gradients
//===----------------------------------------------------------------------===//

llvm::Error LaunchPlanner::planAttention(size_t index, const kir::Step &step) {
  impl.stepPlan.push_back(impl.attentions.size());
  AttentionPlan &plan = impl.attentions.emplace_back();
  bool forward = step.kind == kir::StepKind::Attention;
  const kir::View &q = forward ? step.attention.q : step.attentionGrad.q;
  kir::DType dtype = prog.buffers[q.buffer].dtype;
  llvm::Expected<const std::vector<cuda::LibraryKernel> *> kernels =
      stepKernels(index, forward ? 1 : 2);
  if (!kernels)
    return kernels.takeError();
  if (forward) {
    const kir::AttentionStep &att = step.attention;
    if (att.positioned() &&
        prog.buffers[att.positions.buffer].dtype != kir::DType::I32)
      return llvm::createStringError("attention step '" + step.origin +
                                     "': positions must be i32");
    for (const kir::View *view : {&att.k, &att.v, &att.out})
      if (prog.buffers[view->buffer].dtype != dtype)
        return llvm::createStringError(
            "attention step '" + step.origin +
            "': q, k, v and out must share one dtype");
    if (prog.buffers[att.lse.buffer].dtype != kir::DType::F32)
      return llvm::createStringError("attention step '" + step.origin +
                                     "': lse must be f32");
    plan.forwardName = (**kernels)[0].name;
    if (llvm::Error error = libraryFunction(plan.forwardName, &plan.forward))
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
    if (att.positioned()) { // [batch, seq] i32
      args.positions =
          reinterpret_cast<const int32_t *>(address(att.positions));
      args.vpos.offset = att.positions.offset;
      args.vpos.batch = att.positions.strides[0];
      args.vpos.seq = att.positions.strides[1];
    }
    args.batch = att.batch;
    args.heads = att.heads;
    args.seq = att.seq;
    args.causal = att.causal;
    args.scale = att.scale;
    args.kvSeq = att.keys();
    return llvm::Error::success();
  }
  const kir::AttentionGradStep &att = step.attentionGrad;
  for (const kir::View *view :
       {&att.dout, &att.k, &att.v, &att.out, &att.dq, &att.dk, &att.dv})
    if (prog.buffers[view->buffer].dtype != dtype)
      return llvm::createStringError("attention gradient step '" +
                                     step.origin +
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
  return llvm::Error::success();
}

llvm::Error LaunchPlanner::planEmbeddingGrad(size_t index,
                                             const kir::Step &step) {
  const kir::EmbeddingGradStep &e = step.embeddingGrad;
  impl.stepPlan.push_back(impl.embeddings.size());
  EmbeddingPlan &plan = impl.embeddings.emplace_back();
  llvm::Expected<const std::vector<cuda::LibraryKernel> *> kernels =
      stepKernels(index, 2);
  if (!kernels)
    return kernels.takeError();
  if (llvm::Error error = libraryFunction((**kernels)[0].name, &plan.zero))
    return error;
  if (llvm::Error error = libraryFunction((**kernels)[1].name, &plan.scatter))
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
  return llvm::Error::success();
}

} // namespace

//===----------------------------------------------------------------------===//
// Planning and launching
//===----------------------------------------------------------------------===//

llvm::Error CudaExecutor::planLaunches(const cuda::CudaModules &modules,
                                       const CudaExecutorOptions &options) {
  LaunchPlanner planner(*impl, prog, bases, modules, options, creationInfo);
  if (llvm::Error error = planner.loadModules())
    return error;
  for (auto [index, step] : llvm::enumerate(prog.steps))
    if (llvm::Error error = planner.planStep(index, step))
      return error;
  return llvm::Error::success();
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
      int32_t batch = im.stepBatch[index];
      if (batch == Impl::kInBatch)
        break; // launched with its batch's first step
      if (batch >= 0) {
        Impl::BatchPlan &b = *im.batches[batch];
        if (llvm::Error error = im.launch(b.function, b.launch, b.params))
          return error;
        if (b.total)
          if (llvm::Error error =
                  im.launch(b.total, b.totalLaunch, b.params))
            return error;
        break;
      }
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
      if (launchesEpilogueKernel(step.gemm, gemm.fused)) {
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
    case kir::StepKind::CollectiveStart: {
      // The data is complete when the stream's work is; the communicator
      // (NCCL) runs the collective on its own stream while the host goes
      // on enqueueing the steps up to the wait.
      if (llvm::Error error = checkDriver(cu, cu.streamSynchronize(im.stream),
                                          "cuStreamSynchronize"))
        return error;
      const kir::CollectiveStep &c = step.collective;
      kir::DType dtype = prog.buffers[c.input.buffer].dtype;
      int64_t size = kir::dtypeBytes(dtype);
      tickets[index] = startCollective(
          mesh, c, dtype,
          reinterpret_cast<const void *>(bases[c.input.buffer] +
                                         c.input.offset * size),
          reinterpret_cast<void *>(bases[c.output.buffer] +
                                   c.output.offset * size));
      break;
    }
    case kir::StepKind::CollectiveWait:
      if (llvm::Error error = waitCollective(mesh, step.collective,
                                             tickets[step.collective.start]))
        return error;
      break;
    }
    if (timed)
      cu.eventRecord(im.stepEvents[2 * index + 1], im.stream);
  }
  return llvm::Error::success();
}

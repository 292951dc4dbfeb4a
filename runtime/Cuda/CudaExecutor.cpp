// The CUDA executor: creation (device, memory, the compiled modules), tensors
// in and out, and the run loop with CUDA graph replay and per-step timing.
#include "runtime/Cuda/CudaExecutor.h"

#include "runtime/Cuda/CudaApi.h"
#include "runtime/Cuda/CudaDeviceStore.h"
#include "runtime/Cuda/CudaLaunch.h"
#include "runtime/Exec/MemoryReport.h"
#include "runtime/Exec/PersistentStore.h"

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

//===----------------------------------------------------------------------===//
// CudaExecutor::Impl
//===----------------------------------------------------------------------===//

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
  for (CUevent event : stagingFences)
    if (event)
      cu->eventDestroy(event);
  if (staging)
    cu->memFreeHost(staging);
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
  if (stream && ownsStream)
    cu->streamDestroy(stream);
  if (context)
    cu->devicePrimaryCtxRelease(device);
}

//===----------------------------------------------------------------------===//
// Creation
//===----------------------------------------------------------------------===//

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
  // A collective's start and wait are host calls: no graph replay.
  bool collectives = llvm::any_of(prog.steps, [](const kir::Step &step) {
    return step.kind == kir::StepKind::CollectiveStart;
  });
  executor->useGraphs = options.useGraphs && !collectives;
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
  if (options.shareStreamOf) {
    const Impl &other = *options.shareStreamOf->impl;
    if (other.context != impl.context)
      return llvm::createStringError(
          "shareStreamOf: the other executor runs on another device");
    impl.stream = other.stream;
    impl.ownsStream = false;
  } else if (llvm::Error error = check(
                 cu.streamCreate(&impl.stream, CU_STREAM_NON_BLOCKING),
                 "cuStreamCreate")) {
    return error;
  }
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
  // Per kernel and step: what it launches.
  if (llvm::Error error = executor->planLaunches(modules, options))
    return error;
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
    if (input.scalar == kir::StepScalar::Rng) {
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
/// Every collective of `program` has a communicator in `mesh` (on a
/// device there is no host copy for an axis of one rank).
static llvm::Error checkDeviceMesh(const kir::Program &program,
                                   const Mesh &mesh) {
  if (llvm::Error error = checkMesh(program, mesh))
    return error;
  for (const kir::Step &step : program.steps) {
    if (step.kind == kir::StepKind::CollectiveStart &&
        (step.collective.kind == kir::CollectiveKind::Send ||
         step.collective.kind == kir::CollectiveKind::Recv))
      return llvm::createStringError(
          "@" + program.function + ": pipeline transfers (--pp) do not run "
          "on the GPU yet; run pipeline parallelism with --device cpu");
    if (step.kind == kir::StepKind::CollectiveStart &&
        !mesh.axis(step.collective.axis))
      return llvm::createStringError(
          "@" + program.function + ": no communicator for mesh axis '" +
          step.collective.axis + "' on the GPU");
  }
  return llvm::Error::success();
}

void CudaExecutor::describeMemory(MemoryLedger &ledger,
                                  llvm::StringRef label) const {
  // The arena is device memory: planned, not part of the host's resident
  // set (the host side, the driver's and cuBLASLt's, is in the heap).
  ledger.addPlannedElsewhere("arena: " + label.str() + " (GPU)",
                             prog.arenaBytes);
}

llvm::Error CudaExecutor::setMesh(const Mesh &newMesh) {
  if (llvm::Error error = checkDeviceMesh(prog, newMesh))
    return error;
  mesh = newMesh;
  return llvm::Error::success();
}

llvm::Error CudaExecutor::run() {
  if (llvm::Error error = checkIds())
    return error;
  if (llvm::Error error = checkDeviceMesh(prog, mesh))
    return error;
  tickets.assign(prog.steps.size(), 0);
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
        if (im.stepBatch[index] == Impl::kInBatch)
          continue; // launched (and timed) with its batch
        name = im.stepBatch[index] >= 0 ? im.batches[im.stepBatch[index]]->name
                                        : prog.kernels[step.kernel].name;
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
      case kir::StepKind::CollectiveStart:
      case kir::StepKind::CollectiveWait:
        break; // refused by the launch planner
      }
      CudaStepProfile::Entry &entry = stepProfile.perKernel[name];
      entry.seconds += seconds;
      ++entry.launches;
    }
    ++stepProfile.runs;
  }

  // The schedule ran: capture it once for replay.
  if (useGraphs && !graphExec && !profiling)
    if (llvm::Error error = captureGraph())
      return error;
  ranOnce = true;
  return llvm::Error::success();
}

llvm::Error CudaExecutor::captureGraph() {
  Impl &im = *impl;
  const cuda::DriverApi &cu = *im.cu;
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
  if (llvm::Error error = checkDriver(cu, instantiated, "cuGraphInstantiate"))
    return error;
  graphExec = exec;
  return llvm::Error::success();
}

void *CudaExecutor::streamHandle() const { return impl->stream; }

llvm::Error CudaExecutor::enqueue() {
  if (llvm::Error error = checkIds())
    return error;
  if (llvm::any_of(prog.steps, [](const kir::Step &step) {
        return step.kind == kir::StepKind::CollectiveStart;
      }))
    return llvm::createStringError(
        "@" + prog.function + ": a program with collectives waits on the "
        "host; run it with run()");
  Impl &im = *impl;
  const cuda::DriverApi &cu = *im.cu;
  cu.ctxSetCurrent(im.context);
  if (graphExec && !profiling) {
    if (llvm::Error error = checkDriver(
            cu, cu.graphLaunch(static_cast<CUgraphExec>(graphExec), im.stream),
            "cuGraphLaunch"))
      return error;
  } else {
    if (llvm::Error error = enqueueSchedule(false))
      return error;
    if (useGraphs && !profiling)
      if (llvm::Error error = captureGraph())
        return error;
  }
  // The staged inputs of this generation have been copied once the
  // schedule's work is: fence their slot.
  if (im.stagedThisGeneration) {
    if (llvm::Error error = im.stagingSlots->release(enqueued))
      return error;
    im.stagedThisGeneration = false;
  }
  ++enqueued;
  ranOnce = true;
  return llvm::Error::success();
}

llvm::Error CudaExecutor::setInputAsync(llvm::StringRef name,
                                        const HostTensor &tensor) {
  Impl &im = *impl;
  const cuda::DriverApi &cu = *im.cu;
  cu.ctxSetCurrent(im.context);
  if (!im.staging) {
    // Every input's bytes, 16-byte aligned, per slot.
    for (const kir::Binding &input : prog.inputs) {
      im.stagingOffset.push_back(im.stagingBytes);
      im.stagingBytes += (prog.buffers[input.buffer].bytes() + 15) / 16 * 16;
    }
    void *memory = nullptr;
    if (llvm::Error error = checkDriver(
            cu, cu.memAllocHost(&memory, std::max<size_t>(2 * im.stagingBytes, 16)),
            "cuMemAllocHost (input staging)"))
      return error;
    im.staging = static_cast<char *>(memory);
    for (CUevent &event : im.stagingFences)
      if (llvm::Error error = checkDriver(
              cu, cu.eventCreate(&event, CU_EVENT_DISABLE_TIMING),
              "cuEventCreate"))
        return error;
    SlotFences fences;
    fences.record = [&im](int slot) {
      return checkDriver(*im.cu,
                         im.cu->eventRecord(im.stagingFences[slot], im.stream),
                         "cuEventRecord (input staging)");
    };
    fences.wait = [&im](int slot) {
      return checkDriver(*im.cu,
                         im.cu->eventSynchronize(im.stagingFences[slot]),
                         "cuEventSynchronize (input staging)");
    };
    im.stagingSlots = std::make_unique<StagingSlots>(2, std::move(fences));
  }
  for (auto [index, input] : llvm::enumerate(prog.inputs)) {
    if (input.name != name)
      continue;
    const kir::Buffer &buffer = prog.buffers[input.buffer];
    if (tensor.shape != buffer.shape || tensor.dtype != buffer.dtype)
      return llvm::createStringError(
          "input '" + name + "' is " + kir::dtypeName(tensor.dtype) + " " +
          kir::formatShape(tensor.shape) + ", the model expects " +
          kir::dtypeName(buffer.dtype) + " " + kir::formatShape(buffer.shape));
    llvm::Expected<int> slot = im.stagingSlots->acquire(enqueued);
    if (!slot)
      return slot.takeError();
    char *host = im.staging + *slot * im.stagingBytes + im.stagingOffset[index];
    std::memcpy(host, tensor.bytes.data(), buffer.bytes());
    if (llvm::Error error = checkDriver(
            cu,
            cu.memcpyHtoDAsync(bases[input.buffer], host, buffer.bytes(),
                               im.stream),
            "cuMemcpyHtoDAsync (input)"))
      return error;
    im.stagedThisGeneration = true;
    hostInputs[input.buffer] = tensor;
    return llvm::Error::success();
  }
  return llvm::createStringError("the program has no input '" + name + "'");
}

//===----------------------------------------------------------------------===//
// CudaStepReadback
//===----------------------------------------------------------------------===//

struct CudaStepReadback::State {
  const cuda::DriverApi *cu = nullptr;
  CUcontext context = nullptr;
  CUstream stream = nullptr;
  std::vector<CUdeviceptr> sources; // per value
  float *host = nullptr;            // depth slots of sources.size() floats
  std::vector<CUevent> starts, ends; // per slot
  std::unique_ptr<ReadbackSlots> slots;

  ~State() {
    if (!cu)
      return;
    cu->ctxSetCurrent(context);
    if (stream)
      cu->streamSynchronize(stream);
    for (CUevent event : starts)
      cu->eventDestroy(event);
    for (CUevent event : ends)
      cu->eventDestroy(event);
    if (host)
      cu->memFreeHost(host);
  }
};

CudaStepReadback::~CudaStepReadback() = default;

llvm::Expected<std::unique_ptr<CudaStepReadback>>
CudaStepReadback::create(std::vector<Value> values, int depth) {
  if (values.empty() || depth < 1)
    return llvm::createStringError("read-back: nothing to read");
  std::unique_ptr<CudaStepReadback> readback(new CudaStepReadback());
  readback->state = std::make_unique<State>();
  State &st = *readback->state;
  const CudaExecutor::Impl &first = *values.front().executor->impl;
  for (const Value &value : values) {
    const CudaExecutor &executor = *value.executor;
    if (executor.impl->stream != first.stream)
      return llvm::createStringError(
          "read-back: the executors must share one stream "
          "(CudaExecutorOptions::shareStreamOf)");
    const kir::Program &prog = executor.prog;
    const kir::Binding *found = nullptr;
    for (const kir::Binding &output : prog.outputs)
      if (output.name == value.output)
        found = &output;
    if (!found)
      return llvm::createStringError("read-back: @" + prog.function +
                                     " has no output '" + value.output + "'");
    const kir::Buffer &buffer = prog.buffers[found->buffer];
    if (buffer.dtype != kir::DType::F32 || buffer.numElements() != 1)
      return llvm::createStringError("read-back: output '" + value.output +
                                     "' is not an f32 scalar");
    st.sources.push_back(executor.bases[found->buffer]);
  }
  const cuda::DriverApi &cu = *first.cu;
  st.cu = &cu;
  st.context = first.context;
  st.stream = first.stream;
  cu.ctxSetCurrent(st.context);
  void *memory = nullptr;
  if (llvm::Error error = checkDriver(
          cu, cu.memAllocHost(&memory, depth * values.size() * sizeof(float)),
          "cuMemAllocHost (read-back)"))
    return error;
  st.host = static_cast<float *>(memory);
  for (int slot = 0; slot < depth; ++slot)
    for (std::vector<CUevent> *list : {&st.starts, &st.ends}) {
      CUevent event = nullptr;
      if (llvm::Error error = checkDriver(
              cu, cu.eventCreate(&event, CU_EVENT_DEFAULT), "cuEventCreate"))
        return error;
      list->push_back(event);
    }
  SlotFences fences;
  State *state = &st;
  fences.record = [state](int slot) {
    return checkDriver(*state->cu,
                       state->cu->eventRecord(state->ends[slot], state->stream),
                       "cuEventRecord (read-back)");
  };
  fences.wait = [state](int slot) {
    return checkDriver(*state->cu,
                       state->cu->eventSynchronize(state->ends[slot]),
                       "waiting for the step (read-back)");
  };
  st.slots = std::make_unique<ReadbackSlots>(depth, std::move(fences));
  return readback;
}

llvm::Error CudaStepReadback::beginStep(int64_t step) {
  State &st = *state;
  llvm::Expected<int> slot = st.slots->slotFor(step);
  if (!slot)
    return slot.takeError();
  st.cu->ctxSetCurrent(st.context);
  return checkDriver(*st.cu, st.cu->eventRecord(st.starts[*slot], st.stream),
                     "cuEventRecord (step start)");
}

llvm::Error CudaStepReadback::push(int64_t step) {
  State &st = *state;
  llvm::Expected<int> slot = st.slots->slotFor(step);
  if (!slot)
    return slot.takeError();
  st.cu->ctxSetCurrent(st.context);
  float *host = st.host + *slot * st.sources.size();
  for (auto [index, source] : llvm::enumerate(st.sources))
    if (llvm::Error error = checkDriver(
            *st.cu,
            st.cu->memcpyDtoHAsync(host + index, source, sizeof(float),
                                   st.stream),
            "cuMemcpyDtoHAsync (read-back)"))
      return error;
  return st.slots->push(step);
}

llvm::Expected<CudaStepReadback::Landed> CudaStepReadback::pop() {
  State &st = *state;
  st.cu->ctxSetCurrent(st.context);
  llvm::Expected<ReadbackSlots::Landed> landed = st.slots->pop();
  if (!landed)
    return landed.takeError();
  Landed result;
  result.step = landed->step;
  const float *host = st.host + landed->slot * st.sources.size();
  result.values.assign(host, host + st.sources.size());
  float ms = 0;
  st.cu->eventElapsedTime(&ms, st.starts[landed->slot], st.ends[landed->slot]);
  result.deviceMilliseconds = ms;
  return result;
}

size_t CudaStepReadback::inFlight() const { return state->slots->inFlight(); }

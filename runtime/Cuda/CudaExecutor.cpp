// The CUDA executor: device buffers, NVRTC-compiled kernels, cuBLASLt GEMMs
// (epilogue kernels that are exactly a bias add, bias + GELU, GELU or the
// GELU gradient run inside cuBLASLt: matchGemmEpilogue),
// flash attention, embedding gradients, CUDA graph replay and per-step
// event timing.
#include "runtime/Cuda/CudaExecutor.h"

#include "codegen/KernelToCuda/FlashAttention.h"
#include "codegen/KernelToCuda/KernelToCuda.h"
#include "runtime/Cuda/CudaApi.h"
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

/// Retains the device's primary context and makes it current.
llvm::Expected<CUcontext> enterContext(const cuda::DriverApi &cu, int index,
                                       CUdevice *deviceOut = nullptr) {
  int count = 0;
  if (llvm::Error error = checkDriver(cu, cu.deviceGetCount(&count),
                                      "cuDeviceGetCount"))
    return error;
  if (index < 0 || index >= count)
    return llvm::createStringError(llvm::formatv(
        "CUDA device {0} does not exist ({1} device(s) found)", index, count));
  CUdevice device;
  if (llvm::Error error =
          checkDriver(cu, cu.deviceGet(&device, index), "cuDeviceGet"))
    return error;
  CUcontext context;
  if (llvm::Error error = checkDriver(
          cu, cu.devicePrimaryCtxRetain(&context, device),
          "cuDevicePrimaryCtxRetain"))
    return error;
  if (llvm::Error error =
          checkDriver(cu, cu.ctxSetCurrent(context), "cuCtxSetCurrent"))
    return error;
  if (deviceOut)
    *deviceOut = device;
  return context;
}

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

std::string llmc::runtime::cudaLibrarySource(
    llvm::ArrayRef<cuda::FlashAttentionVariant> variants) {
  return cuda::emitFlashAttentionModule(variants) + kEmbeddingGradSource;
}

//===----------------------------------------------------------------------===//
// CudaPersistentStore
//===----------------------------------------------------------------------===//

llvm::Expected<std::shared_ptr<CudaPersistentStore>>
CudaPersistentStore::create() {
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  llvm::Expected<CUcontext> context = enterContext(**cu, 0);
  if (!context)
    return context.takeError();
  return std::shared_ptr<CudaPersistentStore>(new CudaPersistentStore());
}

CudaPersistentStore::~CudaPersistentStore() {
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu) {
    llvm::consumeError(cu.takeError());
    return;
  }
  for (auto &[name, entry] : entries)
    (*cu)->memFree(entry.address);
}

llvm::Expected<uint64_t>
CudaPersistentStore::bind(llvm::StringRef name, kir::DType dtype,
                          llvm::ArrayRef<int64_t> shape,
                          double initialValue) {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it != entries.end()) {
    if (it->second.dtype != dtype || llvm::ArrayRef<int64_t>(it->second.shape) != shape)
      return llvm::createStringError(
          "persistent tensor '" + name + "' is " +
          kir::dtypeName(it->second.dtype) +
          kir::formatShape(it->second.shape) + " in the store, the program "
          "expects " + kir::dtypeName(dtype) + kir::formatShape(shape));
    return it->second.address;
  }
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  Entry entry{dtype, shape.vec(), 0, 0};
  entry.bytes = kir::dtypeBytes(dtype);
  for (int64_t size : shape)
    entry.bytes *= size;
  CUdeviceptr address = 0;
  if (llvm::Error error =
          checkDriver(**cu, (*cu)->memAlloc(&address, std::max<int64_t>(
                                                          entry.bytes, 1)),
                      "cuMemAlloc (persistent tensor)"))
    return error;
  if (llvm::Error error = checkDriver(
          **cu, (*cu)->memsetD8Async(address, 0, entry.bytes, nullptr),
          "cuMemsetD8Async"))
    return error;
  // Synchronized below, before `elements` goes.
  std::vector<char> elements;
  if (initialValue != 0.0) {
    elements = filledElements(dtype, entry.bytes / kir::dtypeBytes(dtype),
                              initialValue);
    if (llvm::Error error = checkDriver(
            **cu,
            (*cu)->memcpyHtoDAsync(address, elements.data(), elements.size(),
                                   nullptr),
            "cuMemcpyHtoD (initial value)"))
      return error;
  }
  if (llvm::Error error =
          checkDriver(**cu, (*cu)->ctxSynchronize(), "cuCtxSynchronize"))
    return error;
  entry.address = address;
  entries.emplace(name.str(), entry);
  return uint64_t(address);
}

bool CudaPersistentStore::contains(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  return entries.find(name) != entries.end();
}

std::vector<std::string> CudaPersistentStore::names() const {
  std::lock_guard<std::mutex> lock(mutex);
  std::vector<std::string> result;
  for (const auto &[name, entry] : entries)
    result.push_back(name);
  return result;
}

llvm::Expected<HostTensor>
CudaPersistentStore::get(llvm::StringRef name) const {
  std::lock_guard<std::mutex> lock(mutex);
  auto it = entries.find(name);
  if (it == entries.end())
    return llvm::createStringError("no persistent tensor '" + name + "'");
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  HostTensor tensor = HostTensor::zeros(it->second.dtype, it->second.shape);
  if (llvm::Error error = checkDriver(
          **cu,
          (*cu)->memcpyDtoHAsync(tensor.bytes.data(), it->second.address,
                                 it->second.bytes, nullptr),
          "cuMemcpyDtoH"))
    return error;
  if (llvm::Error error =
          checkDriver(**cu, (*cu)->ctxSynchronize(), "cuCtxSynchronize"))
    return error;
  return tensor;
}

llvm::Error CudaPersistentStore::set(llvm::StringRef name,
                                     const HostTensor &tensor) {
  llvm::Expected<uint64_t> address = bind(name, tensor.dtype, tensor.shape);
  if (!address)
    return address.takeError();
  llvm::Expected<const cuda::DriverApi *> cu = cuda::loadDriver();
  if (!cu)
    return cu.takeError();
  if (llvm::Error error = checkDriver(
          **cu,
          (*cu)->memcpyHtoDAsync(*address, tensor.bytes.data(),
                                 tensor.bytes.size(), nullptr),
          "cuMemcpyHtoD"))
    return error;
  return checkDriver(**cu, (*cu)->ctxSynchronize(), "cuCtxSynchronize");
}

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
  FusedEpilogueKind fused = FusedEpilogueKind::None;
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

// GEMM epilogues in cuBLASLt (matchGemmEpilogue below). What the GPT-2
// programs give: forward, bias on c_attn and bias + tanh GELU on c_fc (in
// place); the training step's forward, bias only (GELU there is a kernel
// step of its own writing another buffer: the pre-activation is kept for
// the backward); its backward, the GELU gradient on dY W_proj (DGELU, the
// saved pre-activation as aux). Not fused, because the lowering does not
// make them epilogues of one GEMM: the bias gradients are reduce_sum kernel
// steps (the c_fc one right after the DGELU GEMM, which
// EPILOGUE_DGELU_BGRAD could absorb; the others sum dY over rows, which
// BGRADA/BGRADB would do inside the dW GEMM, many steps later and now
// accumulating into its gradient buffer), and the training forward's GELU
// (EPILOGUE_GELU_AUX_BIAS could write both buffers) is the next step. Each
// needs the executor to absorb or move a kernel step, not just an epilogue.

/// The element of `access` that row `row` of `kernel` starts at (column 0).
int64_t rowStart(const kir::Access &access, const kir::Kernel &kernel,
                 int64_t row) {
  int64_t address = access.offset;
  for (int64_t d = int64_t(kernel.domain.size()) - 2; d >= 0; --d) {
    address += (row % kernel.domain[d]) * access.strides[d];
    row /= kernel.domain[d];
  }
  return address;
}

bool isF32(const kir::Access &access, const kir::Program &program) {
  return access.dtype == kir::DType::F32 &&
         program.buffers[access.buffer].dtype == kir::DType::F32 &&
         access.strides.back() == 1;
}

/// Does `access` address C's element (row, column) for every row?
bool addressesC(const kir::Access &access, const kir::Kernel &kernel,
                const kir::GemmStep &gemm, const kir::Program &program) {
  if (access.buffer != gemm.c.buffer || !isF32(access, program))
    return false;
  for (int64_t row = 0; row < kernel.numRows(); ++row)
    if (rowStart(access, kernel, row) !=
        gemm.c.offset + (row / gemm.m) * gemm.c.strides[0] +
            (row % gemm.m) * gemm.c.strides[1])
      return false;
  return true;
}

/// Is `access` one f32 row of n elements read by every row (a bias)?
bool isBiasRow(const kir::Access &access, const kir::GemmStep &gemm,
               const kir::Program &program) {
  if (access.buffer == gemm.c.buffer || !isF32(access, program))
    return false;
  for (size_t d = 0; d + 1 < access.strides.size(); ++d)
    if (access.strides[d] != 0)
      return false;
  return true;
}

/// If `access` is another f32 matrix whose rows follow each other `ld`
/// elements apart (ld >= n), row r of the kernel at row r: that ld.
std::optional<int64_t> auxRowStride(const kir::Access &access,
                                    const kir::Kernel &kernel,
                                    const kir::GemmStep &gemm,
                                    const kir::Program &program) {
  if (access.buffer == gemm.c.buffer || gemm.batch != 1 ||
      !isF32(access, program))
    return std::nullopt;
  int64_t first = rowStart(access, kernel, 0);
  int64_t ld = kernel.numRows() > 1 ? rowStart(access, kernel, 1) - first
                                    : gemm.n;
  if (ld < gemm.n)
    return std::nullopt;
  for (int64_t row = 0; row < kernel.numRows(); ++row)
    if (rowStart(access, kernel, row) != first + row * ld)
      return std::nullopt;
  return ld;
}

// Epilogue expressions as canonical strings: leaves "C", "bias", "aux",
// constants by their f32 bits; the operands of sums and products sorted,
// so `a + b` and `b + a` read the same.
std::string exprConst(double value) {
  float f = float(value);
  uint32_t bits;
  std::memcpy(&bits, &f, sizeof(bits));
  return "k" + llvm::utohexstr(bits);
}
std::string exprCommutative(const char *op, std::string a, std::string b) {
  if (b < a)
    std::swap(a, b);
  return std::string(op) + "(" + a + "," + b + ")";
}
std::string exprAdd(const std::string &a, const std::string &b) {
  return exprCommutative("add", a, b);
}
std::string exprMul(const std::string &a, const std::string &b) {
  return exprCommutative("mul", a, b);
}
std::string exprSub(const std::string &a, const std::string &b) {
  return "sub(" + a + "," + b + ")";
}
std::string exprTanh(const std::string &a) { return "tanh(" + a + ")"; }

/// gelu(x) with the tanh approximation, as LlmcToKernel emits it:
/// 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
std::string exprGeluTanh(const std::string &x) {
  std::string x3 = exprMul(exprMul(x, x), x);
  std::string poly = exprAdd(x, exprMul(exprConst(0.044715), x3));
  std::string inner =
      exprTanh(exprMul(exprConst(std::sqrt(2.0 / M_PI)), poly));
  return exprMul(exprMul(exprConst(0.5), x),
                 exprAdd(exprConst(1.0), inner));
}

/// gelu'(x) of the tanh approximation, as LlmcToKernel emits it:
/// 0.5 (1 + t) + 0.5 x (1 - t^2) (k + 3 * 0.044715 k x^2), k = sqrt(2/pi).
std::string exprGeluTanhGrad(const std::string &x) {
  double k = std::sqrt(2.0 / M_PI);
  std::string one = exprConst(1.0), half = exprConst(0.5);
  std::string x2 = exprMul(x, x);
  std::string poly =
      exprAdd(x, exprMul(exprConst(0.044715), exprMul(x2, x)));
  std::string t = exprTanh(exprMul(exprConst(k), poly));
  std::string left = exprMul(half, exprAdd(one, t));
  std::string sech2 = exprSub(one, exprMul(t, t));
  std::string dpoly =
      exprAdd(exprConst(k), exprMul(exprConst(k * 3.0 * 0.044715), x2));
  std::string right = exprMul(exprMul(half, x), exprMul(sech2, dpoly));
  return exprAdd(left, right);
}

} // namespace

FusedEpilogue llmc::runtime::matchGemmEpilogue(const kir::Kernel &kernel,
                                               const kir::GemmStep &gemm,
                                               const kir::Program &program) {
  FusedEpilogue none, fused;
  if (kernel.rowLength() != gemm.n ||
      kernel.numRows() != gemm.batch * gemm.m || kernel.hasReduction())
    return none;
  // What each operand is: C, the bias row or the aux matrix (one of each
  // at most); "" for anything else, which the kernel may not use.
  std::vector<std::string> leaf(kernel.operands.size());
  bool haveBias = false, haveAux = false;
  auto same = [](const kir::Access &x, const kir::Access &y) {
    return x.buffer == y.buffer && x.offset == y.offset &&
           x.strides == y.strides;
  };
  for (auto [i, access] : llvm::enumerate(kernel.operands)) {
    if (addressesC(access, kernel, gemm, program)) {
      leaf[i] = "C";
    } else if (isBiasRow(access, gemm, program)) {
      if (haveBias && !same(access, fused.bias))
        return none;
      haveBias = true;
      fused.bias = access;
      leaf[i] = "bias";
    } else if (std::optional<int64_t> ld =
                   auxRowStride(access, kernel, gemm, program)) {
      if (haveAux && !same(access, fused.aux))
        return none;
      haveAux = true;
      fused.aux = access;
      fused.auxLd = *ld;
      leaf[i] = "aux";
    }
  }
  // Every value as an expression; the one store must write C.
  constexpr size_t kMaxExpr = 4096; // a bigger kernel is no epilogue of ours
  std::vector<std::string> value(kernel.body.size());
  std::optional<std::string> stored;
  for (auto [i, instr] : llvm::enumerate(kernel.body)) {
    if (instr.op != kir::Op::Store && instr.type != kir::DType::F32)
      return none;
    auto arg = [&](int index) { return value[instr.args[index]]; };
    switch (instr.op) {
    case kir::Op::Load:
      if (!instr.args.empty() || leaf[instr.operand].empty())
        return none;
      value[i] = leaf[instr.operand];
      break;
    case kir::Op::Const:
      value[i] = exprConst(instr.imm);
      break;
    case kir::Op::Add:
      value[i] = exprAdd(arg(0), arg(1));
      break;
    case kir::Op::Mul:
      value[i] = exprMul(arg(0), arg(1));
      break;
    case kir::Op::Sub:
      value[i] = exprSub(arg(0), arg(1));
      break;
    case kir::Op::Tanh:
      value[i] = exprTanh(arg(0));
      break;
    case kir::Op::Store:
      if (stored || leaf[instr.operand] != "C")
        return none;
      stored = arg(0);
      break;
    default:
      return none;
    }
    if (value[i].size() > kMaxExpr)
      return none;
  }
  if (!stored)
    return none;
  if (*stored == exprAdd("C", "bias"))
    fused.kind = FusedEpilogueKind::Bias;
  else if (*stored == exprGeluTanh(exprAdd("C", "bias")))
    fused.kind = FusedEpilogueKind::GeluBias;
  else if (*stored == exprGeluTanh("C"))
    fused.kind = FusedEpilogueKind::Gelu;
  else if (*stored == exprMul("C", exprGeluTanhGrad("aux")))
    fused.kind = FusedEpilogueKind::DGelu;
  else
    return none;
  return fused;
}

const char *llmc::runtime::fusedEpilogueName(FusedEpilogueKind kind) {
  switch (kind) {
  case FusedEpilogueKind::None:
    return "none";
  case FusedEpilogueKind::Bias:
    return "bias";
  case FusedEpilogueKind::GeluBias:
    return "gelu_bias";
  case FusedEpilogueKind::Gelu:
    return "gelu";
  case FusedEpilogueKind::DGelu:
    return "dgelu";
  }
  return "none";
}

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
CudaExecutor::create(kir::Program program, CudaExecutorOptions options) {
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
      enterContext(cu, options.device, &impl.device);
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

  // Kernels of the program: the artifact's binaries or NVRTC now.
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
    cuda::CudaBinaries binaries;
    if (options.kernelBinaries) {
      binaries = *options.kernelBinaries;
      info.kernelsPrecompiled = true;
    } else {
      std::string source = cuda::emitCudaModule(prog);
      llvm::Expected<cuda::CudaBinaries> compiled = cuda::compileCuda(
          source, prog.function + ".cu", options.nvrtc, &info.kernelStats);
      if (!compiled)
        return compiled.takeError();
      binaries = std::move(*compiled);
    }
    if (llvm::Error error = loadModule(binaries, &impl.kernelModule))
      return error;
    for (const kir::Kernel &kernel : prog.kernels) {
      KernelPlan &plan = impl.kernels.emplace_back();
      if (llvm::Error error =
              check(cu.moduleGetFunction(&plan.function, impl.kernelModule,
                                         kernel.name.c_str()),
                    "cuModuleGetFunction"))
        return llvm::createStringError("kernel '" + kernel.name + "': " +
                                       llvm::toString(std::move(error)));
      plan.launch = options.kernelLaunches.size() == prog.kernels.size()
                        ? options.kernelLaunches[impl.kernels.size() - 1]
                        : cuda::chooseLaunch(kernel);
      for (const kir::Access &access : kernel.operands)
        plan.operands.push_back(executor->bases[access.buffer]);
    }
    // The operand vectors no longer move: point the parameters at them.
    for (KernelPlan &plan : impl.kernels)
      for (CUdeviceptr &operand : plan.operands)
        plan.params.push_back(&operand);
  }

  // Attention and embedding kernels: one library module for what the
  // schedule needs.
  std::vector<cuda::FlashAttentionVariant> variants;
  bool needEmbedding = false;
  for (const kir::Step &step : prog.steps) {
    if (step.kind == kir::StepKind::Attention) {
      variants.push_back({step.attention.headDim,
                          prog.buffers[step.attention.q.buffer].dtype});
    } else if (step.kind == kir::StepKind::AttentionGrad) {
      variants.push_back({step.attentionGrad.headDim,
                          prog.buffers[step.attentionGrad.q.buffer].dtype});
    } else if (step.kind == kir::StepKind::EmbeddingGrad) {
      needEmbedding = true;
    }
  }
  for (const cuda::FlashAttentionVariant &variant : variants) {
    std::string why;
    if (!cuda::isSupported(variant, &why))
      return llvm::createStringError(why);
  }
  if (!variants.empty() || needEmbedding) {
    std::string source = cudaLibrarySource(variants);
    llvm::Expected<cuda::CudaBinaries> compiled = cuda::compileCuda(
        source, "llmc_library.cu", options.nvrtc, &info.libraryStats);
    if (!compiled)
      return compiled.takeError();
    if (llvm::Error error = loadModule(*compiled, &impl.libraryModule))
      return error;
  }
  auto libraryFunction = [&](const std::string &fn,
                             CUfunction *out) -> llvm::Error {
    if (llvm::Error error = check(
            cu.moduleGetFunction(out, impl.libraryModule, fn.c_str()),
            "cuModuleGetFunction"))
      return llvm::createStringError("kernel '" + fn + "': " +
                                     llvm::toString(std::move(error)));
    return llvm::Error::success();
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
  for (const kir::Step &step : prog.steps) {
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
      // The epilogue kernel runs inside cuBLASLt when it is one cuBLASLt
      // computes (matchGemmEpilogue) and its vectors are placed as
      // cuBLASLt wants: 16-byte aligned, the aux leading dimension a
      // multiple of 8 elements.
      FusedEpilogue fused;
      if (g.epilogue >= 0 && options.fuseEpilogues)
        fused = matchGemmEpilogue(prog.kernels[g.epilogue], g, prog);
      bool hasBias = fused.kind == FusedEpilogueKind::Bias ||
                     fused.kind == FusedEpilogueKind::GeluBias;
      CUdeviceptr biasPointer =
          hasBias ? executor->bases[fused.bias.buffer] + fused.bias.offset * 4
                  : 0;
      CUdeviceptr auxPointer =
          fused.kind == FusedEpilogueKind::DGelu
              ? executor->bases[fused.aux.buffer] + fused.aux.offset * 4
              : 0;
      uint32_t biasAlignment = hasBias ? alignmentOf(biasPointer) : 0;
      uint32_t auxAlignment = auxPointer ? alignmentOf(auxPointer) : 0;
      if ((hasBias && biasAlignment < 16) ||
          (auxPointer && (auxAlignment < 16 || fused.auxLd % 8 != 0)))
        fused.kind = FusedEpilogueKind::None;
      auto setEpilogue = [&](FusedEpilogueKind kind) {
        cublasLtEpilogue_t epilogue = CUBLASLT_EPILOGUE_DEFAULT;
        switch (kind) {
        case FusedEpilogueKind::None:
          break;
        case FusedEpilogueKind::Bias:
          epilogue = CUBLASLT_EPILOGUE_BIAS;
          break;
        case FusedEpilogueKind::GeluBias:
          epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
          break;
        case FusedEpilogueKind::Gelu:
          epilogue = CUBLASLT_EPILOGUE_GELU;
          break;
        case FusedEpilogueKind::DGelu:
          epilogue = CUBLASLT_EPILOGUE_DGELU;
          break;
        }
        api.matmulDescSetAttribute(plan.desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                   &epilogue, sizeof(epilogue));
        if (kind == FusedEpilogueKind::Bias ||
            kind == FusedEpilogueKind::GeluBias)
          api.matmulDescSetAttribute(plan.desc,
                                     CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                     &biasPointer, sizeof(biasPointer));
        if (kind == FusedEpilogueKind::DGelu) {
          // The GELU input, in C's column-major layout (n x m, ld auxLd).
          api.matmulDescSetAttribute(plan.desc,
                                     CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER,
                                     &auxPointer, sizeof(auxPointer));
          api.matmulDescSetAttribute(plan.desc,
                                     CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD,
                                     &fused.auxLd, sizeof(fused.auxLd));
        }
        plan.fused = kind;
      };
      if (fused.kind != FusedEpilogueKind::None)
        setEpilogue(fused.kind);
      // Counted once the algorithm is known (cuBLASLt may have none).
      auto countFused = [&] {
        if (plan.fused == FusedEpilogueKind::Bias)
          ++info.fusedBiasEpilogues;
        else if (plan.fused == FusedEpilogueKind::DGelu)
          ++info.fusedDGeluEpilogues;
        else if (plan.fused != FusedEpilogueKind::None)
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
      key += llvm::formatv(" {0} {1}", auxAlignment, fused.auxLd).str();
      auto cached = algoCache.find(key);
      if (cached != algoCache.end()) {
        plan.algo = cached->second.first;
        if (!cached->second.second && plan.fused != FusedEpilogueKind::None)
          setEpilogue(FusedEpilogueKind::None);
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
          plan.fused != FusedEpilogueKind::None) {
        // No algorithm runs this epilogue here (cuBLASLt supports some
        // epilogues for some types and layouts only): the kernel does.
        setEpilogue(FusedEpilogueKind::None);
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
      algoCache[key] = {result.algo, plan.fused != FusedEpilogueKind::None};
      countFused();
      break;
    }
    case kir::StepKind::Attention:
    case kir::StepKind::AttentionGrad: {
      impl.stepPlan.push_back(impl.attentions.size());
      AttentionPlan &plan = impl.attentions.emplace_back();
      bool forward = step.kind == kir::StepKind::Attention;
      const kir::View &q = forward ? step.attention.q : step.attentionGrad.q;
      cuda::FlashAttentionVariant variant{
          forward ? step.attention.headDim : step.attentionGrad.headDim,
          prog.buffers[q.buffer].dtype};
      if (forward) {
        const kir::AttentionStep &att = step.attention;
        for (const kir::View *view : {&att.k, &att.v, &att.out})
          if (prog.buffers[view->buffer].dtype != variant.dtype)
            return llvm::createStringError(
                "attention step '" + step.origin +
                "': q, k, v and out must share one dtype");
        if (prog.buffers[att.lse.buffer].dtype != kir::DType::F32)
          return llvm::createStringError("attention step '" + step.origin +
                                         "': lse must be f32");
        plan.forwardName = cuda::flashForwardName(variant);
        if (llvm::Error error =
                libraryFunction(plan.forwardName, &plan.forward))
          return error;
        plan.forwardLaunch =
            cuda::flashForwardLaunch(att.batch, att.heads, att.seq);
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
          if (prog.buffers[view->buffer].dtype != variant.dtype)
            return llvm::createStringError(
                "attention gradient step '" + step.origin +
                "': its tensors must share one dtype");
        plan.dkdvName = cuda::flashBackwardDkDvName(variant);
        plan.dqName = cuda::flashBackwardDqName(variant);
        if (llvm::Error error = libraryFunction(plan.dkdvName, &plan.dkdv))
          return error;
        if (llvm::Error error = libraryFunction(plan.dqName, &plan.dq))
          return error;
        plan.dkdvLaunch =
            cuda::flashBackwardDkDvLaunch(att.batch, att.heads, att.seq);
        plan.dqLaunch =
            cuda::flashBackwardDqLaunch(att.batch, att.heads, att.seq);
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
      kir::DType idType = prog.buffers[e.ids.buffer].dtype;
      if (llvm::Error error = libraryFunction("llmc_embedding_zero", &plan.zero))
        return error;
      if (llvm::Error error = libraryFunction(
              idType == kir::DType::I64 ? "llmc_embedding_grad_i64"
                                        : "llmc_embedding_grad_i32",
              &plan.scatter))
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
      plan.zeroLaunch.block[0] = 256;
      plan.zeroLaunch.grid[0] =
          std::clamp<int64_t>((e.rows * e.channels + 255) / 256, 1, 8192);
      plan.scatterLaunch.block[0] = 128;
      plan.scatterLaunch.grid[0] = std::max<int64_t>((e.channels + 127) / 128, 1);
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
      if (step.gemm.epilogue >= 0 && gemm.fused == FusedEpilogueKind::None) {
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
          name += im.gemms[plan].fused != FusedEpilogueKind::None
                      ? std::string(" +") +
                            fusedEpilogueName(im.gemms[plan].fused) +
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

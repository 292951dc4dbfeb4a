// What the CUDA executor launches, as data: compiled module images, launch
// shapes, the flash attention kernels' argument blocks, and the compile
// callback through which the executor (runtime/Cuda) receives them from
// codegen (codegen/KernelToCuda/CudaCompiler.h). No MLIR, no CUDA headers:
// codegen writes these, the runtime reads them.
#ifndef LLMC_IR_KERNEL_CUDAMODULE_H
#define LLMC_IR_KERNEL_CUDAMODULE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"

#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

namespace llmc::kir {
struct Program;
} // namespace llmc::kir

namespace llmc::cuda {

/// How a kernel is launched: cuLaunchKernel's grid, block and dynamic
/// shared memory size.
struct CudaLaunch {
  int64_t grid[3] = {1, 1, 1};
  int block[3] = {1, 1, 1};
  int sharedBytes = 0;       // dynamic shared memory, for cuLaunchKernel
  int staticSharedBytes = 0; // __shared__ arrays in the source (for people)

  int threadsPerBlock() const { return block[0] * block[1] * block[2]; }
};

/// A cubin compiled for one architecture.
struct Cubin {
  int arch = 0; // compute capability as major*10+minor: 80 -> sm_80
  std::vector<uint8_t> bytes;
};

/// What cuModuleLoadData takes: a cubin, or PTX text (NUL-terminated).
struct CudaImage {
  const void *data = nullptr;
  size_t size = 0;
  bool isPtx = false;
  int arch = 0; // the cubin's sm, or the PTX's compute_ version
};

/// The result of compiling one source.
struct CudaBinaries {
  std::vector<Cubin> cubins; // one per architecture asked for, in order
  std::string ptx;           // compute_<ptxArch> PTX; empty if not asked
  int ptxArch = 0;
  std::string log;           // the compiler's warnings, if any

  /// The best image for a GPU of compute capability `cc` (major*10+minor):
  /// the cubin of the highest arch with the same major and a minor <= cc's
  /// (a cubin runs on later minors of its major), else the PTX if its
  /// arch <= cc, else an error naming what the binaries hold.
  llvm::Expected<CudaImage> imageFor(int cc) const;
};

/// How one compilation went (NVRTC and its disk cache).
struct NvrtcStats {
  bool cacheHit = false;
  bool corruptEntry = false; // an entry failed its checks and was replaced
  int compilations = 0;      // NVRTC programs compiled (one per arch + PTX)
  double compileSeconds = 0;
  std::string cachePath;
  std::string warning; // why the cache entry could not be written, if so
};

/// Where one flash attention operand lives: element (b, h, t, d) at
/// offset + b*batch + h*head + t*seq + d*dim (lse: dim unused).
struct AttentionViewArgs {
  int64_t offset = 0, batch = 0, head = 0, seq = 0, dim = 0;
};

/// The flash attention forward kernel's one argument, passed by value
/// (layout = llmc_attn_fwd_args in codegen/KernelToCuda/FlashAttention.cpp).
struct AttentionForwardArgs {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void *out = nullptr;
  float *lse = nullptr;
  /// kir::AttentionStep::positions (i32; null: none): element (b, t) at
  /// vpos.offset + b*vpos.batch + t*vpos.seq.
  const int32_t *positions = nullptr;
  AttentionViewArgs vq, vk, vv, vout, vlse, vpos;
  int32_t batch = 0, heads = 0, seq = 0, causal = 1;
  float scale = 1.0f;
  int32_t kvSeq = 0; // keys in k and v; 0: seq
};

/// The flash attention backward kernels' argument (layout =
/// llmc_attn_bwd_args).
struct AttentionBackwardArgs {
  const void *dout = nullptr, *q = nullptr, *k = nullptr, *v = nullptr,
             *out = nullptr;
  const float *lse = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
  AttentionViewArgs vdout, vq, vk, vv, vout, vlse, vdq, vdk, vdv;
  int32_t batch = 0, heads = 0, seq = 0, causal = 1;
  float scale = 1.0f;
  int32_t pad = 0;
};

/// The 2:4 sparse tensor-core GEMM's one argument, passed by value
/// (layout = llmc_sparse_gemm_args in codegen/KernelToCuda/SparseGemm.cpp):
/// y[i, j] = sum_c x[i, c] * W[j, c] for i < m, j < n, W [n, k] 2:4 in
/// runtime/Weights/Sparsity.h's TensorCoreTwoOfFour order (values, meta), x [m, k]
/// bf16 or f16 at row stride ldx (even, 4-byte aligned), y f32 at ldy.
struct SparseGemmArgs {
  const void *values = nullptr, *meta = nullptr, *x = nullptr;
  float *y = nullptr;
  int64_t m = 0, n = 0, k = 0, ldx = 0, ldy = 0, rowTiles = 0, kTiles = 0;
};

/// Elements of one member a block of a multi-tensor kernel takes at a time
/// (a multiple of every vector width, so a chunk of an aligned member
/// starts aligned).
inline constexpr int64_t kMultiTensorChunk = 8192;

/// Kernel steps of a program that run as ONE launch of a multi-tensor
/// kernel (codegen/KernelToCuda/MultiTensor.h plans them): kernels with the
/// same body whose every operand is either read or written at the flat
/// element index (contiguous) or one element (broadcast), none of which
/// touches what another member writes. The kernel's ABI:
///
///   extern "C" __global__ void NAME(const long long *table,
///                                   long long members, long long chunks);
///
/// `table` is device memory holding, per member in `steps` order,
/// members' kernels' operand count + 3 words: each operand's address
/// (its buffer's base + offset * element size), the member's element
/// count, the index of its first chunk (chunks of kMultiTensorChunk
/// elements, numbered over the members in order), and 1 if every
/// contiguous operand's address is a multiple of 16 bytes (128-bit
/// accesses), else 0. multiTensorTable builds it. Any grid covers all
/// chunks (a grid-stride loop); the block must be launch.block.
///
/// A Sum batch (kind Sum) instead replaces, per member, the kernel steps
/// that reduce one tensor to one number: a kernel summing an elementwise
/// function of its contiguous (and broadcast) operands over its whole
/// domain into one element, or such a kernel summing each row into a
/// temporary followed by a kernel summing that temporary into one element
/// (the gradient norm's sums of squares). Two launches, both where
/// steps[0] was, with one more argument, f32 scratch of `chunks` floats
/// the executor owns:
///
///   NAME(table, members, chunks, float *partials)        every chunk's sum
///   totalName(table, members, chunks, const float *partials)
///                               each member's chunks' sums, stored to its
///                               total
///
/// Both add in an order fixed by the table and the block shape (a chunk by
/// one block, the chunks of a member in order by one block), never by the
/// grid: no atomics, the same bits on every run and any grid. The table is
/// the reading kernel's (its `members` entries in memberSteps order), with
/// the stored operand's word holding the address of the member's total
/// (the last kernel's stored element); the row temporary is not written.
struct CudaKernelBatch {
  enum class Kind : uint8_t { Elementwise, Sum };
  Kind kind = Kind::Elementwise;
  std::string name;
  CudaLaunch launch;
  /// Kernel steps (indices into Program::steps), ascending: the batch is
  /// launched where steps[0] was and the others launch nothing.
  std::vector<int32_t> steps;
  /// Per operand of the members' kernels (a Sum batch: of the reading
  /// kernels): 1 contiguous, 0 broadcast (a Sum batch's stored operand: 0).
  std::vector<uint8_t> contiguous;
  int vectorWidth = 1; // elements per 128-bit access on aligned members
  /// Sum: per member, the step of the kernel reading the tensor and the
  /// step of the kernel storing its total (the same step for one kernel).
  std::vector<std::pair<int32_t, int32_t>> memberSteps;
  /// Sum: the second kernel and its launch.
  std::string totalName;
  CudaLaunch totalLaunch;

  /// The members, in table order (Sum: one per memberSteps entry).
  size_t members() const {
    return kind == Kind::Sum ? memberSteps.size() : steps.size();
  }
};

/// The table of `batch` over buffers at `bases` (one address per program
/// buffer: device addresses in the executor, host ones in the tests), and
/// its number of chunks in `chunks`.
std::vector<int64_t> multiTensorTable(const kir::Program &program,
                                      const CudaKernelBatch &batch,
                                      llvm::ArrayRef<uint64_t> bases,
                                      int64_t &chunks);

/// A kernel of the library module and its launch.
struct LibraryKernel {
  std::string name;
  CudaLaunch launch;
};

/// Everything the CUDA executor loads for one program.
///
/// `kernels` holds one `extern "C"` function per program kernel, named
/// kir::Kernel::name, taking one pointer per operand (the ABI of
/// codegen/KernelToCuda/KernelToCuda.h); `kernelLaunches[i]` launches
/// program.kernels[i].
///
/// `library` holds what the program's library steps launch, in step order
/// in `stepKernels[step]` (empty for Kernel and Gemm steps):
///   Attention      {forward}                    (AttentionForwardArgs)
///   AttentionGrad  {dk and dv, dq}              (AttentionBackwardArgs)
///   EmbeddingGrad  {zero, scatter}  the zero kernel takes (out, offset,
///                  row stride, col stride, rows, channels); the scatter
///                  (ids, offset, stride, grad, offset, position stride,
///                  col stride, out, offset, row stride, col stride,
///                  positions, channels); every integer a long long.
/// `hasLibrary` is false when no step needs it.
struct CudaModules {
  CudaBinaries kernels;
  std::vector<CudaLaunch> kernelLaunches;
  bool kernelsPrecompiled = false; // from an artifact, not compiled now
  NvrtcStats kernelStats;
  bool hasLibrary = false;
  CudaBinaries library;
  NvrtcStats libraryStats;
  std::vector<std::vector<LibraryKernel>> stepKernels; // per program step
  /// Multi-tensor launches of kernel steps (functions in `kernels`); a
  /// kernel step in none launches its own kernel. Not serialized: modules
  /// read back (an exported binary's) launch every kernel step alone.
  std::vector<CudaKernelBatch> batches;
};

/// `modules` as bytes: what an exported binary carries per program
/// (`llmc export --target cuda`), so that it loads compiled images and
/// launches without NVRTC. The NVRTC stats are not kept.
std::vector<char> serializeCudaModules(const CudaModules &modules);
/// The modules serializeCudaModules wrote, marked precompiled; truncated or
/// foreign bytes are an error that starts with `name` (the file and
/// section).
llvm::Expected<CudaModules> deserializeCudaModules(llvm::ArrayRef<char> bytes,
                                                   llvm::StringRef name);

/// Compiles (or loads) the modules of a program; the CUDA executor calls it
/// once, at creation. codegen/KernelToCuda/CudaCompiler.h makes one.
using CudaCompileFn =
    std::function<llvm::Expected<CudaModules>(const kir::Program &)>;

} // namespace llmc::cuda

#endif // LLMC_IR_KERNEL_CUDAMODULE_H

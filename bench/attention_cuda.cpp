// bench-attention-cuda: flash attention on the tensor cores
// (codegen/KernelToCuda/FlashAttentionTc.cpp, mma.sync m16n8k16 through
// NVRTC) against the CUDA-core kernels of the same module (the variant's
// `scalar` form), causal, on one GPU, at GPT-2 124M's and a 350M model's
// heads (head size 64) and at head size 128: forward and backward (dk/dv +
// dq) times, TFLOP/s of the products the masked half of the scores needs
// (forward 2 products, backward 5, 2 T^2 D B H each, halved for causal),
// and the largest difference between the two kernels' out, dq, dk and dv
// relative to the largest |value|. Without a GPU it says so and exits 0.
//
//   bench-attention-cuda [--reps N]
#include "bench/CudaBench.h"
#include "bench/Options.h"

#include "codegen/KernelToCuda/FlashAttention.h"
#include "runtime/Weights/Weights.h"

#include "llvm/Support/CommandLine.h"
#include "llvm/Support/Format.h"
#include "llvm/Support/raw_ostream.h"

#include <cmath>
#include <random>

using namespace llmc;
using bench::orDie;

namespace {

llvm::cl::opt<bool> compileOnlyFlag(
    "compile-only", llvm::cl::cat(llmc::bench::benchOptions()),
    llvm::cl::desc("Compile the CUDA module with NVRTC and exit (no GPU "
                   "needed)"));
llvm::cl::opt<int> reps("reps", llvm::cl::cat(llmc::bench::benchOptions()),
                        llvm::cl::desc("Timed runs per case (best "
                                       "counts; default 10)"),
                        llvm::cl::init(10));

/// One implementation's outputs on the device.
struct Outputs {
  CUdeviceptr out = 0, lse = 0, dq = 0, dk = 0, dv = 0;
};

struct Shape {
  const char *name;
  int64_t batch, heads, seq, headDim;
};

void benchShape(bench::CudaBenchGpu &gpu, CUmodule module, const Shape &shape,
                kir::DType dtype) {
  const int64_t B = shape.batch, H = shape.heads, T = shape.seq,
                D = shape.headDim, n = B * H * T * D;
  std::mt19937 rng(uint32_t(T * 131 + D));
  std::normal_distribution<float> normal(0.0f, 1.0f);
  auto random = [&] {
    std::vector<uint16_t> values(n);
    for (uint16_t &v : values)
      v = dtype == kir::DType::F16 ? runtime::floatToHalf(normal(rng))
                                   : runtime::floatToBFloat16(normal(rng));
    return values;
  };
  std::vector<uint16_t> zeros(n, 0);
  std::vector<float> lseZeros(B * H * T, 0.0f);
  CUdeviceptr q = gpu.upload(random().data(), n * 2),
              k = gpu.upload(random().data(), n * 2),
              v = gpu.upload(random().data(), n * 2),
              dout = gpu.upload(random().data(), n * 2);
  cuda::AttentionViewArgs view{0, H * T * D, T * D, D, 1};
  cuda::AttentionViewArgs lseView{0, H * T, T, 1, 0};

  cuda::FlashAttentionVariant tc{D, dtype}, scalar{D, dtype, true};
  Outputs results[2];
  double ms[2][2];
  for (int which = 0; which < 2; ++which) {
    const cuda::FlashAttentionVariant &variant = which ? scalar : tc;
    Outputs &o = results[which];
    o.out = gpu.upload(zeros.data(), n * 2);
    o.dq = gpu.upload(zeros.data(), n * 2);
    o.dk = gpu.upload(zeros.data(), n * 2);
    o.dv = gpu.upload(zeros.data(), n * 2);
    o.lse = gpu.upload(lseZeros.data(), lseZeros.size() * 4);
    cuda::AttentionForwardArgs forward;
    forward.q = reinterpret_cast<const void *>(q);
    forward.k = reinterpret_cast<const void *>(k);
    forward.v = reinterpret_cast<const void *>(v);
    forward.out = reinterpret_cast<void *>(o.out);
    forward.lse = reinterpret_cast<float *>(o.lse);
    forward.vq = forward.vk = forward.vv = forward.vout = view;
    forward.vlse = lseView;
    forward.batch = B;
    forward.heads = H;
    forward.seq = T;
    forward.causal = 1;
    forward.scale = float(1.0 / std::sqrt(double(D)));
    cuda::AttentionBackwardArgs backward;
    backward.dout = reinterpret_cast<const void *>(dout);
    backward.q = forward.q;
    backward.k = forward.k;
    backward.v = forward.v;
    backward.out = forward.out;
    backward.lse = forward.lse;
    backward.dq = reinterpret_cast<void *>(o.dq);
    backward.dk = reinterpret_cast<void *>(o.dk);
    backward.dv = reinterpret_cast<void *>(o.dv);
    backward.vdout = backward.vq = backward.vk = backward.vv = backward.vout =
        backward.vdq = backward.vdk = backward.vdv = view;
    backward.vlse = lseView;
    backward.batch = B;
    backward.heads = H;
    backward.seq = T;
    backward.causal = 1;
    backward.scale = forward.scale;
    CUfunction fwd = gpu.function(module, cuda::flashForwardName(variant));
    CUfunction dkdv =
        gpu.function(module, cuda::flashBackwardDkDvName(variant));
    CUfunction dq = gpu.function(module, cuda::flashBackwardDqName(variant));
    cuda::CudaLaunch fwdLaunch = cuda::flashForwardLaunch(variant, B, H, T);
    cuda::CudaLaunch dkdvLaunch =
        cuda::flashBackwardDkDvLaunch(variant, B, H, T);
    cuda::CudaLaunch dqLaunch = cuda::flashBackwardDqLaunch(variant, B, H, T);
    ms[which][0] = gpu.bestMs(
        reps, [&] { gpu.launch(fwd, fwdLaunch, &forward, "forward"); });
    ms[which][1] = gpu.bestMs(reps, [&] {
      gpu.launch(dkdv, dkdvLaunch, &backward, "dk/dv");
      gpu.launch(dq, dqLaunch, &backward, "dq");
    });
  }

  // The two implementations' results, each from its own forward.
  double worst = 0;
  for (CUdeviceptr Outputs::*field :
       {&Outputs::out, &Outputs::dq, &Outputs::dk, &Outputs::dv}) {
    std::vector<uint16_t> a(n), b(n);
    gpu.cu->memcpyDtoHAsync(a.data(), results[0].*field, n * 2, gpu.stream);
    gpu.cu->memcpyDtoHAsync(b.data(), results[1].*field, n * 2, gpu.stream);
    gpu.cu->streamSynchronize(gpu.stream);
    double largest = 0, error = 0;
    for (int64_t i = 0; i < n; ++i) {
      auto widen = [&](uint16_t bits) {
        return double(dtype == kir::DType::F16
                          ? runtime::halfToFloat(bits)
                          : runtime::bfloat16ToFloat(bits));
      };
      largest = std::max(largest, std::fabs(widen(b[i])));
      error = std::max(error, std::fabs(widen(a[i]) - widen(b[i])));
    }
    worst = std::max(worst, error / std::max(largest, 1e-30));
  }
  // Causal: half of the T x T scores (and of their products).
  double products = 2.0 * double(T) * double(T) * double(D) * B * H / 2;
  double forwardFlops = 2 * products, backwardFlops = 5 * products;
  llvm::outs() << llvm::format(
      "  %-10s %4s %3lld %3lld %5lld %4lld %9.1f %9.1f %7.1f %7.1f %9.1f "
      "%9.1f %7.1f %7.1f %9.1e\n",
      shape.name, kir::dtypeName(dtype), (long long)B, (long long)H,
      (long long)T, (long long)D, ms[1][0] * 1e3, ms[0][0] * 1e3,
      forwardFlops / (ms[1][0] * 1e9), forwardFlops / (ms[0][0] * 1e9),
      ms[1][1] * 1e3, ms[0][1] * 1e3, backwardFlops / (ms[1][1] * 1e9),
      backwardFlops / (ms[0][1] * 1e9), worst);
  for (CUdeviceptr p : {q, k, v, dout})
    gpu.cu->memFree(p);
  for (const Outputs &o : results)
    for (CUdeviceptr p : {o.out, o.lse, o.dq, o.dk, o.dv})
      gpu.cu->memFree(p);
}

} // namespace

int main(int argc, char **argv) {
  llmc::bench::parseOptions(
      argc, argv,
      "bench-attention-cuda: tensor-core flash attention vs CUDA cores\n");
  bench::cudaBenchName() = "bench-attention-cuda";
  std::vector<cuda::FlashAttentionVariant> variants;
  for (int64_t headDim : {64, 128})
    for (kir::DType dtype : {kir::DType::BF16, kir::DType::F16}) {
      variants.push_back({headDim, dtype});
      variants.push_back({headDim, dtype, /*scalar=*/true});
    }
  std::string source = cuda::emitFlashAttentionModule(variants);
  if (compileOnlyFlag)
    return bench::compileOnly(source, "flash.cu");
  std::optional<bench::CudaBenchGpu> gpu =
      bench::CudaBenchGpu::open("bf16 mma.sync tensor cores");
  if (!gpu)
    return 0;
  CUmodule module = gpu->load(source, "flash.cu");
  llvm::outs() << "bench-attention-cuda: " << gpu->describe() << ", best of "
               << reps << " runs\n";
  llvm::outs() << "causal flash attention; cuda: CUDA cores, tc: mma.sync "
                  "m16n8k16 (f32 accumulation); backward = dk/dv + dq; TF: "
                  "TFLOP/s of the unmasked half; err: tc vs cuda, of the "
                  "largest |value|\n";
  llvm::outs() << llvm::format(
      "  %-10s %4s %3s %3s %5s %4s %9s %9s %7s %7s %9s %9s %7s %7s %9s\n",
      "model", "type", "B", "H", "T", "D", "fwd cuda", "fwd tc", "TF cuda",
      "TF tc", "bwd cuda", "bwd tc", "TF cuda", "TF tc", "max err");
  for (const Shape &shape :
       {Shape{"gpt2 124M", 16, 12, 1024, 64},
        Shape{"gpt-350M", 8, 16, 1024, 64}, Shape{"d128", 8, 8, 1024, 128},
        Shape{"d128 T2k", 4, 8, 2048, 128}})
    for (kir::DType dtype : {kir::DType::BF16, kir::DType::F16})
      benchShape(*gpu, module, shape, dtype);
  return 0;
}

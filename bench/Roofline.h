// The roofline model of llmc programs that bench-roofline prints and
// bench-gpu sets next to its measurements: a MODEL, NOT A MEASUREMENT.
// Per step, FLOPs and DRAM bytes from the program and the time at the H100
// SXM's peaks (see bench/roofline.cpp for the assumptions). GEMMs and
// attention on 16-bit operands use the bf16 tensor-core peak, on f32 the
// TF32 one; fused kernels the fp32 CUDA cores.
#ifndef LLMC_BENCH_ROOFLINE_H
#define LLMC_BENCH_ROOFLINE_H

#include "ir/kernel/Program.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/Support/FormatVariadic.h"

#include <algorithm>
#include <cctype>
#include <map>
#include <set>
#include <string>
#include <tuple>
#include <vector>

namespace llmc::bench {

inline constexpr double kBandwidth = 3.35e12; // bytes/s
inline constexpr double kBf16Peak = 989e12;   // FLOP/s
inline constexpr double kTf32Peak = 494e12;
inline constexpr double kFp32Peak = 67e12;

/// One step's cost.
struct Cost {
  std::string what; // for grouping and printing
  double flops = 0, bytes = 0;
  double peak = kFp32Peak; // the compute peak that applies
  double seconds() const { return std::max(flops / peak, bytes / kBandwidth); }
  bool memoryBound() const { return bytes / kBandwidth >= flops / peak; }
};

inline double viewBytes(const std::vector<int64_t> &shape) {
  double n = 4;
  for (int64_t extent : shape)
    n *= double(extent);
  return n;
}

/// DRAM bytes of a kernel: each distinct (buffer, offset, strides) operand
/// once, its elements the product of the extents it varies over (all of
/// the domain for a gather), read and/or written.
inline double kernelBytes(const kir::Kernel &kernel, int32_t skipBuffer = -1) {
  std::set<std::tuple<int32_t, int64_t, std::vector<int64_t>>> seen;
  std::map<int32_t, std::pair<bool, bool>> use; // operand: loaded, stored
  std::map<int32_t, bool> gathered;
  for (const kir::Instr &instr : kernel.body) {
    if (instr.op == kir::Op::Load) {
      use[instr.operand].first = true;
      for (int32_t arg : instr.args)
        gathered[instr.operand] |= arg >= 0;
    } else if (instr.op == kir::Op::Store) {
      use[instr.operand].second = true;
    }
  }
  double total = 0;
  for (auto [index, access] : llvm::enumerate(kernel.operands)) {
    if (access.buffer == skipBuffer)
      continue;
    if (!seen.insert({access.buffer, access.offset, access.strides}).second)
      continue;
    double elements = 1;
    for (size_t d = 0; d < kernel.domain.size(); ++d)
      if (access.strides[d] != 0 || gathered[index])
        elements *= double(kernel.domain[d]);
    auto [loaded, stored] = use[index];
    total += elements * kir::dtypeBytes(access.dtype) * (loaded + stored);
  }
  return total;
}

/// A kernel's origin with layer numbers as '#' (h.3.attn -> h.#.attn), so
/// that the same kernel of every layer is one line, and its domain.
inline std::string kernelKind(const kir::Kernel &kernel) {
  std::string origin = kernel.origin.empty() ? kernel.name : kernel.origin;
  std::string kind;
  for (size_t i = 0; i < origin.size(); ++i) {
    bool digit = std::isdigit(static_cast<unsigned char>(origin[i]));
    if (!digit)
      kind += origin[i];
    else if (i == 0 || !std::isdigit(static_cast<unsigned char>(origin[i - 1])))
      kind += '#';
  }
  return kind + " " + kir::formatShape(kernel.domain);
}

/// Attention runs on the tensor cores at the peak of its type: bf16/f16
/// (FlashAttentionTc), else TF32's as the f32 model always assumed.
inline double attentionPeak(const kir::Program &program, const kir::View &q) {
  return kir::dtypeBytes(program.buffers[q.buffer].dtype) < 4 ? kBf16Peak
                                                              : kTf32Peak;
}

/// One Cost per step of `program` (communication steps skipped), in step
/// order; `stepOf[i]` is the step index of costs[i] when given.
inline std::vector<Cost> programCosts(const kir::Program &program,
                                      std::vector<size_t> *stepOf = nullptr) {
  std::vector<Cost> costs;
  for (const kir::Step &step : program.steps) {
    Cost cost;
    switch (step.kind) {
    case kir::StepKind::Kernel: {
      const kir::Kernel &kernel = program.kernels[step.kernel];
      cost.what = "kernel " + kernelKind(kernel);
      cost.flops = double(kir::countFlops(kernel));
      cost.bytes = kernelBytes(kernel);
      break;
    }
    case kir::StepKind::Gemm: {
      const kir::GemmStep &g = step.gemm;
      cost.what = llvm::formatv("gemm {0}x{1}x{2}{3}{4}", g.m, g.n, g.k,
                                g.batch > 1 ? " batch " + std::to_string(g.batch)
                                            : std::string(),
                                g.epilogue >= 0
                                    ? " + " + kernelKind(program.kernels[g.epilogue])
                                    : std::string())
                      .str();
      cost.flops = 2.0 * g.batch * g.m * g.n * g.k;
      double batchA = g.a.strides[0] ? g.batch : 1,
             batchB = g.b.strides[0] ? g.batch : 1;
      double a = kir::dtypeBytes(program.buffers[g.a.buffer].dtype),
             b = kir::dtypeBytes(program.buffers[g.b.buffer].dtype),
             c = kir::dtypeBytes(program.buffers[g.c.buffer].dtype);
      cost.bytes = a * batchA * g.m * g.k + b * batchB * g.k * g.n +
                   c * double(g.batch) * g.m * g.n;
      bool narrow = a < 4 && b < 4;
      if (g.epilogue >= 0) {
        const kir::Kernel &epilogue = program.kernels[g.epilogue];
        cost.flops += double(kir::countFlops(epilogue));
        cost.bytes += kernelBytes(epilogue, g.c.buffer);
      }
      cost.peak = narrow ? kBf16Peak : kTf32Peak;
      break;
    }
    case kir::StepKind::Attention: {
      const kir::AttentionStep &a = step.attention;
      cost.what = llvm::formatv("attention B{0} H{1} T{2} D{3}", a.batch,
                                a.heads, a.seq, a.headDim)
                      .str();
      double products = 4.0 * a.batch * a.heads * a.seq * a.seq * a.headDim;
      cost.flops = a.causal ? products / 2 : products;
      cost.bytes = 4 * viewBytes({a.batch, a.heads, a.seq, a.headDim}) +
                   viewBytes({a.batch, a.heads, a.seq});
      cost.peak = attentionPeak(program, a.q);
      break;
    }
    case kir::StepKind::AttentionGrad: {
      const kir::AttentionGradStep &a = step.attentionGrad;
      cost.what = llvm::formatv("attention grad B{0} H{1} T{2} D{3}", a.batch,
                                a.heads, a.seq, a.headDim)
                      .str();
      // Five products: the scores again, dV, dP, dQ, dK.
      double products = 10.0 * a.batch * a.heads * a.seq * a.seq * a.headDim;
      cost.flops = a.causal ? products / 2 : products;
      cost.bytes = 8 * viewBytes({a.batch, a.heads, a.seq, a.headDim}) +
                   viewBytes({a.batch, a.heads, a.seq});
      cost.peak = attentionPeak(program, a.q);
      break;
    }
    case kir::StepKind::EmbeddingGrad: {
      const kir::EmbeddingGradStep &e = step.embeddingGrad;
      cost.what = llvm::formatv("embedding grad {0} ids -> [{1}, {2}]",
                                e.positions, e.rows, e.channels)
                      .str();
      cost.flops = double(e.positions) * e.channels;
      cost.bytes = 4.0 * (e.positions * (1.0 + e.channels) +
                          double(e.rows) * e.channels);
      break;
    }
    case kir::StepKind::CollectiveStart:
    case kir::StepKind::CollectiveWait:
      continue; // communication: not on the GPU's roofline
    }
    if (stepOf)
      stepOf->push_back(size_t(&step - program.steps.data()));
    costs.push_back(cost);
  }
  return costs;
}

} // namespace llmc::bench

#endif // LLMC_BENCH_ROOFLINE_H

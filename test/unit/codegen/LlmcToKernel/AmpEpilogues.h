// The 2-layer GPT-2 style model both cuBLASLt epilogue tests compile, and
// which epilogue each of its GEMMs gets in the bf16 and fp16 programs:
// GemmEpilogueTest checks codegen's classification against it,
// GemmPlanTest the cuBLASLt descriptions made from that classification.
#ifndef LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_AMPEPILOGUES_H
#define LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_AMPEPILOGUES_H

#include "ir/kernel/Program.h"

#include <string>
#include <utility>
#include <vector>

namespace llmc::test {

/// GPT-2 style: 2 layers, width 64, vocabulary 128.
constexpr const char *kGpt2TwoLayers =
    "name: g\nn_layer: 2\nn_head: 4\nn_embd: 64\nseq_len: 16\n"
    "vocab_size: 128\n";

/// Each GEMM with an epilogue kernel, in schedule order, of the llmc-amp
/// programs of kGpt2TwoLayers: @forward (the inference forward of
/// compileTrainingStep) and @grad_step. The products cast back up to f32 (the
/// logits for the loss, the f32 dX of the residual stream) have an f32 C
/// whose kernel rounds it to the narrow type as it loads it: not fused.
using EpilogueTable = std::vector<std::pair<std::string, kir::EpilogueKind>>;

inline const EpilogueTable &ampForwardEpilogues() {
  using K = kir::EpilogueKind;
  static const EpilogueTable table = {
      {"h.0.attn.c_attn.matmul_add", K::Bias},
      {"matmul_add_gelu", K::GeluBias},
      {"h.1.attn.c_attn.matmul_add", K::Bias},
      {"matmul_add_gelu", K::GeluBias},
      {"matmul_cast", K::None}};
  return table;
}

inline const EpilogueTable &ampGradStepEpilogues() {
  using K = kir::EpilogueKind;
  static const EpilogueTable table = {
      {"h.0.attn.c_attn.matmul_add", K::Bias},
      {"h.0.mlp.c_fc.matmul_add", K::Bias},
      {"h.1.attn.c_attn.matmul_add", K::Bias},
      {"h.1.mlp.c_fc.matmul_add", K::Bias},
      {"matmul_cast", K::None},
      {"lm_head.matmul_cast", K::None},
      {"matmul_gelu_grad", K::DGelu},
      {"h.1.mlp.c_fc.matmul_cast", K::None},
      {"h.1.attn.c_attn.matmul_cast", K::None},
      {"matmul_gelu_grad", K::DGelu},
      {"h.0.mlp.c_fc.matmul_cast", K::None},
      {"h.0.attn.c_attn.matmul_cast", K::None}};
  return table;
}

} // namespace llmc::test

#endif // LLMC_TEST_UNIT_CODEGEN_LLMCTOKERNEL_AMPEPILOGUES_H

// RUN: llmc-opt %s --split-input-file --llmc-autodiff --llmc-remat="policy=budget budget-bytes=1" -verify-diagnostics
// RUN: not llmc-opt %s --split-input-file --llmc-autodiff --llmc-remat=policy=everything 2>&1 | FileCheck %s --check-prefix=BADPOLICY
// RUN: not llmc-opt %s --split-input-file --llmc-autodiff --llmc-remat=policy=budget 2>&1 | FileCheck %s --check-prefix=NOBUDGET
// RUN: not llmc-opt %s --split-input-file --llmc-remat 2>&1 | FileCheck %s --check-prefix=NOGRAD

// BADPOLICY: error: llmc-remat: unknown policy 'everything' (none, full, selective, budget)
// NOBUDGET: error: llmc-remat: policy budget needs budget-bytes > 0
// NOGRAD: error: llmc-remat: the module has no @grad_step (run llmc-autodiff first)

// Tests that a budget below every plan is an error naming the smallest
// planned peak that recomputation reaches, policy full's and no remat's.
module {
  // expected-error-re @+1 {{llmc-remat: a budget of 1 bytes is below the smallest planned peak of @grad_step that recomputation reaches, {{[0-9]+}} bytes (policy full: {{[0-9]+}} bytes; no remat: {{[0-9]+}} bytes)}}
  func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                     %w0: tensor<8x8xf32> {llmc.param = "h.0.fc.weight"},
                     %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                     %targets: tensor<2x4xi32> {llmc.input = "targets"}) -> tensor<f32> {
    %x0 = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
    %m0 = llmc.matmul %x0, %w0 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %g0 = llmc.gelu %m0 approximate = tanh : tensor<2x4x8xf32>
    %x1 = llmc.add %x0, %g0 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %logits = llmc.matmul %x1, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss : tensor<f32>
  }
}

// RUN: llmc-opt %s --split-input-file --verify-diagnostics --llmc-compile-pipeline | FileCheck %s

// Tests that the compile pipeline accepts a legal model and ends with
// fusion: the embedding and the cross-entropy become kernels of their own,
// the matmul without an epilogue stays a library call.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<8x4xf32> {llmc.param = "wte"}, %[[TOK:[a-z0-9]+]]: tensor<2x3xi32>, %[[TGT:[a-z0-9]+]]: tensor<2x3xi32>
// CHECK: %[[X:.*]] = llmc.fusion "embedding" pointwise (%[[W]], %[[TOK]])
// CHECK: %[[L:.*]] = llmc.matmul %[[X]], %[[W]] {transpose_b}
// CHECK: %[[LOSS:.*]] = llmc.fusion "cross_entropy" row (%[[L]], %[[TGT]])
// CHECK: return %[[LOSS]] : tensor<f32>
func.func @forward(%wte: tensor<8x4xf32> {llmc.param = "wte"},
                   %tokens: tensor<2x3xi32>, %targets: tensor<2x3xi32>) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<8x4xf32>, tensor<2x3xi32>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<2x3x4xf32>, tensor<8x4xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x3x8xf32>, tensor<2x3xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that the pipeline starts with the legality check: a module without
// @forward stops there.
// expected-error @+1 {{module has no @forward function with a body}}
module {
  func.func @not_forward(%w: tensor<4xf32>) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
}

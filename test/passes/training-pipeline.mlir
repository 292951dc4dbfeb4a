// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-training-pipeline | FileCheck %s
// RUN: llmc-opt %s --llmc-training-pipeline -verify-diagnostics

// Tests the training pipeline on the tiny GPT-2: legality, autodiff,
// optimizer, then fusion over all three functions.
//
// @forward is fused as in the compile pipeline.
// CHECK-LABEL: func.func @forward(
// CHECK: llmc.fusion "embedding_add_layer_norm" row
// CHECK: llmc.fusion "matmul_add_gelu" gemm
// CHECK: llmc.fusion "cross_entropy" row
//
// @grad_step: the forward ops again (GELU kept apart: its input is saved
// for the backward), then the backward sweep fused into row kernels
// (cross_entropy_grad, layer_norm_grad with the residual gradient added),
// the GELU gradient as the epilogue of the GEMM before it, attention and
// embedding gradients as library ops, and each gradient accumulated into
// its buffer (a weight gradient's GEMM with the add as its epilogue, run
// where the GEMM was, not at the end with the add, so that its operands
// need not live to the end of the step).
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: {llmc.state = "grad.wte"}
// CHECK-SAME: {llmc.input = "dloss"}
// CHECK-SAME: -> (tensor<f32> {llmc.output = "loss"}, tensor<256x64xf32> {llmc.output = "grad.wte", llmc.updates = "grad.wte"}
// CHECK: llmc.fusion "embedding_add_layer_norm" row
// CHECK: llmc.fusion "gelu" pointwise
// CHECK: llmc.fusion "cross_entropy" row
// CHECK: llmc.fusion "cross_entropy_grad" row
// CHECK: llmc.fusion "layer_norm_grad" row
// CHECK: llmc.fusion "matmul_gelu_grad" gemm
// CHECK: llmc.fusion "matmul_add" gemm
// CHECK: llmc.attention_grad
// CHECK: llmc.fusion "layer_norm_grad_add" row
// CHECK: llmc.embedding_grad
// CHECK: llmc.fusion "matmul_add_add" gemm
// CHECK-NOT: llmc.fusion "matmul_add" gemm
//
// @update_step: one sum-of-squares kernel per gradient, one scalar kernel
// for the norm and the clip coefficient, then one fused update kernel per
// parameter writing the parameter and both moments.
// CHECK-LABEL: func.func @update_step(
// CHECK-SAME: {llmc.state = "adam_m.wte"}
// CHECK-SAME: {llmc.input = "lr"}
// CHECK-SAME: -> (tensor<f32> {llmc.output = "grad_norm"}
// CHECK: llmc.fusion "mul_reduce_sum" row
// CHECK: llmc.fusion "add_{{[a-z_]*}}sqrt_add_div_neg_neg_max_neg" pointwise
// CHECK: llmc.fusion "mul_mul_mul_mul_add_mul_mul_mul_add_sqrt_mul_add_mul_div_sub" pointwise ({{.*}}) : ({{.*}}) -> (tensor<256x64xf32>, tensor<256x64xf32>, tensor<256x64xf32>)

// The pipeline starts with the legality check.
// expected-error @+1 {{module has no @forward function with a body}}
module {
  func.func @not_forward(%w: tensor<4xf32>) -> tensor<4xf32> {
    return %w : tensor<4xf32>
  }
}

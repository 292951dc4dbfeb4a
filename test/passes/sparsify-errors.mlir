// RUN: llmc-opt %s --split-input-file --verify-diagnostics --llmc-sparsify
// RUN: not llmc-opt %s --split-input-file --llmc-sparsify="params=h.*,lm_head*" 2>&1 | FileCheck %s --check-prefix=NOMATCH
// RUN: not llmc-opt %s --split-input-file --llmc-sparsify=pattern=4:8 2>&1 | FileCheck %s --check-prefix=PATTERN
// RUN: not llmc-opt %s --split-input-file --llmc-sparsify="params=h.[0" 2>&1 | FileCheck %s --check-prefix=GLOB

// PATTERN: error: llmc-sparsify: unknown sparsity pattern '4:8' (supported: 2:4)
// GLOB: error: llmc-sparsify: bad parameter pattern 'h.[0'
// NOMATCH: error: llmc-sparsify: parameter pattern 'lm_head*' matches no matmul weight (they are: h.0.fc.weight, h.1.fc.weight)

// Tests that a selected weight whose reduction dimension (K, last in the
// [N, K] layout) is not a multiple of 4 is an error naming it.
// expected-error @+1 {{the reduction dimension of 'h.0.fc.weight' 'tensor<8x6xf32>' is 6, not a multiple of 4}}
func.func @forward(%w: tensor<8x6xf32> {llmc.param = "h.0.fc.weight"},
                   %x: tensor<2x6xf32> {llmc.input = "x"}) -> tensor<2x8xf32> {
  %y = llmc.matmul %x, %w {transpose_b} : tensor<2x6xf32>, tensor<8x6xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a weight read as [K, N] (no transpose_b) is refused: the
// groups must run along the reduction dimension, stored last.
// expected-error @+1 {{'h.0.fc.weight' 'tensor<8x4xf32>' is read as [K, N]}}
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "h.0.fc.weight"},
                   %x: tensor<2x8xf32> {llmc.input = "x"}) -> tensor<2x4xf32> {
  %y = llmc.matmul %x, %w : tensor<2x8xf32>, tensor<8x4xf32>
  return %y : tensor<2x4xf32>
}

// -----

// Tests that a model without a matmul weight inside a block is an error
// (only the classifier, outside the blocks, is a matmul weight).
// expected-error @+1 {{no matmul weight to sparsify}}
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "lm_head.weight"},
                   %x: tensor<2x4xf32> {llmc.input = "x"}) -> tensor<2x8xf32> {
  %y = llmc.matmul %x, %w {transpose_b} : tensor<2x4xf32>, tensor<8x4xf32>
  return %y : tensor<2x8xf32>
}

// -----

// Tests that a pattern matching no matmul weight is an error listing them
// (NOMATCH); the norm weight is not a matmul weight.
func.func @forward(%w0: tensor<8x4xf32> {llmc.param = "h.0.fc.weight"},
                   %w1: tensor<8x8xf32> {llmc.param = "h.1.fc.weight"},
                   %g: tensor<4xf32> {llmc.param = "h.0.ln.weight"},
                   %x: tensor<2x4xf32> {llmc.input = "x"}) -> tensor<2x8xf32> {
  %y = llmc.matmul %x, %w0 {transpose_b} : tensor<2x4xf32>, tensor<8x4xf32>
  %z = llmc.matmul %y, %w1 {transpose_b} : tensor<2x8xf32>, tensor<8x8xf32>
  return %z : tensor<2x8xf32>
}

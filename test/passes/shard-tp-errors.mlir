// RUN: llmc-opt %s --split-input-file --verify-diagnostics '--llmc-tensor-parallel=tp=2'

// Tests that a share reaching an op without a tensor-parallel rule (a sum
// over the split hidden units) is an error naming the op.
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "h.0.mlp.c_fc.weight"}, %x: tensor<2x4xf32> {llmc.input = "tokens"}) -> tensor<2xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4xf32>, tensor<8x4xf32>
  // expected-error @+1 {{'llmc.reduce_sum' op llmc-tensor-parallel cannot split this op: no tensor-parallel rule for it}}
  %s = llmc.reduce_sum %h dims [1] : tensor<2x8xf32>
  return %s : tensor<2xf32>
}

// -----

// Tests that a split weight must divide into groups x tp blocks.
// expected-error @+1 {{llmc-tensor-parallel: parameter 'h.0.attn.c_attn.weight' of type 'tensor<9x4xf32>' does not split into 3 x 2 blocks along dimension 0}}
func.func @forward(%w: tensor<9x4xf32> {llmc.param = "h.0.attn.c_attn.weight"}, %x: tensor<2x4xf32> {llmc.input = "tokens"}) -> tensor<2x9xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4xf32>, tensor<9x4xf32>
  return %h : tensor<2x9xf32>
}

// -----

// Tests that a model without GPT-2 projection names is refused rather than
// left whole on every rank.
// expected-error @+1 {{llmc-tensor-parallel: no parameter of @forward is a GPT-2 attention or MLP projection}}
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "proj.weight"}, %x: tensor<2x4xf32> {llmc.input = "tokens"}) -> tensor<2x8xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4xf32>, tensor<8x4xf32>
  return %h : tensor<2x8xf32>
}

// -----

// Tests that @forward may not return a rank's share.
// expected-error @+1 {{llmc-tensor-parallel: a result of @forward is a rank's share, not the whole}}
func.func @forward(%w: tensor<8x4xf32> {llmc.param = "h.0.mlp.c_fc.weight"}, %x: tensor<2x4xf32> {llmc.input = "tokens"}) -> tensor<2x8xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4xf32>, tensor<8x4xf32>
  return %h : tensor<2x8xf32>
}

// Tests that a second result of @forward must be logits of the tokens' shape
// plus a vocabulary dimension.
// expected-error @+1 {{the second result of @forward must be the logits, a float tensor of the tokens' shape followed by the vocabulary; got 'tensor<4xf32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> (tensor<f32>, tensor<4xf32>) {
  %loss = llmc.fill 0.0 : tensor<f32>
  %lse = llmc.fill 0.0 : tensor<4xf32>
  return %loss, %lse : tensor<f32>, tensor<4xf32>
}

// Tests that @forward returns at most the loss and the logits.
// expected-error @+1 {{@forward must return the loss as tensor<f32>, optionally followed by the logits; got 'tensor<f32>', 'tensor<4x8xf32>', 'tensor<f32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> (tensor<f32>, tensor<4x8xf32>, tensor<f32>) {
  %loss = llmc.fill 0.0 : tensor<f32>
  %logits = llmc.fill 0.0 : tensor<4x8xf32>
  return %loss, %logits, %loss : tensor<f32>, tensor<4x8xf32>, tensor<f32>
}

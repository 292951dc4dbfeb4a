// Tests that tokens and targets have one shape.
// expected-error @+1 {{tokens and targets must have one shape, got 'tensor<2x4xi32>' and 'tensor<8xi32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<2x4xi32>, %targets: tensor<8xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

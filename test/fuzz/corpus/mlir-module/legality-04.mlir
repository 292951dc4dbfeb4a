// Tests that @forward takes at least the parameters, tokens and targets.
// expected-error @+1 {{@forward must take parameters, then tokens and targets; it has 2 arguments}}
func.func @forward(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

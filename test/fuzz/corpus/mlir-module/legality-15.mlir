// Tests that parameters have an element type the llmc ops accept.
// expected-error @+1 {{parameter #0 must be a statically shaped f32, f16 or bf16 tensor, got 'tensor<4xf64>'}}
func.func @forward(%w: tensor<4xf64>, %t: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<f32> {
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

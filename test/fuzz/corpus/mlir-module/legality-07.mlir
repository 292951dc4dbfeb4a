// Tests that parameters are floating-point tensors.
// expected-error @+1 {{parameter #1 must be a statically shaped f32, f16 or bf16 tensor, got 'tensor<8xi32>'}}
func.func @forward(%w: tensor<8xf32>, %v: tensor<8xi32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

// Tests that targets must be integer ids.
// expected-error @+1 {{the last two arguments of @forward (tokens, targets) must be i32 or i64 tensors, got 'tensor<4xi32>' and 'tensor<4xf32>'}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xf32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

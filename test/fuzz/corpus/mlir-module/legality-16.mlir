// Tests that token ids are i32 or i64, not any integer.
// expected-error @+1 {{the last two arguments of @forward (tokens, targets) must be i32 or i64 tensors, got 'tensor<4xi8>' and 'tensor<4xi8>'}}
func.func @forward(%w: tensor<4xf32>, %t: tensor<4xi8>, %y: tensor<4xi8>) -> tensor<f32> {
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

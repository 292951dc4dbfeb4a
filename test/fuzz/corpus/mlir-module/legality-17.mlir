// Tests that a parameter name that is not a string is an error, not ignored.
// expected-error @+1 {{the llmc.param name of parameter #0 must be a string, got 3 : i64}}
func.func @forward(%w: tensor<4xf32> {llmc.param = 3}, %t: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<f32> {
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

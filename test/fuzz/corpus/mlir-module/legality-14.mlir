// Tests that a stream at the int64 extreme is tracked like any other.
func.func @forward(%w: tensor<4xf32>, %t: tensor<4xi32>, %y: tensor<4xi32>) -> tensor<f32> {
  // expected-note @+1 {{first used here}}
  %a = llmc.dropout %w {rate = 0.1 : f32, stream = 9223372036854775807 : i64} : tensor<4xf32>
  // expected-error @+1 {{'llmc.dropout' op reuses dropout stream 9223372036854775807}}
  %b = llmc.dropout %a {rate = 0.1 : f32, stream = 9223372036854775807 : i64} : tensor<4xf32>
  %l = llmc.constant dense<0.0> : tensor<f32>
  return %l : tensor<f32>
}

// Tests that two dropout sites may not share a stream (they would draw the
// same mask).
func.func @forward(%w: tensor<4xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  // expected-note @+1 {{first used here}}
  %a = llmc.dropout %w {rate = 0.1 : f32, stream = 7 : i64} : tensor<4xf32>
  %b = llmc.dropout %w {rate = 0.1 : f32, stream = 8 : i64} : tensor<4xf32>
  // expected-error @+1 {{'llmc.dropout' op reuses dropout stream 7}}
  %c = llmc.dropout %a {rate = 0.2 : f32, stream = 7 : i64} : tensor<4xf32>
  %sum = llmc.add %b, %c : tensor<4xf32>, tensor<4xf32>
  %loss = llmc.reduce_mean %sum dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

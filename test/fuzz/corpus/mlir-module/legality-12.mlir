// Tests that @forward contains only llmc ops: a call is rejected.
func.func @helper(%x: tensor<4xf32>) -> tensor<4xf32> {
  return %x : tensor<4xf32>
}
func.func @forward(%w: tensor<4xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  // expected-error @+1 {{'func.call' op is not an llmc op; @forward may contain only llmc ops and func.return}}
  %y = func.call @helper(%w) : (tensor<4xf32>) -> tensor<4xf32>
  %loss = llmc.reduce_sum %y dims [0] : tensor<4xf32>
  return %loss : tensor<f32>
}

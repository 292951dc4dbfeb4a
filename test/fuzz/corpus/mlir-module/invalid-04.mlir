// Tests that softmax needs a last dimension.
func.func @softmax_rank(%x: tensor<f32>) {
  // expected-error @+1 {{'llmc.softmax' op input must have rank >= 1}}
  %0 = llmc.softmax %x : tensor<f32>
  return
}

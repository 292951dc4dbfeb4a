// Tests that rotary needs positions and a head dimension.
func.func @rotary_rank(%x: tensor<8xf32>) {
  // expected-error @+1 {{'llmc.rotary' op input must have rank >= 2 [..., T, D], got 1}}
  %0 = llmc.rotary %x {theta = 1.0e4 : f32} : tensor<8xf32>
  return
}

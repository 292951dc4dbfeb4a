// Tests that cast keeps the shape.
func.func @cast_shape(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.cast' op changes the shape from [4, 8] to [8, 4]}}
  %0 = llmc.cast %x : tensor<4x8xf32> -> tensor<8x4xbf16>
  return
}

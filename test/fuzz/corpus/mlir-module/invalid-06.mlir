// Tests that the block lies inside the input.
func.func @slice_bounds(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.slice' op block at offset 4 of size 8 does not fit in dimension 1 of size 8}}
  %0 = llmc.slice %x offsets [0, 4] sizes [4, 8] : tensor<4x8xf32>
  return
}

//===----------------------------------------------------------------------===//
// Reductions
//===----------------------------------------------------------------------===//

// Tests that a reduction needs a dimension.
func.func @reduce_no_dims(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.reduce_sum' op needs at least one dimension to reduce}}
  %0 = llmc.reduce_sum %x dims [] : tensor<4x8xf32>
  return
}

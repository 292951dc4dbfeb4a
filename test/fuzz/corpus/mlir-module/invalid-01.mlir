// Tests that the embedding gradient keeps grad's element type.
func.func @embedding_grad_element_type(%dx: tensor<2x8x16xf16>, %tokens: tensor<2x8xi32>) {
  // expected-error @+1 {{'llmc.embedding_grad' op grad and result must have one element type, got 'f16' and 'f32'}}
  %0 = llmc.embedding_grad %dx, %tokens : tensor<2x8x16xf16>, tensor<2x8xi32> -> tensor<50x16xf32>
  return
}

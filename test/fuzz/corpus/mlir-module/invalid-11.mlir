// Tests that dropout streams are non-negative.
func.func @dropout_negative_stream(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op stream must be non-negative, got -1}}
  %0 = llmc.dropout %x {rate = 0.1 : f32, stream = -1 : i64} : tensor<4x8xf32>
  return
}

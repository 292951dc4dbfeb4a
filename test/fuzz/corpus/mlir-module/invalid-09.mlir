// Tests that a required attribute of an op without inference is missing.
func.func @dropout_no_stream(%x: tensor<4x8xf32>) {
  // expected-error @+1 {{'llmc.dropout' op requires attribute 'stream'}}
  %0 = llmc.dropout %x {rate = 0.1 : f32} : tensor<4x8xf32>
  return
}

// Tests that scale must be an f32 attribute, not an integer.
func.func @attention_integer_scale(%q: tensor<2x4x8xf32>) {
  // expected-error @+1 {{'llmc.attention' op attribute 'scale' must be an f32 attribute, got 1 : i64}}
  %0:2 = llmc.attention %q, %q, %q {scale = 1 : i64} : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return
}

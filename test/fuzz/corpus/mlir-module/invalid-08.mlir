// Tests that the attention gradient rechecks the forward shapes.
func.func @attention_grad_causal(%q: tensor<6x8xf32>, %k: tensor<4x8xf32>, %lse: tensor<6xf32>) {
  // expected-error @+1 {{'llmc.attention_grad' op causal attention needs no more queries than keys, got 6 queries and 4 keys}}
  %0:3 = llmc.attention_grad %q, %q, %k, %k, %q, %lse {causal, scale = 0.125 : f32} : tensor<6x8xf32>, tensor<6x8xf32>, tensor<4x8xf32>, tensor<4x8xf32>, tensor<6x8xf32>, tensor<6xf32>
  return
}

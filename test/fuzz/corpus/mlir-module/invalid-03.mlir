// Tests that the condition is an i1 tensor.
func.func @select_float_condition(%c: tensor<f32>, %a: tensor<4xf32>) {
  // expected-error @+1 {{'llmc.select' op operand #0 must be statically shaped tensor of 1-bit signless integer values, but got 'tensor<f32>'}}
  %0 = llmc.select %c, %a, %a : tensor<f32>, tensor<4xf32>
  return
}

// Tests that parameter names are unique.
// expected-error @+1 {{parameters #0 and #2 share the name 'ln_f.weight'}}
func.func @forward(%a: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %b: tensor<8xf32> {llmc.param = "ln_f.bias"},
                   %c: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
}

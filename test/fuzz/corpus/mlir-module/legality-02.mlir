// Tests that a module without @forward is rejected.
// expected-error @+1 {{module has no @forward function with a body}}
module {
  func.func @model(%tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
    %loss = llmc.fill 0.0 : tensor<f32>
    return %loss : tensor<f32>
  }
}

// Tests that a declaration of @forward is not enough.
// expected-error @+1 {{module has no @forward function with a body}}
module {
  func.func private @forward(tensor<8xf32>, tensor<4xi32>, tensor<4xi32>) -> tensor<f32>
}

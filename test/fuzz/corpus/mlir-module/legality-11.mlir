// Tests that @forward has a single block (an unreachable second block is
// the only control flow that func and llmc can express).
// expected-error @+1 {{@forward must have one block, no control flow}}
func.func @forward(%w: tensor<8xf32>, %tokens: tensor<4xi32>, %targets: tensor<4xi32>) -> tensor<f32> {
  %loss = llmc.fill 0.0 : tensor<f32>
  return %loss : tensor<f32>
^bb1(%other: tensor<f32>):
  return %other : tensor<f32>
}

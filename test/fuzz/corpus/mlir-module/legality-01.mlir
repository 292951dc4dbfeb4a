// Tests that unnamed bf16 parameters and i64 ids are legal, and that only
// @forward is restricted: another function may call anything.
// The modules below are rejected, so nothing more is printed.
func.func @forward(%wte: tensor<16x8xbf16>, %tokens: tensor<4xi64>, %targets: tensor<4xi64>) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xbf16>, tensor<4xi64>
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<4x8xbf16>, tensor<16x8xbf16>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<4x16xbf16>, tensor<4xi64>
  return %loss : tensor<f32>
}
func.func @eval(%wte: tensor<16x8xbf16>, %tokens: tensor<4xi64>, %targets: tensor<4xi64>) -> tensor<f32> {
  %loss = func.call @forward(%wte, %tokens, %targets) : (tensor<16x8xbf16>, tensor<4xi64>, tensor<4xi64>) -> tensor<f32>
  return %loss : tensor<f32>
}

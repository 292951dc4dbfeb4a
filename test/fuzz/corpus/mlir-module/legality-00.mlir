// Tests that a legal tiny forward (named parameters, two dropout sites with
// distinct streams) passes unchanged.
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %lnw: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %lnb: tensor<8xf32> {llmc.param = "ln_f.bias"},
                   %tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %d0 = llmc.dropout %x {rate = 0.1 : f32, stream = 0 : i64} : tensor<2x4x8xf32>
  %y, %mean, %rstd = llmc.layer_norm %d0, %lnw, %lnb {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %d1 = llmc.dropout %y {rate = 0.1 : f32, stream = 1 : i64} : tensor<2x4x8xf32>
  %logits = llmc.matmul %d1, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

module attributes {llmc.model = {activation = "gelu", batch = 2 : i64, bias = true, dropout = 1.000000e-01 : f64, ffn_hidden = 32 : i64, n_embd = 8 : i64, n_head = 2 : i64, n_layer = 1 : i64, name = "micro", norm = "layernorm", norm_eps = 1.000000e-05 : f64, position = "learned", rope_theta = 1.000000e+04 : f64, seq_len = 4 : i64, tie_embeddings = true, vocab_size = 16 : i64}} {
  func.func @forward(%arg0: tensor<16x8xf32> {llmc.param = "wte"}, %arg1: tensor<4x8xf32> {llmc.param = "wpe"}, %arg2: tensor<8xf32> {llmc.param = "h.0.ln_1.weight"}, %arg3: tensor<8xf32> {llmc.param = "h.0.ln_1.bias"}, %arg4: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}, %arg5: tensor<24xf32> {llmc.param = "h.0.attn.c_attn.bias"}, %arg6: tensor<8x8xf32> {llmc.param = "h.0.attn.c_proj.weight"}, %arg7: tensor<8xf32> {llmc.param = "h.0.attn.c_proj.bias"}, %arg8: tensor<8xf32> {llmc.param = "h.0.ln_2.weight"}, %arg9: tensor<8xf32> {llmc.param = "h.0.ln_2.bias"}, %arg10: tensor<32x8xf32> {llmc.param = "h.0.mlp.c_fc.weight"}, %arg11: tensor<32xf32> {llmc.param = "h.0.mlp.c_fc.bias"}, %arg12: tensor<8x32xf32> {llmc.param = "h.0.mlp.c_proj.weight"}, %arg13: tensor<8xf32> {llmc.param = "h.0.mlp.c_proj.bias"}, %arg14: tensor<8xf32> {llmc.param = "ln_f.weight"}, %arg15: tensor<8xf32> {llmc.param = "ln_f.bias"}, %arg16: tensor<2x4xi32> {llmc.input = "tokens"}, %arg17: tensor<2x4xi32> {llmc.input = "targets"}) -> (tensor<f32>, tensor<2x4x16xf32>) {
    %0 = llmc.embedding %arg0, %arg16 : tensor<16x8xf32>, tensor<2x4xi32>
    %1 = llmc.slice %arg1 offsets [0, 0] sizes [4, 8] : tensor<4x8xf32>
    %2 = llmc.add %0, %1 : tensor<2x4x8xf32>, tensor<4x8xf32>
    %3 = llmc.dropout %2 {rate = 1.000000e-01 : f32, stream = 0 : i64} : tensor<2x4x8xf32>
    %result, %mean, %rstd = llmc.layer_norm %3, %arg2, %arg3 {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %4 = llmc.matmul %result, %arg4 {transpose_b} : tensor<2x4x8xf32>, tensor<24x8xf32>
    %5 = llmc.add %4, %arg5 : tensor<2x4x24xf32>, tensor<24xf32>
    %6 = llmc.slice %5 offsets [0, 0, 0] sizes [2, 4, 8] : tensor<2x4x24xf32>
    %7 = llmc.reshape %6 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %8 = llmc.transpose %7, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
    %9 = llmc.slice %5 offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
    %10 = llmc.reshape %9 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %11 = llmc.transpose %10, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
    %12 = llmc.slice %5 offsets [0, 0, 16] sizes [2, 4, 8] : tensor<2x4x24xf32>
    %13 = llmc.reshape %12 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %14 = llmc.transpose %13, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
    %result_0, %lse = llmc.attention %8, %11, %14 {causal, scale = 5.000000e-01 : f32} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>
    %15 = llmc.transpose %result_0, [0, 2, 1, 3] : tensor<2x2x4x4xf32>
    %16 = llmc.reshape %15 : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
    %17 = llmc.matmul %16, %arg6 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %18 = llmc.add %17, %arg7 : tensor<2x4x8xf32>, tensor<8xf32>
    %19 = llmc.dropout %18 {rate = 1.000000e-01 : f32, stream = 1 : i64} : tensor<2x4x8xf32>
    %20 = llmc.add %3, %19 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %result_1, %mean_2, %rstd_3 = llmc.layer_norm %20, %arg8, %arg9 {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %21 = llmc.matmul %result_1, %arg10 {transpose_b} : tensor<2x4x8xf32>, tensor<32x8xf32>
    %22 = llmc.add %21, %arg11 : tensor<2x4x32xf32>, tensor<32xf32>
    %23 = llmc.gelu %22 approximate = tanh : tensor<2x4x32xf32>
    %24 = llmc.matmul %23, %arg12 {transpose_b} : tensor<2x4x32xf32>, tensor<8x32xf32>
    %25 = llmc.add %24, %arg13 : tensor<2x4x8xf32>, tensor<8xf32>
    %26 = llmc.dropout %25 {rate = 1.000000e-01 : f32, stream = 2 : i64} : tensor<2x4x8xf32>
    %27 = llmc.add %20, %26 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %result_4, %mean_5, %rstd_6 = llmc.layer_norm %27, %arg14, %arg15 {epsilon = 9.99999974E-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
    %28 = llmc.matmul %result_4, %arg0 {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss, %lse_7 = llmc.cross_entropy %28, %arg17 : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss, %28 : tensor<f32>, tensor<2x4x16xf32>
  }
}


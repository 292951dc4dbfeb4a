module attributes {llmc.model = {activation = "swiglu", batch = 2 : i64, bias = false, dropout = 0.000000e+00 : f64, ffn_hidden = 256 : i64, n_embd = 8 : i64, n_head = 2 : i64, n_layer = 1 : i64, name = "micro-llama", norm = "rmsnorm", norm_eps = 9.9999999999999995E-7 : f64, position = "rope", rope_theta = 1.000000e+04 : f64, seq_len = 4 : i64, tie_embeddings = false, vocab_size = 16 : i64}} {
  func.func @forward(%arg0: tensor<16x-8xf32> {llmc.param = "wte"}, %arg1: tensor<8xf32> {llmc.param = "h.0.ln_1.weight"}, %arg2: tensor<24x8xf32> {llmc.param = "h.0.attn.c_attn.weight"}, %arg3: tensor<8x8xf32> {llmc.param = "h.0.attn.c_proj.weight"}, %arg4: tensor<8xf32> {llmc.param = "h.0.ln_2.weight"}, %arg5: tensor<512x8xf32> {llmc.param = "h.0.mlp.c_fc.weight"}, %arg6: tensor<8x256xf32> {llmc.param = "h.0.mlp.c_proj.weight"}, %arg7: tensor<8xf32> {llmc.param = "ln_f.weight"}, %arg8: tensor<16x8xf32> {llmc.param = "lm_head.weight"}, %arg9: tensor<2x4xi32> {llmc.input = "tokens"}, %arg10: tensor<2x4xi32> {llmc.input = "targets"}) -> (tensor<f32>, tensor<2x4x16xf32>) {
    %0 = llmc.embedding %arg0, %arg9 : tensor<16x8xf32>, tensor<2x4xi32>
    %result, %rstd = llmc.rms_norm %0, %arg1 {epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %1 = llmc.matmul %result, %arg2 {transpose_b} : tensor<2x4x8xf32>, tensor<24x8xf32>
    %2 = llmc.slice %1 offsets [0, 0, 0] sizes [2, 4, 8] : tensor<2x4x24xf32>
    %3 = llmc.reshape %2 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %4 = llmc.transpose %3, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
    %5 = llmc.slice %1 offsets [0, 0, 8] sizes [2, 4, 8] : tensor<2x4x24xf32>
    %6 = llmc.reshape %5 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %7 = llmc.transpose %6, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
    %8 = llmc.slice %1 offsets [0, 0, 16] sizes [2, 4, 8] : tensor<2x4x24xf32>
    %9 = llmc.reshape %8 : tensor<2x4x8xf32> -> tensor<2x4x2x4xf32>
    %10 = llmc.transpose %9, [0, 2, 1, 3] : tensor<2x4x2x4xf32>
    %11 = llmc.rotary %4 {theta = 1.000000e+04 : f32} : tensor<2x2x4x4xf32>
    %12 = llmc.rotary %7 {theta = 1.000000e+04 : f32} : tensor<2x2x4x4xf32>
    %result_0, %lse = llmc.attention %11, %12, %10 {causal, scale = 5.000000e-01 : f32} : tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>, tensor<2x2x4x4xf32>
    %13 = llmc.transpose %result_0, [0, 2, 1, 3] : tensor<2x2x4x4xf32>
    %14 = llmc.reshape %13 : tensor<2x4x2x4xf32> -> tensor<2x4x8xf32>
    %15 = llmc.matmul %14, %arg3 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
    %16 = llmc.add %0, %15 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %result_1, %rstd_2 = llmc.rms_norm %16, %arg4 {epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %17 = llmc.matmul %result_1, %arg5 {transpose_b} : tensor<2x4x8xf32>, tensor<512x8xf32>
    %18 = llmc.slice %17 offsets [0, 0, 0] sizes [2, 4, 256] : tensor<2x4x512xf32>
    %19 = llmc.slice %17 offsets [0, 0, 256] sizes [2, 4, 256] : tensor<2x4x512xf32>
    %20 = llmc.silu %18 : tensor<2x4x256xf32>
    %21 = llmc.mul %20, %19 : tensor<2x4x256xf32>, tensor<2x4x256xf32>
    %22 = llmc.matmul %21, %arg6 {transpose_b} : tensor<2x4x256xf32>, tensor<8x256xf32>
    %23 = llmc.add %16, %22 : tensor<2x4x8xf32>, tensor<2x4x8xf32>
    %result_3, %rstd_4 = llmc.rms_norm %23, %arg7 {epsilon = 9.99999997E-7 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
    %24 = llmc.matmul %result_3, %arg8 {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
    %loss, %lse_5 = llmc.cross_entropy %24, %arg10 : tensor<2x4x16xf32>, tensor<2x4xi32>
    return %loss, %24 : tensor<f32>, tensor<2x4x16xf32>
  }
}


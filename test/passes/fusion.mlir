// RUN: llmc-opt %s --split-input-file --llmc-fusion | FileCheck %s
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-fusion | FileCheck %s --check-prefix=MODEL

// Tests that a bias add and a GELU after a matmul run as its epilogue: one
// gemm fusion reading the activations, the weight and the bias.
// CHECK-LABEL: func.func @gemm_bias_gelu(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<32x8xf32> {llmc.param = "mlp.c_fc.weight"}, %[[B:[a-z0-9]+]]: tensor<32xf32> {llmc.param = "mlp.c_fc.bias"})
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "matmul_add_gelu" gemm (%[[X]], %[[W]], %[[B]]) : (tensor<2x4x8xf32>, tensor<32x8xf32>, tensor<32xf32>) -> tensor<2x4x32xf32>
// CHECK-NEXT: ^bb0(%[[BX:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BW:[a-z0-9]+]]: tensor<32x8xf32>, %[[BB:[a-z0-9]+]]: tensor<32xf32>):
// CHECK-NEXT: %[[P:[0-9]+]] = llmc.matmul %[[BX]], %[[BW]] {transpose_b}
// CHECK-NEXT: %[[H:[0-9]+]] = llmc.add %[[P]], %[[BB]]
// CHECK-NEXT: %[[G:[0-9]+]] = llmc.gelu %[[H]] approximate = tanh
// CHECK-NEXT: llmc.yield %[[G]] : tensor<2x4x32xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]] : tensor<2x4x32xf32>
func.func @gemm_bias_gelu(%x: tensor<2x4x8xf32>,
                          %w: tensor<32x8xf32> {llmc.param = "mlp.c_fc.weight"},
                          %b: tensor<32xf32> {llmc.param = "mlp.c_fc.bias"}) -> tensor<2x4x32xf32> {
  %p = llmc.matmul %x, %w {transpose_b} : tensor<2x4x8xf32>, tensor<32x8xf32>
  %h = llmc.add %p, %b : tensor<2x4x32xf32>, tensor<32xf32>
  %g = llmc.gelu %h approximate = tanh : tensor<2x4x32xf32>
  return %g : tensor<2x4x32xf32>
}

// -----

// Tests that a ReLU epilogue (OPT's MLP) fuses the same way.
// CHECK-LABEL: func.func @gemm_bias_relu(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<32x8xf32> {llmc.param = "fc1.weight"}, %[[B:[a-z0-9]+]]: tensor<32xf32> {llmc.param = "fc1.bias"})
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "matmul_add_relu" gemm (%[[X]], %[[W]], %[[B]])
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: llmc.matmul
// CHECK-NEXT: llmc.add
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.relu
// CHECK-NEXT: llmc.yield %[[R]] : tensor<2x4x32xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @gemm_bias_relu(%x: tensor<2x4x8xf32>,
                          %w: tensor<32x8xf32> {llmc.param = "fc1.weight"},
                          %b: tensor<32xf32> {llmc.param = "fc1.bias"}) -> tensor<2x4x32xf32> {
  %p = llmc.matmul %x, %w {transpose_b} : tensor<2x4x8xf32>, tensor<32x8xf32>
  %h = llmc.add %p, %b : tensor<2x4x32xf32>, tensor<32xf32>
  %r = llmc.relu %h : tensor<2x4x32xf32>
  return %r : tensor<2x4x32xf32>
}

// -----

// Tests that a residual add chained after the bias add joins the epilogue,
// the residual stream becoming a fourth input.
// CHECK-LABEL: func.func @gemm_bias_residual(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[RES:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8x8xf32> {llmc.param = "attn.c_proj.weight"}, %[[B:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "attn.c_proj.bias"})
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "matmul_add_add" gemm (%[[X]], %[[W]], %[[B]], %[[RES]])
// CHECK-NEXT: ^bb0(%{{[a-z0-9]+}}: tensor<2x4x8xf32>, %{{[a-z0-9]+}}: tensor<8x8xf32>, %[[BB:[a-z0-9]+]]: tensor<8xf32>, %[[BRES:[a-z0-9]+]]: tensor<2x4x8xf32>):
// CHECK-NEXT: %[[P:[0-9]+]] = llmc.matmul
// CHECK-NEXT: %[[H:[0-9]+]] = llmc.add %[[P]], %[[BB]]
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.add %[[BRES]], %[[H]]
// CHECK-NEXT: llmc.yield %[[R]]
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @gemm_bias_residual(%x: tensor<2x4x8xf32>, %res: tensor<2x4x8xf32>,
                              %w: tensor<8x8xf32> {llmc.param = "attn.c_proj.weight"},
                              %b: tensor<8xf32> {llmc.param = "attn.c_proj.bias"}) -> tensor<2x4x8xf32> {
  %p = llmc.matmul %x, %w {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %h = llmc.add %p, %b : tensor<2x4x8xf32>, tensor<8xf32>
  %r = llmc.add %res, %h : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return %r : tensor<2x4x8xf32>
}

// -----

// Tests that the residual add feeding a layer_norm joins its row group, and
// that the residual stream, used again by the next residual add, becomes a
// second output of the fusion instead of being recomputed.
// CHECK-LABEL: func.func @residual_layer_norm(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[ATTN:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[MLP:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ln_2.weight"}, %[[B:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ln_2.bias"})
// CHECK-NEXT: %[[F:[0-9]+]]:2 = llmc.fusion "add_layer_norm" row (%[[X]], %[[ATTN]], %[[W]], %[[B]]) : (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>)
// CHECK-NEXT: ^bb0(%[[BX:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BATTN:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BW:[a-z0-9]+]]: tensor<8xf32>, %[[BB:[a-z0-9]+]]: tensor<8xf32>):
// CHECK-NEXT: %[[H:[0-9]+]] = llmc.add %[[BX]], %[[BATTN]]
// CHECK-NEXT: %[[Y:[a-z0-9_]+]], %{{.*}}, %{{.*}} = llmc.layer_norm %[[H]], %[[BW]], %[[BB]]
// CHECK-NEXT: llmc.yield %[[H]], %[[Y]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %[[NEXT:[0-9]+]] = llmc.fusion "add" pointwise (%[[F]]#0, %[[MLP]])
// CHECK: return %[[F]]#1, %[[NEXT]]
func.func @residual_layer_norm(%x: tensor<2x4x8xf32>, %attn: tensor<2x4x8xf32>, %mlp: tensor<2x4x8xf32>,
                               %w: tensor<8xf32> {llmc.param = "ln_2.weight"},
                               %b: tensor<8xf32> {llmc.param = "ln_2.bias"}) -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>) {
  %h = llmc.add %x, %attn : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %y, %mean, %rstd = llmc.layer_norm %h, %w, %b {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %next = llmc.add %h, %mlp : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return %y, %next : tensor<2x4x8xf32>, tensor<2x4x8xf32>
}

// -----

// Tests that outputs of a row group come in block order (a row statistic
// used outside is one of them), and that a user of the first output that
// stood before the group's last member is moved after the fusion.
// CHECK-LABEL: func.func @extra_outputs_order(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[ATTN:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[F:[0-9]+]]:3 = llmc.fusion "add_layer_norm" row (%[[X]], %[[ATTN]], %[[W]], %[[B]]) : {{.*}} -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>)
// CHECK: %[[H:[0-9]+]] = llmc.add
// CHECK-NEXT: %[[Y:[a-z0-9_]+]], %{{.*}}, %[[RSTD:[a-z0-9_]+]] = llmc.layer_norm %[[H]]
// CHECK-NEXT: llmc.yield %[[H]], %[[Y]], %[[RSTD]]
// CHECK-NEXT: }
// CHECK-NEXT: %[[U:[0-9]+]] = llmc.fusion "exp" pointwise (%[[F]]#0)
// CHECK: return %[[F]]#1, %[[U]], %[[F]]#2
func.func @extra_outputs_order(%x: tensor<2x4x8xf32>, %attn: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>)
    -> (tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>) {
  %h = llmc.add %x, %attn : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %u = llmc.exp %h : tensor<2x4x8xf32>
  %y, %mean, %rstd = llmc.layer_norm %h, %w, %b {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  return %y, %u, %rstd : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<2x4xf32>
}

// -----

// Tests that the token embedding, the position add and the first
// layer_norm are one row kernel: the table stays an input (read at the
// token ids), the position slice is a view computed outside, and the
// classifier's cross_entropy is a row group of its own.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {llmc.param = "wte"}, %[[WPE:[a-z0-9]+]]: tensor<8x8xf32> {llmc.param = "wpe"}, %[[LNW:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ln_f.weight"}, %[[LNB:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ln_f.bias"}, %[[TOK:[a-z0-9]+]]: tensor<2x4xi32>, %[[TGT:[a-z0-9]+]]: tensor<2x4xi32>) -> tensor<f32>
// CHECK-NEXT: %[[POS:[0-9]+]] = llmc.slice %[[WPE]] offsets [0, 0] sizes [4, 8]
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "embedding_add_layer_norm" row (%[[WTE]], %[[TOK]], %[[POS]], %[[LNW]], %[[LNB]]) : ({{.*}}) -> tensor<2x4x8xf32>
// CHECK-NEXT: ^bb0(%[[BWTE:[a-z0-9]+]]: tensor<16x8xf32>, %[[BTOK:[a-z0-9]+]]: tensor<2x4xi32>, %[[BPOS:[a-z0-9]+]]: tensor<4x8xf32>,
// CHECK-NEXT: %[[E:[0-9]+]] = llmc.embedding %[[BWTE]], %[[BTOK]]
// CHECK-NEXT: %[[A:[0-9]+]] = llmc.add %[[E]], %[[BPOS]]
// CHECK-NEXT: %[[Y:[a-z0-9_]+]], %{{.*}}, %{{.*}} = llmc.layer_norm %[[A]]
// CHECK-NEXT: llmc.yield %[[Y]] : tensor<2x4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: %[[LOGITS:[0-9]+]] = llmc.matmul %[[F]], %[[WTE]] {transpose_b}
// CHECK-NEXT: %[[CE:[0-9]+]] = llmc.fusion "cross_entropy" row (%[[LOGITS]], %[[TGT]]) : (tensor<2x4x16xf32>, tensor<2x4xi32>) -> tensor<f32>
// CHECK-NEXT: ^bb0(%[[BL:[a-z0-9]+]]: tensor<2x4x16xf32>, %[[BT:[a-z0-9]+]]: tensor<2x4xi32>):
// CHECK-NEXT: %[[LOSS:[a-z0-9_]+]], %{{.*}} = llmc.cross_entropy %[[BL]], %[[BT]]
// CHECK-NEXT: llmc.yield %[[LOSS]] : tensor<f32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[CE]] : tensor<f32>
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %wpe: tensor<8x8xf32> {llmc.param = "wpe"},
                   %lnw: tensor<8xf32> {llmc.param = "ln_f.weight"},
                   %lnb: tensor<8xf32> {llmc.param = "ln_f.bias"},
                   %tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>) -> tensor<f32> {
  %tok = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %pos = llmc.slice %wpe offsets [0, 0] sizes [4, 8] : tensor<8x8xf32>
  %x = llmc.add %tok, %pos : tensor<2x4x8xf32>, tensor<4x8xf32>
  %y, %mean, %rstd = llmc.layer_norm %x, %lnw, %lnb {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %logits = llmc.matmul %y, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss : tensor<f32>
}

// -----

// Tests that rms_norm pulls in its chain of elementwise producers (dropout
// then residual add); its rstd, unused, is no output.
// CHECK-LABEL: func.func @rms_norm_producers(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[ATTN:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8xf32> {llmc.param = "ffn_norm.weight"})
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "dropout_add_rms_norm" row (%[[ATTN]], %[[X]], %[[W]]) : ({{.*}}) -> tensor<2x4x8xf32>
// CHECK-NEXT: ^bb0(%[[BATTN:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BX:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BW:[a-z0-9]+]]: tensor<8xf32>):
// CHECK-NEXT: %[[D:[0-9]+]] = llmc.dropout %[[BATTN]]
// CHECK-NEXT: %[[H:[0-9]+]] = llmc.add %[[BX]], %[[D]]
// CHECK-NEXT: %[[Y:[a-z0-9_]+]], %{{.*}} = llmc.rms_norm %[[H]], %[[BW]]
// CHECK-NEXT: llmc.yield %[[Y]] : tensor<2x4x8xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @rms_norm_producers(%x: tensor<2x4x8xf32>, %attn: tensor<2x4x8xf32>,
                              %w: tensor<8xf32> {llmc.param = "ffn_norm.weight"}) -> tensor<2x4x8xf32> {
  %d = llmc.dropout %attn {rate = 0.1 : f32, stream = 0 : i64} : tensor<2x4x8xf32>
  %h = llmc.add %x, %d : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %y, %rstd = llmc.rms_norm %h, %w {epsilon = 1.0e-6 : f32} : tensor<2x4x8xf32>, tensor<8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Tests that softmax fuses an elementwise producer (the score scaling) and
// an elementwise consumer of its shape (attention dropout).
// CHECK-LABEL: func.func @softmax_producer_consumer(
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<2x4x4xf32>, %[[SCALE:[a-z0-9]+]]: tensor<f32>)
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "mul_softmax_dropout" row (%[[S]], %[[SCALE]]) : (tensor<2x4x4xf32>, tensor<f32>) -> tensor<2x4x4xf32>
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: %[[M:[0-9]+]] = llmc.mul
// CHECK-NEXT: %[[P:[0-9]+]] = llmc.softmax %[[M]]
// CHECK-NEXT: %[[D:[0-9]+]] = llmc.dropout %[[P]]
// CHECK-NEXT: llmc.yield %[[D]]
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @softmax_producer_consumer(%s: tensor<2x4x4xf32>, %scale: tensor<f32>) -> tensor<2x4x4xf32> {
  %a = llmc.mul %s, %scale : tensor<2x4x4xf32>, tensor<f32>
  %p = llmc.softmax %a : tensor<2x4x4xf32>
  %d = llmc.dropout %p {rate = 0.1 : f32, stream = 0 : i64} : tensor<2x4x4xf32>
  return %d : tensor<2x4x4xf32>
}

// -----

// Tests that the SwiGLU gate `silu(gate) * up` after the slices of a fused
// gate/up projection is one pointwise kernel reading both slices; the
// matmul, whose product the two slices read, and the slices stay outside.
// CHECK-LABEL: func.func @swiglu(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<32x8xf32> {llmc.param = "mlp.gate_up.weight"})
// CHECK-NEXT: %[[H:[0-9]+]] = llmc.matmul %[[X]], %[[W]] {transpose_b}
// CHECK-NEXT: %[[GATE:[0-9]+]] = llmc.slice %[[H]] offsets [0, 0, 0]
// CHECK-NEXT: %[[UP:[0-9]+]] = llmc.slice %[[H]] offsets [0, 0, 16]
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "silu_mul" pointwise (%[[GATE]], %[[UP]]) : (tensor<2x4x16xf32>, tensor<2x4x16xf32>) -> tensor<2x4x16xf32>
// CHECK-NEXT: ^bb0(%[[BG:[a-z0-9]+]]: tensor<2x4x16xf32>, %[[BU:[a-z0-9]+]]: tensor<2x4x16xf32>):
// CHECK-NEXT: %[[S:[0-9]+]] = llmc.silu %[[BG]]
// CHECK-NEXT: %[[M:[0-9]+]] = llmc.mul %[[S]], %[[BU]]
// CHECK-NEXT: llmc.yield %[[M]]
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @swiglu(%x: tensor<2x4x8xf32>,
                  %w: tensor<32x8xf32> {llmc.param = "mlp.gate_up.weight"}) -> tensor<2x4x16xf32> {
  %h = llmc.matmul %x, %w {transpose_b} : tensor<2x4x8xf32>, tensor<32x8xf32>
  %gate = llmc.slice %h offsets [0, 0, 0] sizes [2, 4, 16] : tensor<2x4x32xf32>
  %up = llmc.slice %h offsets [0, 0, 16] sizes [2, 4, 16] : tensor<2x4x32xf32>
  %s = llmc.silu %gate : tensor<2x4x16xf32>
  %m = llmc.mul %s, %up : tensor<2x4x16xf32>, tensor<2x4x16xf32>
  return %m : tensor<2x4x16xf32>
}

// -----

// Tests that a reduce_sum over the last dimension is a row root that pulls
// in its elementwise producers.
// CHECK-LABEL: func.func @reduce_last_dim(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[Y:[a-z0-9]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[F:[0-9]+]] = llmc.fusion "exp_mul_reduce_sum" row (%[[X]], %[[Y]]) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4xf32>
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: %[[E:[0-9]+]] = llmc.exp
// CHECK-NEXT: %[[M:[0-9]+]] = llmc.mul %[[E]],
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.reduce_sum %[[M]] dims [1]
// CHECK-NEXT: llmc.yield %[[R]] : tensor<4xf32>
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @reduce_last_dim(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>) -> tensor<4xf32> {
  %e = llmc.exp %x : tensor<4x8xf32>
  %m = llmc.mul %e, %y : tensor<4x8xf32>, tensor<4x8xf32>
  %r = llmc.reduce_sum %m dims [1] : tensor<4x8xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that a matmul whose product has two users gets no epilogue: either
// user alone would leave the product to be written for the other, so the
// bare llmc.matmul stays a library call and each user is its own group.
// CHECK-LABEL: func.func @matmul_two_users(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<32x8xf32>, %[[B:[a-z0-9]+]]: tensor<32xf32>)
// CHECK-NOT: gemm
// CHECK: %[[P:[0-9]+]] = llmc.matmul %[[X]], %[[W]] {transpose_b}
// CHECK-NEXT: %[[H:[0-9]+]] = llmc.fusion "add" pointwise (%[[P]], %[[B]])
// CHECK-NOT: gemm
// CHECK: %[[G:[0-9]+]] = llmc.fusion "gelu" pointwise (%[[P]])
// CHECK-NOT: gemm
// CHECK: return %[[H]], %[[G]]
func.func @matmul_two_users(%x: tensor<2x4x8xf32>, %w: tensor<32x8xf32>, %b: tensor<32xf32>)
    -> (tensor<2x4x32xf32>, tensor<2x4x32xf32>) {
  %p = llmc.matmul %x, %w {transpose_b} : tensor<2x4x8xf32>, tensor<32x8xf32>
  %h = llmc.add %p, %b : tensor<2x4x32xf32>, tensor<32xf32>
  %g = llmc.gelu %p approximate = tanh : tensor<2x4x32xf32>
  return %h, %g : tensor<2x4x32xf32>, tensor<2x4x32xf32>
}

// -----

// Tests that an elementwise producer of a smaller, broadcast operand (exp of
// a [C] vector added to [B, T, C]) is not fused: inside the group it would
// be recomputed for every broadcast element, so it is a pointwise group of
// its own whose result the larger group reads.
// CHECK-LABEL: func.func @broadcast_producer(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[E:[0-9]+]] = llmc.fusion "exp" pointwise (%[[B]]) : (tensor<8xf32>) -> tensor<8xf32>
// CHECK: %[[F:[0-9]+]] = llmc.fusion "add_tanh" pointwise (%[[X]], %[[E]]) : (tensor<2x4x8xf32>, tensor<8xf32>) -> tensor<2x4x8xf32>
// CHECK-NOT: llmc.exp
// CHECK: return %[[F]]
func.func @broadcast_producer(%x: tensor<2x4x8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %e = llmc.exp %b : tensor<8xf32>
  %s = llmc.add %x, %e : tensor<2x4x8xf32>, tensor<8xf32>
  %t = llmc.tanh %s : tensor<2x4x8xf32>
  return %t : tensor<2x4x8xf32>
}

// -----

// Tests that a matmul reading a softmax output stays a bare library call:
// only elementwise ops join a row group, and the matmul has no epilogue.
// CHECK-LABEL: func.func @softmax_matmul(
// CHECK-SAME: %[[S:[a-z0-9]+]]: tensor<2x4x4xf32>, %[[V:[a-z0-9]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[P:[0-9]+]] = llmc.fusion "softmax" row (%[[S]]) : (tensor<2x4x4xf32>) -> tensor<2x4x4xf32>
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: llmc.softmax
// CHECK-NEXT: llmc.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[O:[0-9]+]] = llmc.matmul %[[P]], %[[V]]
// CHECK-NEXT: return %[[O]]
func.func @softmax_matmul(%s: tensor<2x4x4xf32>, %v: tensor<4x8xf32>) -> tensor<2x4x8xf32> {
  %p = llmc.softmax %s : tensor<2x4x4xf32>
  %o = llmc.matmul %p, %v : tensor<2x4x4xf32>, tensor<4x8xf32>
  return %o : tensor<2x4x8xf32>
}

// -----

// Tests that two row reductions in a chain are two groups: a kernel has one
// reduction, and the second needs the whole normalized row of the first.
// CHECK-LABEL: func.func @two_reductions(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8xf32>, %[[B:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[Y:[0-9]+]] = llmc.fusion "layer_norm" row (%[[X]], %[[W]], %[[B]])
// CHECK-NOT: llmc.softmax
// CHECK: %[[P:[0-9]+]] = llmc.fusion "softmax" row (%[[Y]])
// CHECK: return %[[P]]
func.func @two_reductions(%x: tensor<2x4x8xf32>, %w: tensor<8xf32>, %b: tensor<8xf32>) -> tensor<2x4x8xf32> {
  %y, %mean, %rstd = llmc.layer_norm %x, %w, %b {epsilon = 1.0e-5 : f32} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %p = llmc.softmax %y : tensor<2x4x8xf32>
  return %p : tensor<2x4x8xf32>
}

// -----

// Tests that rotary's input is not computed in its group: the rotary reads
// the partner element x[..., i + D/2] of each x[..., i], which another
// thread of the fused kernel would produce, so the scaling before it is a
// group of its own and the rotary starts the next one.
// CHECK-LABEL: func.func @rotary_input(
// CHECK-SAME: %[[Q:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[SCALE:[a-z0-9]+]]: tensor<f32>, %[[Z:[a-z0-9]+]]: tensor<2x4x8xf32>)
// CHECK-NEXT: %[[M:[0-9]+]] = llmc.fusion "mul" pointwise (%[[Q]], %[[SCALE]])
// CHECK: %[[F:[0-9]+]] = llmc.fusion "rotary_add" pointwise (%[[M]], %[[Z]])
// CHECK-NEXT: ^bb0(%[[BM:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[BZ:[a-z0-9]+]]: tensor<2x4x8xf32>):
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.rotary %[[BM]]
// CHECK-NEXT: %[[A:[0-9]+]] = llmc.add %[[R]], %[[BZ]]
// CHECK-NEXT: llmc.yield %[[A]]
// CHECK-NEXT: }
// CHECK-NEXT: return %[[F]]
func.func @rotary_input(%q: tensor<2x4x8xf32>, %scale: tensor<f32>, %z: tensor<2x4x8xf32>) -> tensor<2x4x8xf32> {
  %x = llmc.mul %q, %scale : tensor<2x4x8xf32>, tensor<f32>
  %r = llmc.rotary %x {theta = 1.0e4 : f32} : tensor<2x4x8xf32>
  %y = llmc.add %r, %z : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return %y : tensor<2x4x8xf32>
}

// -----

// Tests that cross_entropy's logits are not computed in its group: it reads
// the logit at the target id besides the row it reduces, so the logits'
// elementwise producer (a temperature scaling) is its own pointwise group.
// The logits matmul, also returned, has two users and stays bare.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<16x8xf32> {llmc.param = "wte"}, %[[TEMP:[a-z0-9]+]]: tensor<f32> {llmc.param = "inv_temperature"}, %[[X:[a-z0-9]+]]: tensor<2x4x8xf32>, %[[TOK:[a-z0-9]+]]: tensor<2x4xi32>, %[[TGT:[a-z0-9]+]]: tensor<2x4xi32>) -> (tensor<f32>, tensor<2x4x16xf32>)
// CHECK-NEXT: %[[LOGITS:[0-9]+]] = llmc.matmul %[[X]], %[[WTE]] {transpose_b}
// CHECK-NEXT: %[[SCALED:[0-9]+]] = llmc.fusion "mul" pointwise (%[[LOGITS]], %[[TEMP]])
// CHECK: %[[CE:[0-9]+]] = llmc.fusion "cross_entropy" row (%[[SCALED]], %[[TGT]])
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: llmc.cross_entropy
// CHECK-NEXT: llmc.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[CE]], %[[LOGITS]]
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %temp: tensor<f32> {llmc.param = "inv_temperature"},
                   %x: tensor<2x4x8xf32>, %tokens: tensor<2x4xi32>, %targets: tensor<2x4xi32>)
    -> (tensor<f32>, tensor<2x4x16xf32>) {
  %logits = llmc.matmul %x, %wte {transpose_b} : tensor<2x4x8xf32>, tensor<16x8xf32>
  %scaled = llmc.mul %logits, %temp : tensor<2x4x16xf32>, tensor<f32>
  %loss, %lse = llmc.cross_entropy %scaled, %targets : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss, %logits : tensor<f32>, tensor<2x4x16xf32>
}

// -----

// Tests that `c = add a, b` with `b = matmul a, w` never shares a group with
// `a`: the kernel computing both would wait on the matmul that waits on it.
// Here the matmul takes `c` as its epilogue, `a` is alone, and the groups
// come out in dependency order.
// CHECK-LABEL: func.func @cycle_gemm(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[Y:[a-z0-9]+]]: tensor<4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8x8xf32>)
// CHECK-NEXT: %[[A:[0-9]+]] = llmc.fusion "add" pointwise (%[[X]], %[[Y]])
// CHECK: %[[C:[0-9]+]] = llmc.fusion "matmul_add" gemm (%[[A]], %[[W]])
// CHECK-NEXT: ^bb0(%[[BA:[a-z0-9]+]]: tensor<4x8xf32>, %[[BW:[a-z0-9]+]]: tensor<8x8xf32>):
// CHECK-NEXT: %[[B:[0-9]+]] = llmc.matmul %[[BA]], %[[BW]]
// CHECK-NEXT: %[[S:[0-9]+]] = llmc.add %[[BA]], %[[B]]
// CHECK-NEXT: llmc.yield %[[S]]
// CHECK-NEXT: }
// CHECK-NEXT: return %[[C]]
func.func @cycle_gemm(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4x8xf32> {
  %a = llmc.add %x, %y : tensor<4x8xf32>, tensor<4x8xf32>
  %b = llmc.matmul %a, %w : tensor<4x8xf32>, tensor<8x8xf32>
  %c = llmc.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  return %c : tensor<4x8xf32>
}

// -----

// Tests the same dependency when the matmul has another user, so `c` starts
// a pointwise group: `a` is its elementwise producer of the same shape but
// stays out, because the path a -> matmul -> c leaves the group and returns.
// CHECK-LABEL: func.func @cycle_pointwise(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[Y:[a-z0-9]+]]: tensor<4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8x8xf32>)
// CHECK-NEXT: %[[A:[0-9]+]] = llmc.fusion "add" pointwise (%[[X]], %[[Y]])
// CHECK: %[[B:[0-9]+]] = llmc.matmul %[[A]], %[[W]]
// CHECK-NEXT: %[[C:[0-9]+]] = llmc.fusion "add" pointwise (%[[A]], %[[B]])
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: llmc.add
// CHECK-NEXT: llmc.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[C]], %[[B]]
func.func @cycle_pointwise(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8x8xf32>)
    -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a = llmc.add %x, %y : tensor<4x8xf32>, tensor<4x8xf32>
  %b = llmc.matmul %a, %w : tensor<4x8xf32>, tensor<8x8xf32>
  %c = llmc.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  return %c, %b : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Tests the same dependency inside a row group: the reduction takes `c` but
// not `a`, and the matmul between them has no epilogue left to take.
// CHECK-LABEL: func.func @cycle_row(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>, %[[Y:[a-z0-9]+]]: tensor<4x8xf32>, %[[W:[a-z0-9]+]]: tensor<8x8xf32>)
// CHECK-NEXT: %[[A:[0-9]+]] = llmc.fusion "add" pointwise (%[[X]], %[[Y]])
// CHECK: %[[B:[0-9]+]] = llmc.matmul %[[A]], %[[W]]
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.fusion "add_reduce_max" row (%[[A]], %[[B]]) : (tensor<4x8xf32>, tensor<4x8xf32>) -> tensor<4xf32>
// CHECK: return %[[R]]
func.func @cycle_row(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %w: tensor<8x8xf32>) -> tensor<4xf32> {
  %a = llmc.add %x, %y : tensor<4x8xf32>, tensor<4x8xf32>
  %b = llmc.matmul %a, %w : tensor<4x8xf32>, tensor<8x8xf32>
  %c = llmc.add %a, %b : tensor<4x8xf32>, tensor<4x8xf32>
  %r = llmc.reduce_max %c dims [1] : tensor<4x8xf32>
  return %r : tensor<4xf32>
}

// -----

// Tests that a reduction over a dimension other than the last is no row
// root and stays a bare op: its rows are strided, so its producer is a
// pointwise group of its own.
// CHECK-LABEL: func.func @reduce_not_last_dim(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<4x8xf32>)
// CHECK-NEXT: %[[E:[0-9]+]] = llmc.fusion "exp" pointwise (%[[X]]) : (tensor<4x8xf32>) -> tensor<4x8xf32>
// CHECK-NOT: reduce_sum
// CHECK: }
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.reduce_sum %[[E]] dims [0]
// CHECK-NEXT: return %[[R]]
func.func @reduce_not_last_dim(%x: tensor<4x8xf32>) -> tensor<8xf32> {
  %e = llmc.exp %x : tensor<4x8xf32>
  %r = llmc.reduce_sum %e dims [0] : tensor<4x8xf32>
  return %r : tensor<8xf32>
}

// -----

// Tests that view ops (reshape, transpose) and attention never enter a
// fusion, even between elementwise ops: views become strided accesses and
// attention its own kernel, so the scaling before and the bias after are
// separate pointwise groups.
// CHECK-LABEL: func.func @views_attention(
// CHECK-SAME: %[[X:[a-z0-9]+]]: tensor<1x4x8xf32>, %[[K:[a-z0-9]+]]: tensor<1x2x4x4xf32>, %[[V:[a-z0-9]+]]: tensor<1x2x4x4xf32>, %[[SCALE:[a-z0-9]+]]: tensor<f32>, %[[B:[a-z0-9]+]]: tensor<8xf32>)
// CHECK-NEXT: %[[S:[0-9]+]] = llmc.fusion "mul" pointwise (%[[X]], %[[SCALE]])
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: llmc.mul
// CHECK-NEXT: llmc.yield
// CHECK-NEXT: }
// CHECK-NEXT: %[[R:[0-9]+]] = llmc.reshape %[[S]]
// CHECK-NEXT: %[[Q:[0-9]+]] = llmc.transpose %[[R]], [0, 2, 1, 3]
// CHECK-NEXT: %[[O:[a-z0-9_]+]], %{{.*}} = llmc.attention %[[Q]], %[[K]], %[[V]]
// CHECK-NEXT: %[[OT:[0-9]+]] = llmc.transpose %[[O]], [0, 2, 1, 3]
// CHECK-NEXT: %[[OR:[0-9]+]] = llmc.reshape %[[OT]]
// CHECK-NEXT: %[[Y:[0-9]+]] = llmc.fusion "add" pointwise (%[[OR]], %[[B]])
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: llmc.add
// CHECK-NEXT: llmc.yield
// CHECK-NEXT: }
// CHECK-NEXT: return %[[Y]]
func.func @views_attention(%x: tensor<1x4x8xf32>, %k: tensor<1x2x4x4xf32>, %v: tensor<1x2x4x4xf32>,
                           %scale: tensor<f32>, %b: tensor<8xf32>) -> tensor<1x4x8xf32> {
  %s = llmc.mul %x, %scale : tensor<1x4x8xf32>, tensor<f32>
  %r = llmc.reshape %s : tensor<1x4x8xf32> -> tensor<1x4x2x4xf32>
  %q = llmc.transpose %r, [0, 2, 1, 3] : tensor<1x4x2x4xf32>
  %o, %lse = llmc.attention %q, %k, %v {causal, scale = 0.5 : f32} : tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>, tensor<1x2x4x4xf32>
  %ot = llmc.transpose %o, [0, 2, 1, 3] : tensor<1x2x4x4xf32>
  %or = llmc.reshape %ot : tensor<1x4x2x4xf32> -> tensor<1x4x8xf32>
  %y = llmc.add %or, %b : tensor<1x4x8xf32>, tensor<8xf32>
  return %y : tensor<1x4x8xf32>
}

// The tiny GPT-2 (second RUN line): the kernels of block 0, in order. The
// embedding group's residual stream (#0) feeds the attention block's
// residual add, which the next layer_norm fuses along with the c_proj bias,
// leaving that matmul bare; the MLP's c_fc matmul takes bias and GELU.
// MODEL-LABEL: func.func @forward(
// MODEL: %[[EMB:[0-9]+]]:2 = llmc.fusion "embedding_add_layer_norm" row
// MODEL-NOT: llmc.fusion
// MODEL: %[[QKV:[0-9]+]] = llmc.fusion "matmul_add" gemm (%[[EMB]]#1,
// MODEL-NOT: llmc.fusion
// MODEL: llmc.slice %[[QKV]]
// MODEL-NOT: llmc.fusion
// MODEL: llmc.attention
// MODEL-NOT: llmc.fusion
// MODEL: %[[PROJ:[0-9]+]] = llmc.matmul
// MODEL-NOT: llmc.fusion
// MODEL: %[[LN2:[0-9]+]]:2 = llmc.fusion "add_add_layer_norm" row (%[[PROJ]], %{{[a-z0-9]+}}, %[[EMB]]#0,
// MODEL-NOT: llmc.fusion
// MODEL: %[[FC:[0-9]+]] = llmc.fusion "matmul_add_gelu" gemm (%[[LN2]]#1,
// MODEL-NOT: llmc.fusion
// MODEL: %[[MLP:[0-9]+]] = llmc.matmul %[[FC]],
// MODEL-NOT: llmc.fusion
// MODEL: llmc.fusion "add_add_layer_norm" row (%[[MLP]], %{{[a-z0-9]+}}, %[[LN2]]#0,
// The final layer_norm has no residual output; the loss is the last kernel.
// MODEL: %[[LNF:[0-9]+]] = llmc.fusion "add_add_layer_norm" row
// MODEL: %[[LOGITS:[0-9]+]] = llmc.matmul %[[LNF]],
// MODEL-NEXT: %[[LOSS:[0-9]+]] = llmc.fusion "cross_entropy" row (%[[LOGITS]],
// MODEL-NOT: llmc.fusion
// MODEL: return %[[LOSS]], %[[LOGITS]]

// -----

// Tests that a rotary's input stays out of the rotary's kernel even when it
// reaches the group by a second path (the add): the rotary reads its
// partner element, which only memory has.
// CHECK-LABEL: func.func @rotary_second_path(
// CHECK: %[[X:.*]] = llmc.fusion "exp" pointwise (%{{.*}})
// CHECK: llmc.fusion "rotary_add_softmax" row (%[[X]])
func.func @rotary_second_path(%a: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %x = llmc.exp %a : tensor<4x8xf32>
  %r = llmc.rotary %x {theta = 1.0e4 : f32} : tensor<4x8xf32>
  %s = llmc.add %r, %x : tensor<4x8xf32>, tensor<4x8xf32>
  %p = llmc.softmax %s : tensor<4x8xf32>
  return %p : tensor<4x8xf32>
}

// -----

// Tests that two groups never need each other's results: exp(x) may not join
// the second row group, whose kernel would then need the first group's
// output while the first needs exp(x) (the first group cannot take exp(x):
// its rotary reads it at another index).
// CHECK-LABEL: func.func @groups_depend_on_each_other(
// CHECK: %[[A1:.*]] = llmc.fusion "exp" pointwise (%arg0)
// CHECK: %[[B:.*]]:2 = llmc.fusion "exp_rotary_add_softmax" row (%arg1, %[[A1]])
// CHECK: %[[A:.*]] = llmc.fusion "add_add_softmax" row (%[[B]]#0, %arg2, %[[A1]])
// CHECK: return %[[A]], %[[B]]#1
func.func @groups_depend_on_each_other(%x: tensor<4x8xf32>, %y: tensor<4x8xf32>, %z: tensor<4x8xf32>) -> (tensor<4x8xf32>, tensor<4x8xf32>) {
  %a1 = llmc.exp %x : tensor<4x8xf32>
  %b2 = llmc.exp %y : tensor<4x8xf32>
  %b1 = llmc.rotary %a1 {theta = 1.0e4 : f32} : tensor<4x8xf32>
  %sB = llmc.add %b1, %b2 : tensor<4x8xf32>, tensor<4x8xf32>
  %rB = llmc.softmax %sB : tensor<4x8xf32>
  %a2 = llmc.add %b2, %z : tensor<4x8xf32>, tensor<4x8xf32>
  %sA = llmc.add %a1, %a2 : tensor<4x8xf32>, tensor<4x8xf32>
  %rA = llmc.softmax %sA : tensor<4x8xf32>
  return %rA, %rB : tensor<4x8xf32>, tensor<4x8xf32>
}

// -----

// Tests that an elementwise op nobody uses becomes no kernel.
// CHECK-LABEL: func.func @dead(
// CHECK-NOT: llmc.fusion
// CHECK: return
func.func @dead(%x: tensor<4x8xf32>) -> tensor<4x8xf32> {
  %u = llmc.exp %x : tensor<4x8xf32>
  return %x : tensor<4x8xf32>
}

// -----

// Tests that a layer_norm_grad is the root of a row group that takes the
// residual gradient added to its input gradient, and that its operands stay
// kernel inputs (the weight and bias gradients are column sums computed
// from memory): the add producing dy is not pulled in.
// CHECK-LABEL: func.func @layer_norm_grad_row(
// CHECK: %[[DY:[0-9]+]] = llmc.fusion "add" pointwise
// CHECK: %[[F:[0-9]+]]:3 = llmc.fusion "layer_norm_grad_add" row (%[[DY]],
// CHECK-NEXT: ^bb0(
// CHECK-NEXT: %[[DX:[a-z_0-9]+]], %[[DW:[a-z_0-9]+]], %[[DB:[a-z_0-9]+]] = llmc.layer_norm_grad
// CHECK-NEXT: %[[S:[0-9]+]] = llmc.add %[[DX]],
// CHECK-NEXT: llmc.yield %[[DW]], %[[DB]], %[[S]]
// CHECK: return %[[F]]#2, %[[F]]#0, %[[F]]#1
func.func @layer_norm_grad_row(%g: tensor<2x4x8xf32>, %h: tensor<2x4x8xf32>,
                               %x: tensor<2x4x8xf32>, %res: tensor<2x4x8xf32>,
                               %w: tensor<8xf32>, %m: tensor<2x4xf32>,
                               %r: tensor<2x4xf32>)
    -> (tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>) {
  %dy = llmc.add %g, %h : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %dx, %dw, %db = llmc.layer_norm_grad %dy, %x, %w, %m, %r
      : tensor<2x4x8xf32>, tensor<2x4x8xf32>, tensor<8xf32>, tensor<2x4xf32>,
        tensor<2x4xf32>
  %s = llmc.add %dx, %res : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  return %s, %dw, %db : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
}

// -----

// Tests that softmax_grad and cross_entropy_grad are row roots that pull in
// their elementwise producers (a dropout of the gradient, a scaled loss).
// CHECK-LABEL: func.func @backward_rows(
// CHECK: llmc.fusion "dropout_softmax_grad" row
// CHECK: llmc.fusion "cross_entropy_grad" row
// CHECK-NOT: llmc.fusion
func.func @backward_rows(%g: tensor<2x3x5xf32>, %y: tensor<2x3x5xf32>,
                         %dl: tensor<f32>, %l: tensor<2x3x7xf32>,
                         %t: tensor<2x3xi32>, %lse: tensor<2x3xf32>)
    -> (tensor<2x3x5xf32>, tensor<2x3x7xf32>) {
  %gd = llmc.dropout %g {rate = 1.000000e-01 : f32, stream = 1 : i64} : tensor<2x3x5xf32>
  %dx = llmc.softmax_grad %gd, %y : tensor<2x3x5xf32>
  %dlogits = llmc.cross_entropy_grad %dl, %l, %t, %lse
      : tensor<f32>, tensor<2x3x7xf32>, tensor<2x3xi32>, tensor<2x3xf32>
  return %dx, %dlogits : tensor<2x3x5xf32>, tensor<2x3x7xf32>
}

// -----

// Tests that a GELU gradient after a matmul runs as its epilogue, and that
// a sum of squares over all dims is a row group with the square fused in,
// while a bias gradient (a sum over leading dims) stays unfused.
// CHECK-LABEL: func.func @grad_epilogue_and_reductions(
// CHECK: llmc.fusion "matmul_gelu_grad" gemm
// CHECK: llmc.fusion "mul_reduce_sum" row
// CHECK: llmc.reduce_sum %{{.*}} dims [0, 1] : tensor<2x4x32xf32>
// CHECK-NOT: llmc.fusion
func.func @grad_epilogue_and_reductions(%dy: tensor<2x4x8xf32>,
                                        %w: tensor<8x32xf32>,
                                        %h: tensor<2x4x32xf32>,
                                        %p: tensor<32x8xf32>)
    -> (tensor<2x4x32xf32>, tensor<f32>, tensor<32xf32>) {
  %d = llmc.matmul %dy, %w : tensor<2x4x8xf32>, tensor<8x32xf32>
  %dh = llmc.gelu_grad %d, %h approximate = tanh : tensor<2x4x32xf32>
  %sq = llmc.mul %p, %p : tensor<32x8xf32>, tensor<32x8xf32>
  %n = llmc.reduce_sum %sq dims [0, 1] : tensor<32x8xf32>
  %db = llmc.reduce_sum %dh dims [0, 1] : tensor<2x4x32xf32>
  return %dh, %n, %db : tensor<2x4x32xf32>, tensor<f32>, tensor<32xf32>
}

// -----

// Tests that flags (i1) are never kernel outputs: a scalar is_finite used
// by selects of two shapes is copied into each select's group, and a
// compare joins the group of its select.
// CHECK-LABEL: func.func @flags(
// CHECK: llmc.fusion "is_finite_select" pointwise (%{{.*}}) : (tensor<f32>, tensor<4x3xf32>, tensor<4x3xf32>) -> tensor<4x3xf32>
// CHECK: llmc.fusion "is_finite_compare_select_select" pointwise (%{{.*}}) : (tensor<f32>, tensor<3xf32>, tensor<3xf32>) -> tensor<3xf32>
// CHECK-NOT: -> tensor<i1>
// CHECK: return
func.func @flags(%norm: tensor<f32>, %a: tensor<4x3xf32>, %b: tensor<4x3xf32>,
                 %c: tensor<3xf32>, %d: tensor<3xf32>)
    -> (tensor<4x3xf32>, tensor<3xf32>) {
  %finite = llmc.is_finite %norm : tensor<f32>
  %x = llmc.select %finite, %a, %b : tensor<i1>, tensor<4x3xf32>
  %less = llmc.compare lt, %c, %d : tensor<3xf32>, tensor<3xf32>
  %min = llmc.select %less, %c, %d : tensor<3xi1>, tensor<3xf32>
  %y = llmc.select %finite, %min, %d : tensor<i1>, tensor<3xf32>
  return %x, %y : tensor<4x3xf32>, tensor<3xf32>
}

// -----

// Tests that a row group leaves out a producer whose value a function
// returns as a state's new value: the accumulation stays its GEMM's
// epilogue (accumulated in place), and the sum of squares reads the result.
// CHECK-LABEL: func.func @accumulated_then_squared(
// CHECK: %[[G:[0-9]+]] = llmc.fusion "matmul_add" gemm
// CHECK: %[[S:[0-9]+]] = llmc.fusion "mul_reduce_sum" row (%[[G]])
// CHECK: return %[[G]], %[[S]]
func.func @accumulated_then_squared(%x: tensor<2x4xf32>, %dy: tensor<2x3xf32>,
                                    %g: tensor<4x3xf32> {llmc.state = "grad.w"})
    -> (tensor<4x3xf32> {llmc.updates = "grad.w"}, tensor<f32>) {
  %dw = llmc.matmul %x, %dy {transpose_a} : tensor<2x4xf32>, tensor<2x3xf32>
  %n = llmc.add %g, %dw : tensor<4x3xf32>, tensor<4x3xf32>
  %sq = llmc.mul %n, %n : tensor<4x3xf32>, tensor<4x3xf32>
  %s = llmc.reduce_sum %sq dims [0, 1] : tensor<4x3xf32>
  return %n, %s : tensor<4x3xf32>, tensor<f32>
}

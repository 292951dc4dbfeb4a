// RUN: llmc-opt %s --split-input-file --llmc-amp=precision=fp16 | FileCheck %s
// RUN: llmc-opt %s --split-input-file --llmc-amp=precision=fp16 | FileCheck %s --check-prefix=FOLD
// RUN: llmc-opt %s --split-input-file --llmc-amp=precision=bf16 | FileCheck %s --check-prefix=BF16
// RUN: llmc-opt %s --split-input-file --llmc-amp="precision=bf16 allow=llmc.layer_norm deny=llmc.matmul,llmc.gelu" | FileCheck %s --check-prefix=LISTS
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-amp=precision=bf16 --llmc-autodiff --llmc-optimizer --llmc-fusion | FileCheck %s --check-prefix=PIPE
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-training-pipeline | FileCheck %s --check-prefix=FP32

// Tests each op class on a pre-norm block with a tied classifier:
// embedding of wte (only a parameter operand) and layer_norm (deny) in f32,
// the matmuls (allow) in the low type, the bias add and GELU following the
// matmul, the residual add following its f32 stream. Parameters get one
// cast each, right before their first use (w is used twice, its cast once),
// and the logits return as f32
// through the cast that cross_entropy (deny) reads too.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:arg[0-9]+]]: tensor<16x8xf32> {llmc.param = "wte"}
// CHECK-SAME: %[[LNW:arg[0-9]+]]: tensor<8xf32> {llmc.param = "ln.weight"}
// CHECK-SAME: %[[LNB:arg[0-9]+]]: tensor<8xf32> {llmc.param = "ln.bias"}
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<8x8xf32> {llmc.param = "fc.weight"}
// CHECK-SAME: %[[B:arg[0-9]+]]: tensor<8xf32> {llmc.param = "fc.bias"}
// CHECK-SAME: %[[TOK:arg[0-9]+]]: tensor<2x4xi32>
// CHECK-SAME: %[[TGT:arg[0-9]+]]: tensor<2x4xi32>
// CHECK-SAME: -> (tensor<f32>, tensor<2x4x16xf32>)
// CHECK-NEXT: %[[X:.*]] = llmc.embedding %[[WTE]], %[[TOK]] : tensor<16x8xf32>, tensor<2x4xi32>
// CHECK-NEXT: %[[Y:[^ ,]+]], %{{.*}} = llmc.layer_norm %[[X]], %[[LNW]], %[[LNB]] {{.*}} : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[YH:.*]] = llmc.cast %[[Y]] : tensor<2x4x8xf32> -> tensor<2x4x8xf16>
// CHECK-NEXT: %[[WH:.*]] = llmc.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xf16>
// CHECK-NEXT: %[[H:.*]] = llmc.matmul %[[YH]], %[[WH]] {transpose_b} : tensor<2x4x8xf16>, tensor<8x8xf16>
// CHECK-NEXT: %[[BH:.*]] = llmc.cast %[[B]] : tensor<8xf32> -> tensor<8xf16>
// CHECK-NEXT: %[[HB:.*]] = llmc.add %[[H]], %[[BH]] : tensor<2x4x8xf16>, tensor<8xf16>
// CHECK-NEXT: %[[G:.*]] = llmc.gelu %[[HB]] approximate = tanh : tensor<2x4x8xf16>
// CHECK-NEXT: %[[P:.*]] = llmc.matmul %[[G]], %[[WH]] {transpose_b} : tensor<2x4x8xf16>, tensor<8x8xf16>
// CHECK-NEXT: %[[PF:.*]] = llmc.cast %[[P]] : tensor<2x4x8xf16> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[R:.*]] = llmc.add %[[X]], %[[PF]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
// CHECK-NEXT: %[[RH:.*]] = llmc.cast %[[R]] : tensor<2x4x8xf32> -> tensor<2x4x8xf16>
// CHECK-NEXT: %[[WTEH:.*]] = llmc.cast %[[WTE]] : tensor<16x8xf32> -> tensor<16x8xf16>
// CHECK-NEXT: %[[L:.*]] = llmc.matmul %[[RH]], %[[WTEH]] {transpose_b} : tensor<2x4x8xf16>, tensor<16x8xf16>
// CHECK-NEXT: %[[LF:.*]] = llmc.cast %[[L]] : tensor<2x4x16xf16> -> tensor<2x4x16xf32>
// CHECK-NEXT: %[[LOSS:[^ ,]+]], %{{.*}} = llmc.cross_entropy %[[LF]], %[[TGT]] : tensor<2x4x16xf32>, tensor<2x4xi32>
// CHECK-NEXT: return %[[LOSS]], %[[LF]] : tensor<f32>, tensor<2x4x16xf32>

// bf16 takes the same places.
// BF16-LABEL: func.func @forward(
// BF16-NOT: xf16>
// BF16: llmc.cast %{{.*}} : tensor<8x8xf32> -> tensor<8x8xbf16>
// BF16-NEXT: llmc.matmul {{.*}} : tensor<2x4x8xbf16>, tensor<8x8xbf16>
// BF16-NEXT: llmc.cast %{{.*}} : tensor<8xf32> -> tensor<8xbf16>
// BF16-NEXT: llmc.add {{.*}} : tensor<2x4x8xbf16>, tensor<8xbf16>
// BF16-NEXT: llmc.gelu {{.*}} : tensor<2x4x8xbf16>
// BF16: llmc.cast %{{.*}} : tensor<16x8xf32> -> tensor<16x8xbf16>
// BF16-NEXT: llmc.matmul {{.*}} : tensor<2x4x8xbf16>, tensor<16x8xbf16>
// BF16-NEXT: llmc.cast %{{.*}} : tensor<2x4x16xbf16> -> tensor<2x4x16xf32>

// Moving ops between the lists by name: layer_norm runs in bf16 (weights
// and input cast down before it), the matmuls and GELU in f32, and
// nothing else is cast, since everything downstream is f32 again.
// LISTS-LABEL: func.func @forward(
// LISTS-NEXT: %[[X:.*]] = llmc.embedding
// LISTS-NEXT: %[[XH:.*]] = llmc.cast %[[X]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// LISTS-NEXT: %[[LNW:.*]] = llmc.cast %arg1 : tensor<8xf32> -> tensor<8xbf16>
// LISTS-NEXT: %[[LNB:.*]] = llmc.cast %arg2 : tensor<8xf32> -> tensor<8xbf16>
// LISTS-NEXT: %[[Y:[^ ,]+]], {{.*}} = llmc.layer_norm %[[XH]], %[[LNW]], %[[LNB]] {{.*}} : tensor<2x4x8xbf16>, tensor<8xbf16>, tensor<8xbf16>
// LISTS-NEXT: %[[YF:.*]] = llmc.cast %[[Y]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// LISTS-NEXT: llmc.matmul %[[YF]], %arg3 {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
// LISTS-NEXT: llmc.add {{.*}} : tensor<2x4x8xf32>, tensor<8xf32>
// LISTS-NEXT: llmc.gelu {{.*}} : tensor<2x4x8xf32>
// LISTS-NOT: llmc.cast
// LISTS: return

func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %lnw: tensor<8xf32> {llmc.param = "ln.weight"},
                   %lnb: tensor<8xf32> {llmc.param = "ln.bias"},
                   %w: tensor<8x8xf32> {llmc.param = "fc.weight"},
                   %b: tensor<8xf32> {llmc.param = "fc.bias"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"})
    -> (tensor<f32>, tensor<2x4x16xf32>) {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %y, %mean, %rstd = llmc.layer_norm %x, %lnw, %lnb {epsilon = 1.0e-5 : f32}
      : tensor<2x4x8xf32>, tensor<8xf32>, tensor<8xf32>
  %h = llmc.matmul %y, %w {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %hb = llmc.add %h, %b : tensor<2x4x8xf32>, tensor<8xf32>
  %g = llmc.gelu %hb approximate = tanh : tensor<2x4x8xf32>
  %p = llmc.matmul %g, %w {transpose_b} : tensor<2x4x8xf32>, tensor<8x8xf32>
  %r = llmc.add %x, %p : tensor<2x4x8xf32>, tensor<2x4x8xf32>
  %logits = llmc.matmul %r, %wte {transpose_b}
      : tensor<2x4x8xf32>, tensor<16x8xf32>
  %loss, %lse = llmc.cross_entropy %logits, %targets
      : tensor<2x4x16xf32>, tensor<2x4xi32>
  return %loss, %logits : tensor<f32>, tensor<2x4x16xf32>
}

// -----

// Tests attention and the deny-listed softmax, exp and reductions. The
// attention runs in f16 but its lse stays f32 (the neg that follows it is
// f32 with no cast); the constant does not vote, so the scaled scores stay
// f16 and the constant is cast; the two operands of the first
// batch_matmul share one cast.
// CHECK-LABEL: func.func @forward(
// CHECK: %[[Q:.*]] = llmc.reshape %{{.*}} : tensor<2x4x8xf32> -> tensor<2x1x4x8xf32>
// CHECK-NEXT: %[[QH:.*]] = llmc.cast %[[Q]] : tensor<2x1x4x8xf32> -> tensor<2x1x4x8xf16>
// CHECK-NEXT: %[[O:[^ ,]+]], %[[LSE:[^ ,]+]] = llmc.attention %[[QH]], %[[QH]], %[[QH]] {{.*}} : tensor<2x1x4x8xf16>, tensor<2x1x4x8xf16>, tensor<2x1x4x8xf16>
// CHECK-NEXT: llmc.neg %[[LSE]] : tensor<2x1x4xf32>
// CHECK-NEXT: %[[S:.*]] = llmc.batch_matmul %[[QH]], %[[QH]] {transpose_b} : tensor<2x1x4x8xf16>, tensor<2x1x4x8xf16>
// CHECK-NEXT: %[[HALF:.*]] = llmc.constant dense<5.000000e-01> : tensor<f32>
// CHECK-NEXT: %[[HALFH:.*]] = llmc.cast %[[HALF]] : tensor<f32> -> tensor<f16>
// CHECK-NEXT: %[[SS:.*]] = llmc.mul %[[S]], %[[HALFH]] : tensor<2x1x4x4xf16>, tensor<f16>
// CHECK-NEXT: %[[SSF:.*]] = llmc.cast %[[SS]] : tensor<2x1x4x4xf16> -> tensor<2x1x4x4xf32>
// CHECK-NEXT: %[[PR:.*]] = llmc.softmax %[[SSF]] : tensor<2x1x4x4xf32>
// CHECK-NEXT: %[[PRH:.*]] = llmc.cast %[[PR]] : tensor<2x1x4x4xf32> -> tensor<2x1x4x4xf16>
// CHECK-NEXT: %[[PV:.*]] = llmc.batch_matmul %[[PRH]], %[[O]] : tensor<2x1x4x4xf16>, tensor<2x1x4x8xf16>
// CHECK-NEXT: %[[PVF:.*]] = llmc.cast %[[PV]] : tensor<2x1x4x8xf16> -> tensor<2x1x4x8xf32>
// CHECK-NEXT: llmc.exp %[[PVF]] : tensor<2x1x4x8xf32>
// CHECK-NEXT: llmc.reduce_mean %[[PVF]] dims [3] : tensor<2x1x4x8xf32>
// CHECK-NEXT: llmc.reduce_sum %[[PVF]] dims [3] : tensor<2x1x4x8xf32>
// CHECK-NEXT: llmc.reduce_max %[[PVF]] dims [3] : tensor<2x1x4x8xf32>
// CHECK-NEXT: llmc.log %[[PVF]] : tensor<2x1x4x8xf32>
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"})
    -> (tensor<f32>, tensor<2x1x4xf32>) {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %q = llmc.reshape %x : tensor<2x4x8xf32> -> tensor<2x1x4x8xf32>
  %o, %lse = llmc.attention %q, %q, %q {causal, scale = 0.35355339 : f32}
      : tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>
  %nlse = llmc.neg %lse : tensor<2x1x4xf32>
  %s = llmc.batch_matmul %q, %q {transpose_b}
      : tensor<2x1x4x8xf32>, tensor<2x1x4x8xf32>
  %half = llmc.constant dense<0.5> : tensor<f32>
  %ss = llmc.mul %s, %half : tensor<2x1x4x4xf32>, tensor<f32>
  %p = llmc.softmax %ss : tensor<2x1x4x4xf32>
  %pv = llmc.batch_matmul %p, %o : tensor<2x1x4x4xf32>, tensor<2x1x4x8xf32>
  %e = llmc.exp %pv : tensor<2x1x4x8xf32>
  %mean = llmc.reduce_mean %pv dims [3] : tensor<2x1x4x8xf32>
  %sum = llmc.reduce_sum %pv dims [3] : tensor<2x1x4x8xf32>
  %max = llmc.reduce_max %pv dims [3] : tensor<2x1x4x8xf32>
  %log = llmc.log %pv : tensor<2x1x4x8xf32>
  %flat = llmc.reshape %e : tensor<2x1x4x8xf32> -> tensor<2x4x8xf32>
  %loss, %lse2 = llmc.cross_entropy %flat, %targets
      : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss, %nlse : tensor<f32>, tensor<2x1x4xf32>
}

// -----

// Tests rms_norm (deny: its input is cast up, its f32 weight is not, its
// rstd is f32) and ops whose only float operands are parameters (f32, no
// casts).
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WPE:arg[0-9]+]]: tensor<4x8xf32> {llmc.param = "wpe"}
// CHECK-SAME: %[[NW:arg[0-9]+]]: tensor<8xf32> {llmc.param = "norm.weight"}
// CHECK-NEXT: %[[POS:.*]] = llmc.slice %[[WPE]] offsets [0, 0] sizes [4, 8] : tensor<4x8xf32>
// CHECK-NEXT: %[[NN:.*]] = llmc.mul %[[NW]], %[[NW]] : tensor<8xf32>, tensor<8xf32>
// CHECK-NEXT: %[[X:.*]] = llmc.embedding
// CHECK-NEXT: %[[XP:.*]] = llmc.add %[[X]], %[[POS]] : tensor<2x4x8xf32>, tensor<4x8xf32>
// CHECK-NEXT: %[[XPH:.*]] = llmc.cast %[[XP]] : tensor<2x4x8xf32> -> tensor<2x4x8xf16>
// CHECK-NEXT: %[[WH:.*]] = llmc.cast %{{.*}} : tensor<8x8xf32> -> tensor<8x8xf16>
// CHECK-NEXT: %[[H:.*]] = llmc.matmul %[[XPH]], %[[WH]] : tensor<2x4x8xf16>, tensor<8x8xf16>
// CHECK-NEXT: %[[HF:.*]] = llmc.cast %[[H]] : tensor<2x4x8xf16> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[N:[^ ,]+]], %[[RSTD:[^ ,]+]] = llmc.rms_norm %[[HF]], %[[NN]] {{.*}} : tensor<2x4x8xf32>, tensor<8xf32>
// CHECK-NEXT: llmc.neg %[[RSTD]] : tensor<2x4xf32>
func.func @forward(%wpe: tensor<4x8xf32> {llmc.param = "wpe"},
                   %nw: tensor<8xf32> {llmc.param = "norm.weight"},
                   %wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %w: tensor<8x8xf32> {llmc.param = "w"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"},
                   %targets: tensor<2x4xi32> {llmc.input = "targets"})
    -> (tensor<f32>, tensor<2x4xf32>) {
  %pos = llmc.slice %wpe offsets [0, 0] sizes [4, 8] : tensor<4x8xf32>
  %nn = llmc.mul %nw, %nw : tensor<8xf32>, tensor<8xf32>
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %xp = llmc.add %x, %pos : tensor<2x4x8xf32>, tensor<4x8xf32>
  %h = llmc.matmul %xp, %w : tensor<2x4x8xf32>, tensor<8x8xf32>
  %n, %rstd = llmc.rms_norm %h, %nn {epsilon = 1.0e-6 : f32}
      : tensor<2x4x8xf32>, tensor<8xf32>
  %nrstd = llmc.neg %rstd : tensor<2x4xf32>
  %loss, %lse = llmc.cross_entropy %n, %targets
      : tensor<2x4x8xf32>, tensor<2x4xi32>
  return %loss, %nrstd : tensor<f32>, tensor<2x4xf32>
}

// -----

// Tests the cast folding. %up is the user's f16 -> f32 cast before a
// matmul, which casts it back down: that pair disappears and the matmul
// reads %h. Of the user's casts, f16 -> f32 -> f16 is %h itself, a cast to
// the same type is its input, f16 -> f32 -> bf16 is one f16 -> bf16 cast,
// the second f32 -> f16 cast of %w merges into the first, and after that
// %round is a second f16 -> f32 cast of %h, merged into %up. The mm result
// is cast back to its declared f32. Nine casts in, four out (FOLD).
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<8x8xf32> {llmc.param = "w"}
// CHECK-NEXT: %[[H:.*]] = llmc.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xf16>
// CHECK-NEXT: %[[UP:.*]] = llmc.cast %[[H]] : tensor<8x8xf16> -> tensor<8x8xf32>
// CHECK-NEXT: %[[MM:.*]] = llmc.matmul %[[H]], %[[H]] : tensor<8x8xf16>, tensor<8x8xf16>
// CHECK-NEXT: %[[NEG:.*]] = llmc.neg %[[H]] : tensor<8x8xf16>
// CHECK-NEXT: %[[SAME:.*]] = llmc.neg %[[H]] : tensor<8x8xf16>
// CHECK-NEXT: %[[BF:.*]] = llmc.cast %[[H]] : tensor<8x8xf16> -> tensor<8x8xbf16>
// CHECK-NEXT: %[[NEGB:.*]] = llmc.neg %[[BF]] : tensor<8x8xbf16>
// CHECK-NEXT: %[[MERGED:.*]] = llmc.neg %[[H]] : tensor<8x8xf16>
// CHECK-NEXT: %[[RN:.*]] = llmc.neg %[[UP]] : tensor<8x8xf32>
// CHECK-NEXT: %[[MMF:.*]] = llmc.cast %[[MM]] : tensor<8x8xf16> -> tensor<8x8xf32>
// CHECK-NEXT: return %[[MMF]], %[[NEG]], %[[SAME]], %[[NEGB]], %[[MERGED]], %[[RN]]
// FOLD-LABEL: func.func @forward(%arg0: tensor<8x8xf32> {llmc.param = "w"})
// FOLD-COUNT-4: llmc.cast
// FOLD-NOT: llmc.cast
// FOLD: return
func.func @forward(%w: tensor<8x8xf32> {llmc.param = "w"})
    -> (tensor<8x8xf32>, tensor<8x8xf16>, tensor<8x8xf16>, tensor<8x8xbf16>,
        tensor<8x8xf16>, tensor<8x8xf32>) {
  %h = llmc.cast %w : tensor<8x8xf32> -> tensor<8x8xf16>
  %up = llmc.cast %h : tensor<8x8xf16> -> tensor<8x8xf32>
  %mm = llmc.matmul %up, %up : tensor<8x8xf32>, tensor<8x8xf32>
  %down = llmc.cast %up : tensor<8x8xf32> -> tensor<8x8xf16>
  %neg = llmc.neg %down : tensor<8x8xf16>
  %same = llmc.cast %h : tensor<8x8xf16> -> tensor<8x8xf16>
  %nsame = llmc.neg %same : tensor<8x8xf16>
  %bf = llmc.cast %up : tensor<8x8xf32> -> tensor<8x8xbf16>
  %nbf = llmc.neg %bf : tensor<8x8xbf16>
  %again = llmc.cast %w : tensor<8x8xf32> -> tensor<8x8xf16>
  %nagain = llmc.neg %again : tensor<8x8xf16>
  %round = llmc.cast %again : tensor<8x8xf16> -> tensor<8x8xf32>
  %nround = llmc.neg %round : tensor<8x8xf32>
  return %mm, %neg, %nsame, %nbf, %nagain, %nround
      : tensor<8x8xf32>, tensor<8x8xf16>, tensor<8x8xf16>, tensor<8x8xbf16>,
        tensor<8x8xf16>, tensor<8x8xf32>
}

// -----

// Tests f16 meeting bf16: the user's bf16 matmul runs in f16 (allow), the
// neg follows its bf16 input, and the add of the two widens to f32 like
// torch's type promotion; the result is cast back to the declared bf16.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[W:arg[0-9]+]]: tensor<8x8xf32> {llmc.param = "w"}
// CHECK: %[[XB:.*]] = llmc.cast %{{.*}} : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK-NEXT: %[[WB:.*]] = llmc.cast %[[W]] : tensor<8x8xf32> -> tensor<8x8xbf16>
// CHECK-NEXT: %[[XH:.*]] = llmc.cast %[[XB]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf16>
// CHECK-NEXT: %[[WH:.*]] = llmc.cast %[[WB]] : tensor<8x8xbf16> -> tensor<8x8xf16>
// CHECK-NEXT: %[[H:.*]] = llmc.matmul %[[XH]], %[[WH]] : tensor<2x4x8xf16>, tensor<8x8xf16>
// CHECK-NEXT: %[[Z:.*]] = llmc.neg %[[XB]] : tensor<2x4x8xbf16>
// CHECK-NEXT: %[[HF:.*]] = llmc.cast %[[H]] : tensor<2x4x8xf16> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[ZF:.*]] = llmc.cast %[[Z]] : tensor<2x4x8xbf16> -> tensor<2x4x8xf32>
// CHECK-NEXT: %[[MIX:.*]] = llmc.add %[[HF]], %[[ZF]] : tensor<2x4x8xf32>, tensor<2x4x8xf32>
// CHECK-NEXT: %[[OUT:.*]] = llmc.cast %[[MIX]] : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
// CHECK-NEXT: return %[[OUT]] : tensor<2x4x8xbf16>
func.func @forward(%wte: tensor<16x8xf32> {llmc.param = "wte"},
                   %w: tensor<8x8xf32> {llmc.param = "w"},
                   %tokens: tensor<2x4xi32> {llmc.input = "tokens"})
    -> tensor<2x4x8xbf16> {
  %x = llmc.embedding %wte, %tokens : tensor<16x8xf32>, tensor<2x4xi32>
  %xb = llmc.cast %x : tensor<2x4x8xf32> -> tensor<2x4x8xbf16>
  %wb = llmc.cast %w : tensor<8x8xf32> -> tensor<8x8xbf16>
  %h = llmc.matmul %xb, %wb : tensor<2x4x8xbf16>, tensor<8x8xbf16>
  %z = llmc.neg %xb : tensor<2x4x8xbf16>
  %mix = llmc.add %h, %z : tensor<2x4x8xbf16>, tensor<2x4x8xbf16>
  return %mix : tensor<2x4x8xbf16>
}

// The tiny GPT-2, AMP'd in bf16, differentiated, given AdamW and fused:
// the matmuls run in bf16, the gradients arrive as f32 (the masters'
// type), and the optimizer state is f32.
// PIPE-LABEL: func.func @forward(
// PIPE: llmc.matmul {{.*}} : tensor<1x8x64xbf16>, tensor<192x64xbf16>
// PIPE: llmc.attention {{.*}} : tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>
// PIPE: llmc.fusion "cast" pointwise (%arg0) : (tensor<256x64xf32>) -> tensor<256x64xbf16>
// PIPE-LABEL: func.func @grad_step(
// PIPE-SAME: -> (tensor<f32> {llmc.output = "loss"}, tensor<256x64xf32> {llmc.output = "grad.wte", llmc.updates = "grad.wte"}
// PIPE-SAME: tensor<192x64xf32> {llmc.output = "grad.h.0.attn.c_attn.weight"
// PIPE: llmc.attention_grad {{.*}} : tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8x16xbf16>, tensor<1x4x8xf32>
// PIPE: llmc.embedding_grad {{.*}} : tensor<1x8x64xf32>, tensor<1x8xi32> -> tensor<256x64xf32>
// PIPE-LABEL: func.func @update_step(
// PIPE-SAME: %{{.*}}: tensor<256x64xf32> {llmc.state = "adam_m.wte"}
// PIPE-SAME: %{{.*}}: tensor<256x64xf32> {llmc.state = "adam_v.wte"}

// Without llmc-amp the training pipeline stays in f32.
// FP32-LABEL: func.func @forward(
// FP32-NOT: llmc.cast
// FP32-NOT: bf16
// FP32-NOT: xf16
// FP32: func.func @update_step(

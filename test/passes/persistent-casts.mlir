// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-amp=precision=bf16 --llmc-autodiff --llmc-optimizer --llmc-persistent-casts | FileCheck %s
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-amp=precision=fp16 --llmc-autodiff --llmc-optimizer --llmc-loss-scaling --llmc-persistent-casts | FileCheck %s --check-prefix=FP16
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-autodiff --llmc-optimizer --llmc-persistent-casts | FileCheck %s --check-prefix=F32
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt --llmc-amp=precision=bf16 --llmc-autodiff --llmc-optimizer --llmc-shard="dp=2" --llmc-persistent-casts | FileCheck %s --check-prefix=DDP

// Tests that the 16-bit weight copies llmc-amp casts in every step become
// state: read by @forward and @grad_step, written by @update_step from the
// new master value, and made from the masters by @cast_weights.
//
// @forward reads the tied wte's copy for the logits; no parameter is cast.
// CHECK-LABEL: func.func @forward(
// CHECK-SAME: %[[WTE:[a-z0-9]+]]: tensor<256x64xf32> {llmc.param = "wte"}
// CHECK-SAME: %[[COPY:[a-z0-9]+]]: tensor<256x64xbf16> {llmc.state = "cast.wte"}
// CHECK-SAME: {llmc.state = "cast.h.0.attn.c_attn.weight"}
// CHECK-NOT: llmc.cast %arg{{[0-9]+}} :
// CHECK: llmc.matmul %{{.*}}, %[[COPY]] {transpose_b}
//
// @grad_step: the same reads; the gradients are still f32 and accumulated.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: {llmc.state = "grad.wte"}
// CHECK-SAME: %[[GCOPY:[a-z0-9]+]]: tensor<256x64xbf16> {llmc.state = "cast.wte"}
// CHECK-NOT: llmc.cast %arg{{[0-9]+}} :
// CHECK: llmc.matmul %{{.*}}, %[[GCOPY]] {transpose_b}
// CHECK: return
//
// @update_step casts each new master value into its copy, right after it.
// CHECK-LABEL: func.func @update_step(
// CHECK-SAME: {llmc.state = "cast.wte"}
// CHECK-SAME: tensor<256x64xbf16> {llmc.updates = "cast.wte"}
// CHECK: %[[NEWWTE:[0-9]+]] = llmc.sub %{{[0-9]+}}, %{{[0-9]+}} : tensor<256x64xf32>, tensor<256x64xf32>
// CHECK-NEXT: %[[WTECAST:[0-9]+]] = llmc.cast %[[NEWWTE]] : tensor<256x64xf32> -> tensor<256x64xbf16>
// CHECK: return %{{.*}}%[[NEWWTE]],{{.*}}%[[WTECAST]],
//
// Norm weights and biases run in f32 (layer_norm is deny-listed): no copy.
// CHECK-NOT: "cast.h.0.ln_1.weight"
//
// @cast_weights: every copy from its master.
// CHECK-LABEL: func.func @cast_weights(
// CHECK-SAME: %[[M:[a-z0-9]+]]: tensor<256x64xf32> {llmc.param = "wte"}
// CHECK-SAME: {llmc.state = "cast.wte"}
// CHECK-SAME: -> (tensor<256x64xbf16> {llmc.updates = "cast.wte"}
// CHECK: llmc.cast %[[M]] : tensor<256x64xf32> -> tensor<256x64xbf16>

// With fp16 loss scaling, the copy is the cast of the value the parameter
// keeps: the new one, or the old one when the update is skipped.
// FP16-LABEL: func.func @update_step(
// FP16: %[[KEPT:[0-9]+]] = llmc.select %{{[0-9]+}}, %{{[0-9]+}}, %arg0 : tensor<i1>, tensor<256x64xf32>
// FP16-NEXT: %[[FCAST:[0-9]+]] = llmc.cast %[[KEPT]] : tensor<256x64xf32> -> tensor<256x64xf16>
// FP16: return %{{.*}}%[[KEPT]],{{.*}}%[[FCAST]]
// FP16-LABEL: func.func @cast_weights(

// In f32 there is nothing to copy.
// F32-NOT: cast.wte
// F32-NOT: @cast_weights

// Data parallelism: the step without gradient communication reads the
// copies too.
// DDP-LABEL: func.func @grad_step_no_sync(
// DDP-SAME: {llmc.state = "cast.wte"}
// DDP-LABEL: func.func @cast_weights(

// RUN: llmc-opt %s --llmc-optimizer --llmc-loss-scaling | FileCheck %s
// RUN: llmc-opt %s --llmc-optimizer="optimizer=sgd momentum=0 weight-decay=0 max-grad-norm=0" --llmc-loss-scaling="initial-scale-power=3 window=5 hysteresis=1 min-scale=0.5 factor=4 consecutive-hysteresis=true" | FileCheck %s --check-prefix=OPTS
// RUN: llmc-opt %s --llmc-optimizer --llmc-loss-scaling --llmc-fusion | FileCheck %s --check-prefix=FUSED

// Tests that @grad_step gets the scale as a state (starting at 2^16) and
// seeds the backward with dloss * loss_scale: no op reads dloss but that
// product.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: {llmc.state = "grad.b"},
// CHECK-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {llmc.state = "loss_scale", llmc.state_init = 6.553600e+04 : f64},
// CHECK-SAME: %[[DLOSS:[a-z0-9]+]]: tensor<f32> {llmc.input = "dloss"})
// CHECK-NEXT: %[[SEED:.*]] = llmc.mul %[[DLOSS]], %[[SCALE]] : tensor<f32>, tensor<f32>
// CHECK-NOT: %[[DLOSS]]
// CHECK: llmc.mul %{{.*}}, %[[SEED]] : tensor<4x3xf32>, tensor<f32>
// CHECK: llmc.mul %{{.*}}, %[[SEED]] : tensor<3xf32>, tensor<f32>
// CHECK: return

// Tests @update_step: the four states before the inputs, each gradient
// read through its own multiply by 1 / loss_scale (the norm's and the
// update's), the overflow test on the norm, the moments and parameters
// kept by select where they are computed (the step reads the selected
// moments), the zeroed gradients not selected, and the scale's rules.
// CHECK-LABEL: func.func @update_step(
// CHECK-SAME: %[[PW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "w"}, %[[PB:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "b"},
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "grad.w"}, %[[GB:[a-z0-9]+]]: tensor<3xf32> {llmc.state = "grad.b"},
// CHECK-SAME: %[[MW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "adam_m.w"}, %{{.*}}: tensor<3xf32> {llmc.state = "adam_m.b"},
// CHECK-SAME: %[[VW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "adam_v.w"}, %{{.*}}: tensor<3xf32> {llmc.state = "adam_v.b"},
// CHECK-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {llmc.state = "loss_scale", llmc.state_init = 6.553600e+04 : f64},
// CHECK-SAME: %[[CLEAN:[a-z0-9]+]]: tensor<f32> {llmc.state = "loss_scale.clean_steps"},
// CHECK-SAME: %[[HYST:[a-z0-9]+]]: tensor<f32> {llmc.state = "loss_scale.hysteresis", llmc.state_init = 2.000000e+00 : f64},
// CHECK-SAME: %[[SKIPPED:[a-z0-9]+]]: tensor<f32> {llmc.state = "loss_scale.skipped_steps"},
// CHECK-SAME: %{{.*}}: tensor<f32> {llmc.input = "lr"}
// CHECK-SAME: -> (tensor<f32> {llmc.output = "grad_norm"},
// CHECK-SAME: tensor<3xf32> {llmc.output = "grad.b", llmc.updates = "grad.b"},
// CHECK-SAME: tensor<f32> {llmc.output = "loss_scale", llmc.updates = "loss_scale"},
// CHECK-SAME: tensor<f32> {llmc.output = "loss_scale.clean_steps", llmc.updates = "loss_scale.clean_steps"},
// CHECK-SAME: tensor<f32> {llmc.output = "loss_scale.hysteresis", llmc.updates = "loss_scale.hysteresis"},
// CHECK-SAME: tensor<f32> {llmc.output = "loss_scale.skipped_steps", llmc.updates = "loss_scale.skipped_steps"},
// CHECK-SAME: tensor<f32> {llmc.output = "overflow"}, tensor<f32> {llmc.output = "used_loss_scale"})
// CHECK: %[[ONE:.*]] = llmc.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[INV:.*]] = llmc.div %[[ONE]], %[[SCALE]] : tensor<f32>, tensor<f32>
// CHECK-NEXT: %[[UW:.*]] = llmc.mul %[[GW]], %[[INV]] : tensor<4x3xf32>, tensor<f32>
// CHECK-NEXT: llmc.mul %[[UW]], %[[UW]]
// CHECK: %[[NORM:.*]] = llmc.sqrt %{{.*}} : tensor<f32>
// CHECK-NEXT: %[[FINITE:.*]] = llmc.is_finite %[[NORM]] : tensor<f32>
// CHECK: %[[UW2:.*]] = llmc.mul %[[GW]], %[[INV]] : tensor<4x3xf32>, tensor<f32>
// CHECK-NEXT: %[[G:.*]] = llmc.mul %[[UW2]], %{{.*}} : tensor<4x3xf32>, tensor<f32>
// CHECK: %[[M:.*]] = llmc.add %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<4x3xf32>
// CHECK-NEXT: %[[MKEPT:.*]] = llmc.select %[[FINITE]], %[[M]], %[[MW]] : tensor<i1>, tensor<4x3xf32>
// CHECK: %[[V:.*]] = llmc.add %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<4x3xf32>
// CHECK-NEXT: %[[VKEPT:.*]] = llmc.select %[[FINITE]], %[[V]], %[[VW]] : tensor<i1>, tensor<4x3xf32>
// CHECK-NEXT: llmc.sqrt %[[VKEPT]]
// CHECK: llmc.mul %{{.*}}, %[[MKEPT]]
// CHECK: %[[NEWW:.*]] = llmc.sub %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<4x3xf32>
// CHECK-NEXT: %[[WKEPT:.*]] = llmc.select %[[FINITE]], %[[NEWW]], %[[PW]] : tensor<i1>, tensor<4x3xf32>
// CHECK-NEXT: %[[ZW:.*]] = llmc.fill 0.000000e+00 : tensor<4x3xf32>
// CHECK-NOT: llmc.select %[[FINITE]], %[[ZW]]
// CHECK: llmc.select %[[FINITE]], %{{.*}}, %[[PB]] : tensor<i1>, tensor<3xf32>
// The scale: DeepSpeed's rules, with factor 2, window 1000, min 1.
// CHECK: %[[ONE2:.*]] = llmc.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[ZERO:.*]] = llmc.constant dense<0.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[FACTOR:.*]] = llmc.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[REFILL:.*]] = llmc.constant dense<2.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[LAST:.*]] = llmc.compare le, %[[HYST]], %[[ONE2]] : tensor<f32>, tensor<f32>
// CHECK-NEXT: %[[DIV:.*]] = llmc.div %[[SCALE]], %[[FACTOR]]
// CHECK-NEXT: %[[MIN:.*]] = llmc.constant dense<1.000000e+00> : tensor<f32>
// CHECK-NEXT: %[[LOWERED:.*]] = llmc.max %[[DIV]], %[[MIN]]
// CHECK-NEXT: %[[SOVF:.*]] = llmc.select %[[LAST]], %[[LOWERED]], %[[SCALE]]
// CHECK-NEXT: %[[HLESS:.*]] = llmc.sub %[[HYST]], %[[ONE2]]
// CHECK-NEXT: %[[HOVF:.*]] = llmc.select %[[LAST]], %[[HYST]], %[[HLESS]]
// CHECK-NEXT: %[[COUNTED:.*]] = llmc.add %[[CLEAN]], %[[ONE2]]
// CHECK-NEXT: %[[WINDOW:.*]] = llmc.constant dense<1.000000e+03> : tensor<f32>
// CHECK-NEXT: %[[FULL:.*]] = llmc.compare le, %[[WINDOW]], %[[COUNTED]]
// CHECK-NEXT: %[[RAISED:.*]] = llmc.mul %[[SCALE]], %[[FACTOR]]
// CHECK-NEXT: %[[SCLEAN:.*]] = llmc.select %[[FULL]], %[[RAISED]], %[[SCALE]]
// CHECK-NEXT: %[[CCLEAN:.*]] = llmc.select %[[FULL]], %[[ZERO]], %[[COUNTED]]
// CHECK-NEXT: %[[HCLEAN:.*]] = llmc.select %[[FULL]], %[[REFILL]], %[[HYST]]
// CHECK-NEXT: %[[NEWSCALE:.*]] = llmc.select %[[FINITE]], %[[SCLEAN]], %[[SOVF]]
// CHECK-NEXT: %[[NEWCLEAN:.*]] = llmc.select %[[FINITE]], %[[CCLEAN]], %[[ZERO]]
// CHECK-NEXT: %[[NEWHYST:.*]] = llmc.select %[[FINITE]], %[[HCLEAN]], %[[HOVF]]
// CHECK-NEXT: %[[OVERFLOW:.*]] = llmc.select %[[FINITE]], %[[ZERO]], %[[ONE2]]
// CHECK-NEXT: %[[NEWSKIPPED:.*]] = llmc.add %[[SKIPPED]], %[[OVERFLOW]]
// CHECK-NEXT: return %[[NORM]], %[[WKEPT]], {{.*}}, %[[MKEPT]], {{.*}}, %[[VKEPT]], {{.*}}, %[[ZW]], {{.*}}, %[[NEWSCALE]], %[[NEWCLEAN]], %[[NEWHYST]], %[[NEWSKIPPED]], %[[OVERFLOW]], %[[SCALE]] :

// The options: 2^3, hysteresis 1 (its state starts at 1), factor 4, min
// 0.5, window 5, and the hysteresis refilled on every clean step; plain
// SGD has no moments, so only the parameters are selected.
// OPTS-LABEL: func.func @grad_step(
// OPTS-SAME: {llmc.state = "loss_scale", llmc.state_init = 8.000000e+00 : f64}
// OPTS-LABEL: func.func @update_step(
// OPTS-SAME: %[[SCALE:[a-z0-9]+]]: tensor<f32> {llmc.state = "loss_scale", llmc.state_init = 8.000000e+00 : f64},
// OPTS-SAME: {llmc.state = "loss_scale.hysteresis", llmc.state_init = 1.000000e+00 : f64}
// OPTS: %[[FINITE:.*]] = llmc.is_finite
// OPTS: llmc.select %[[FINITE]], %{{.*}}, %{{.*}} : tensor<i1>, tensor<4x3xf32>
// OPTS: llmc.select %[[FINITE]], %{{.*}}, %{{.*}} : tensor<i1>, tensor<3xf32>
// OPTS-NOT: tensor<i1>, tensor<4x3xf32>
// OPTS: %[[FACTOR:.*]] = llmc.constant dense<4.000000e+00> : tensor<f32>
// OPTS-NEXT: %[[REFILL:.*]] = llmc.constant dense<1.000000e+00> : tensor<f32>
// OPTS: llmc.div %[[SCALE]], %[[FACTOR]]
// OPTS-NEXT: llmc.constant dense<5.000000e-01> : tensor<f32>
// OPTS: llmc.constant dense<5.000000e+00> : tensor<f32>
// OPTS-NEXT: %[[FULL:.*]] = llmc.compare le
// OPTS-NEXT: llmc.mul %[[SCALE]], %[[FACTOR]]
// OPTS-NEXT: %[[SCLEAN:.*]] = llmc.select %[[FULL]]
// OPTS-NEXT: %[[CCLEAN:.*]] = llmc.select %[[FULL]]
// OPTS-NEXT: llmc.select %[[FINITE]], %[[SCLEAN]]
// OPTS-NEXT: llmc.select %[[FINITE]], %[[CCLEAN]]
// OPTS-NEXT: llmc.select %[[FINITE]], %[[REFILL]]

// After fusion: no flag crosses a kernel boundary. Each kernel that
// selects recomputes the flag from the norm, and each parameter's update
// (moments, step, select) stays one kernel.
// FUSED-LABEL: func.func @update_step(
// FUSED-NOT: -> tensor<i1>
// FUSED-NOT: -> (tensor<i1>
// FUSED: llmc.fusion "{{(mul_)+}}add_is_finite_select_{{(mul_)+}}add_is_finite_select_sqrt_mul_add_mul_div_sub_is_finite_select" pointwise
// FUSED: llmc.fusion "{{(mul_)+}}add_is_finite_select_{{(mul_)+}}add_is_finite_select_sqrt_mul_add_mul_div_sub_is_finite_select" pointwise
// FUSED-NOT: -> tensor<i1>
// FUSED: return

module {
  func.func @grad_step(%w: tensor<4x3xf32> {llmc.param = "w"},
                       %b: tensor<3xf32> {llmc.param = "b"},
                       %tokens: tensor<2xi32> {llmc.input = "tokens"},
                       %targets: tensor<2xi32> {llmc.input = "targets"},
                       %dloss: tensor<f32> {llmc.input = "dloss"})
      -> (tensor<f32> {llmc.output = "loss"}, tensor<4x3xf32>, tensor<3xf32>) {
    %loss = llmc.fill 1.0 : tensor<f32>
    %dw = llmc.mul %w, %dloss : tensor<4x3xf32>, tensor<f32>
    %db = llmc.mul %b, %dloss : tensor<3xf32>, tensor<f32>
    return %loss, %dw, %db : tensor<f32>, tensor<4x3xf32>, tensor<3xf32>
  }
}

// RUN: llmc-opt %s --llmc-optimizer | FileCheck %s
// RUN: llmc-opt %s --llmc-optimizer="optimizer=sgd momentum=0.9 nesterov=true max-grad-norm=0" | FileCheck %s --check-prefix=SGD
// RUN: llmc-opt %s --llmc-optimizer="optimizer=sgd momentum=0 weight-decay=0" | FileCheck %s --check-prefix=PLAIN
// RUN: llmc-opt %s --llmc-optimizer="decay-norms-and-biases=true" | FileCheck %s --check-prefix=DECAYALL

// Tests that @grad_step gets one gradient buffer per parameter, inserted
// after the parameters, and returns buffer + gradient written back in place.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "w"}, %[[B:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "b"},
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "grad.w"}, %[[GB:[a-z0-9]+]]: tensor<3xf32> {llmc.state = "grad.b"},
// CHECK-SAME: %{{.*}}: tensor<2xi32> {llmc.input = "tokens"}, %{{.*}}: tensor<2xi32> {llmc.input = "targets"}, %{{.*}}: tensor<f32> {llmc.input = "dloss"})
// CHECK-SAME: -> (tensor<f32> {llmc.output = "loss"}, tensor<4x3xf32> {llmc.output = "grad.w", llmc.updates = "grad.w"}, tensor<3xf32> {llmc.output = "grad.b", llmc.updates = "grad.b"})
// CHECK: %[[SW:.*]] = llmc.add %[[GW]], %[[DW:[0-9a-z]+]] : tensor<4x3xf32>, tensor<4x3xf32>
// CHECK: %[[SB:.*]] = llmc.add %[[GB]], %[[DB:[0-9a-z]+]] : tensor<3xf32>, tensor<3xf32>
// CHECK: return %{{.*}}, %[[SW]], %[[SB]]

// Tests AdamW in PyTorch's order: the global norm over every gradient,
// the clip coefficient min(1, 1.0 / (norm + 1e-6)), decoupled decay of the
// matrix only, the moments, the bias-corrected step, and zeroed gradients.
// CHECK-LABEL: func.func @update_step(
// CHECK-SAME: %[[PW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "w"}, %[[PB:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "b"},
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "grad.w"}, %[[GB:[a-z0-9]+]]: tensor<3xf32> {llmc.state = "grad.b"},
// CHECK-SAME: %[[MW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "adam_m.w"}, %[[MB:[a-z0-9]+]]: tensor<3xf32> {llmc.state = "adam_m.b"},
// CHECK-SAME: %[[VW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "adam_v.w"}, %[[VB:[a-z0-9]+]]: tensor<3xf32> {llmc.state = "adam_v.b"},
// CHECK-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {llmc.input = "lr"}, %[[BC1:[a-z0-9]+]]: tensor<f32> {llmc.input = "bias_correction1"}, %[[BC2:[a-z0-9]+]]: tensor<f32> {llmc.input = "bias_correction2"})
// CHECK-SAME: -> (tensor<f32> {llmc.output = "grad_norm"},
// CHECK-SAME: tensor<4x3xf32> {llmc.output = "w", llmc.updates = "w"}, tensor<3xf32> {llmc.output = "b", llmc.updates = "b"},
// CHECK-SAME: tensor<4x3xf32> {llmc.output = "adam_m.w", llmc.updates = "adam_m.w"}, tensor<3xf32> {llmc.output = "adam_m.b", llmc.updates = "adam_m.b"},
// CHECK-SAME: tensor<4x3xf32> {llmc.output = "adam_v.w", llmc.updates = "adam_v.w"}, tensor<3xf32> {llmc.output = "adam_v.b", llmc.updates = "adam_v.b"},
// CHECK-SAME: tensor<4x3xf32> {llmc.output = "grad.w", llmc.updates = "grad.w"}, tensor<3xf32> {llmc.output = "grad.b", llmc.updates = "grad.b"})
// CHECK: %[[SQW:.*]] = llmc.mul %[[GW]], %[[GW]]
// CHECK: %[[SUMW:.*]] = llmc.reduce_sum %[[SQW]] dims [0, 1] : tensor<4x3xf32>
// CHECK: %[[SQB:.*]] = llmc.mul %[[GB]], %[[GB]]
// CHECK: %[[SUMB:.*]] = llmc.reduce_sum %[[SQB]] dims [0] : tensor<3xf32>
// CHECK: %[[SUM:.*]] = llmc.add %[[SUMW]], %[[SUMB]]
// CHECK: %[[NORM:.*]] = llmc.sqrt %[[SUM]] : tensor<f32>
// CHECK: %[[ONE:.*]] = llmc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[MAXN:.*]] = llmc.constant dense<1.000000e+00> : tensor<f32>
// CHECK: %[[EPS6:.*]] = llmc.constant dense<9.99999997E-7> : tensor<f32>
// CHECK: %[[SAFE:.*]] = llmc.add %[[NORM]], %[[EPS6]]
// CHECK: %[[COEF:.*]] = llmc.div %[[MAXN]], %[[SAFE]]
// CHECK: %[[NONE:.*]] = llmc.neg %[[ONE]]
// CHECK: %[[NCOEF:.*]] = llmc.neg %[[COEF]]
// CHECK: %[[NMIN:.*]] = llmc.max %[[NONE]], %[[NCOEF]]
// CHECK: %[[CLIP:.*]] = llmc.neg %[[NMIN]]
// The scalars every parameter shares are built once: 1 - lr * wd, the
// constants, lr * bc1 and sqrt(bc2).
// CHECK: %[[WD:.*]] = llmc.constant dense<1.000000e-01> : tensor<f32>
// CHECK: %[[LRWD:.*]] = llmc.mul %[[LR]], %[[WD]]
// CHECK: %[[KEEP:.*]] = llmc.sub %{{.*}}, %[[LRWD]]
// CHECK: %[[B1:.*]] = llmc.constant dense<0.899999976> : tensor<f32>
// CHECK: %[[OMB1:.*]] = llmc.constant dense<1.000000e-01> : tensor<f32>
// CHECK: %[[B2:.*]] = llmc.constant dense<0.949999988> : tensor<f32>
// CHECK: %[[OMB2:.*]] = llmc.constant dense<5.000000e-02> : tensor<f32>
// CHECK: %[[EPS:.*]] = llmc.constant dense<9.99999993E-9> : tensor<f32>
// CHECK: %[[STEPSIZE:.*]] = llmc.mul %[[LR]], %[[BC1]]
// CHECK: %[[ROOTBC2:.*]] = llmc.sqrt %[[BC2]]
// The matrix: clipped gradient, decoupled decay, moments, step.
// CHECK: %[[G:.*]] = llmc.mul %[[GW]], %[[CLIP]] : tensor<4x3xf32>, tensor<f32>
// CHECK: %[[DECAYED:.*]] = llmc.mul %[[PW]], %[[KEEP]] : tensor<4x3xf32>, tensor<f32>
// CHECK: %[[MOLD:.*]] = llmc.mul %[[B1]], %[[MW]]
// CHECK: %[[MNEW:.*]] = llmc.mul %[[OMB1]], %[[G]]
// CHECK: %[[M:.*]] = llmc.add %[[MOLD]], %[[MNEW]]
// CHECK: %[[VOLD:.*]] = llmc.mul %[[B2]], %[[VW]]
// CHECK: %[[G2:.*]] = llmc.mul %[[G]], %[[G]]
// CHECK: %[[VNEW:.*]] = llmc.mul %[[OMB2]], %[[G2]]
// CHECK: %[[V:.*]] = llmc.add %[[VOLD]], %[[VNEW]]
// CHECK: %[[SQV:.*]] = llmc.sqrt %[[V]]
// CHECK: %[[SCALED:.*]] = llmc.mul %[[SQV]], %[[ROOTBC2]]
// CHECK: %[[DEN:.*]] = llmc.add %[[SCALED]], %[[EPS]]
// CHECK: %[[NUM:.*]] = llmc.mul %[[STEPSIZE]], %[[M]]
// CHECK: %[[STEP:.*]] = llmc.div %[[NUM]], %[[DEN]]
// CHECK: %[[NEWW:.*]] = llmc.sub %[[DECAYED]], %[[STEP]]
// CHECK: %[[ZW:.*]] = llmc.fill 0.000000e+00 : tensor<4x3xf32>
// The bias: no decay unless asked.
// CHECK: %[[GBC:.*]] = llmc.mul %[[GB]], %[[CLIP]] : tensor<3xf32>, tensor<f32>
// CHECK-NOT: llmc.mul %[[PB]]
// CHECK: %[[NEWB:.*]] = llmc.sub %[[PB]], %{{.*}} : tensor<3xf32>, tensor<3xf32>
// CHECK: %[[ZB:.*]] = llmc.fill 0.000000e+00 : tensor<3xf32>
// CHECK: return %[[NORM]], %[[NEWW]], %[[NEWB]], %[[M]], %{{.*}}, %[[V]], %{{.*}}, %[[ZW]], %[[ZB]]

// SGD with Nesterov momentum and no clipping: one momentum buffer per
// parameter, L2 decay of the matrix only, and no bias corrections.
// SGD-LABEL: func.func @update_step(
// SGD-SAME: %[[PW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "w"}, %[[PB:[a-z0-9]+]]: tensor<3xf32> {llmc.param = "b"},
// SGD-SAME: {llmc.state = "grad.w"}, %{{.*}} {llmc.state = "grad.b"},
// SGD-SAME: %[[BW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "momentum.w"}, %{{.*}}: tensor<3xf32> {llmc.state = "momentum.b"},
// SGD-SAME: %[[LR:[a-z0-9]+]]: tensor<f32> {llmc.input = "lr"})
// SGD-SAME: -> (tensor<f32> {llmc.output = "grad_norm"}
// SGD-NOT: llmc.neg
// SGD: %[[MOM:.*]] = llmc.constant dense<0.899999976> : tensor<f32>
// SGD: %[[WDC:.*]] = llmc.constant dense<1.000000e-01> : tensor<f32>
// SGD: %[[DECAY:.*]] = llmc.mul %[[WDC]], %[[PW]] : tensor<f32>, tensor<4x3xf32>
// SGD: %[[D:.*]] = llmc.add %{{.*}}, %[[DECAY]]
// SGD: llmc.mul %[[MOM]], %[[BW]]
// SGD: %[[BUF:.*]] = llmc.add %{{.*}}, %[[D]]
// SGD: llmc.mul %[[MOM]], %[[BUF]]
// SGD: %[[NEST:.*]] = llmc.add %[[D]], %{{.*}}
// SGD: %[[STEP:.*]] = llmc.mul %[[LR]], %[[NEST]]
// SGD: llmc.sub %[[PW]], %[[STEP]]

// Plain SGD keeps no state at all.
// PLAIN-LABEL: func.func @update_step(
// PLAIN-NOT: momentum
// PLAIN-SAME: %{{.*}}: tensor<f32> {llmc.input = "lr"})

// DECAYALL-LABEL: func.func @update_step(
// DECAYALL: llmc.mul %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<f32>
// DECAYALL: llmc.mul %[[PB:.*]], %{{.*}} : tensor<3xf32>, tensor<f32>

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

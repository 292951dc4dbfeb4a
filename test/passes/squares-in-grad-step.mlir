// RUN: llmc-opt %s --split-input-file --llmc-squares-in-grad-step="min-elements=1" | FileCheck %s
// RUN: llmc-opt %s --split-input-file --llmc-squares-in-grad-step="min-elements=1 max-elements=8" | FileCheck %s --check-prefix=SMALL
// RUN: llmc-opt %s --split-input-file --llmc-squares-in-grad-step | FileCheck %s --check-prefix=DEFAULT

// Tests that the sums of squares of the update step's norm move into the
// gradient step: each accumulation moves right after the term it adds (the
// weight gradient's matmul), the sum of squares of the accumulated value
// right after it, written into the new state <grad>.squares, which the
// update step reads in place of its own sum (min-elements=1: these
// gradients are far under the default 64 Ki). With max-elements=8 the 4x3
// gradient stays summed in the update step; the 3-element one moves.
// CHECK-LABEL: func.func @grad_step(
// CHECK-SAME: %[[W:[a-z0-9]+]]: tensor<4x3xf32> {llmc.param = "w"}
// CHECK-SAME: %[[GW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "grad.w"}
// CHECK-SAME: %[[GB:[a-z0-9]+]]: tensor<3xf32> {llmc.state = "grad.b"}
// CHECK-SAME: {llmc.state = "grad.w.squares"}
// CHECK-SAME: {llmc.state = "grad.b.squares"}
// CHECK-SAME: -> (tensor<f32> {llmc.output = "loss"}, tensor<4x3xf32> {llmc.output = "grad.w", llmc.updates = "grad.w"}, tensor<3xf32> {llmc.output = "grad.b", llmc.updates = "grad.b"}, tensor<f32> {llmc.output = "grad.w.squares", llmc.updates = "grad.w.squares"}, tensor<f32> {llmc.output = "grad.b.squares", llmc.updates = "grad.b.squares"})
// CHECK: %[[DW:.*]] = llmc.matmul
// CHECK-NEXT: %[[NW:.*]] = llmc.add %[[GW]], %[[DW]]
// CHECK-NEXT: %[[SQW:.*]] = llmc.mul %[[NW]], %[[NW]]
// CHECK-NEXT: %[[SW:.*]] = llmc.reduce_sum %[[SQW]] dims [0, 1]
// CHECK: %[[DB:.*]] = llmc.reduce_sum %{{.*}} dims [0]
// CHECK-NEXT: %[[NB:.*]] = llmc.add %[[GB]], %[[DB]]
// CHECK-NEXT: %[[SQB:.*]] = llmc.mul %[[NB]], %[[NB]]
// CHECK-NEXT: %[[SB:.*]] = llmc.reduce_sum %[[SQB]] dims [0]
// CHECK: return %{{.*}}, %[[NW]], %[[NB]], %[[SW]], %[[SB]]
// CHECK-LABEL: func.func @update_step(
// CHECK-SAME: %[[UW:[a-z0-9]+]]: tensor<4x3xf32> {llmc.state = "grad.w"}
// CHECK-SAME: %[[QW:[a-z0-9]+]]: tensor<f32> {llmc.state = "grad.w.squares"}
// CHECK-SAME: %[[QB:[a-z0-9]+]]: tensor<f32> {llmc.state = "grad.b.squares"}
// CHECK-NOT: llmc.reduce_sum
// CHECK: %[[T:.*]] = llmc.add %[[QW]], %[[QB]]
// CHECK-NEXT: llmc.sqrt %[[T]]
// SMALL-LABEL: func.func @grad_step(
// SMALL-NOT: "grad.w.squares"
// SMALL: {llmc.state = "grad.b.squares"}
// SMALL-LABEL: func.func @update_step(
// SMALL: llmc.mul %{{.*}}, %{{.*}} : tensor<4x3xf32>, tensor<4x3xf32>
// SMALL-NEXT: llmc.reduce_sum %{{.*}} dims [0, 1] : tensor<4x3xf32>
module {
  func.func @grad_step(%w: tensor<4x3xf32> {llmc.param = "w"},
                       %b: tensor<3xf32> {llmc.param = "b"},
                       %gw: tensor<4x3xf32> {llmc.state = "grad.w"},
                       %gb: tensor<3xf32> {llmc.state = "grad.b"},
                       %x: tensor<2x4xf32> {llmc.input = "x"},
                       %dy: tensor<2x3xf32> {llmc.input = "dy"})
      -> (tensor<f32> {llmc.output = "loss"},
          tensor<4x3xf32> {llmc.output = "grad.w", llmc.updates = "grad.w"},
          tensor<3xf32> {llmc.output = "grad.b", llmc.updates = "grad.b"}) {
    %dw = llmc.matmul %x, %dy {transpose_a} : tensor<2x4xf32>, tensor<2x3xf32>
    %db = llmc.reduce_sum %dy dims [0] : tensor<2x3xf32>
    %loss = llmc.reduce_sum %dy dims [0, 1] : tensor<2x3xf32>
    %nw = llmc.add %gw, %dw : tensor<4x3xf32>, tensor<4x3xf32>
    %nb = llmc.add %gb, %db : tensor<3xf32>, tensor<3xf32>
    return %loss, %nw, %nb : tensor<f32>, tensor<4x3xf32>, tensor<3xf32>
  }
  func.func @update_step(%w: tensor<4x3xf32> {llmc.param = "w"},
                         %b: tensor<3xf32> {llmc.param = "b"},
                         %gw: tensor<4x3xf32> {llmc.state = "grad.w"},
                         %gb: tensor<3xf32> {llmc.state = "grad.b"},
                         %lr: tensor<f32> {llmc.input = "lr"})
      -> (tensor<f32> {llmc.output = "grad_norm"},
          tensor<4x3xf32> {llmc.updates = "w"},
          tensor<3xf32> {llmc.updates = "b"}) {
    %sw = llmc.mul %gw, %gw : tensor<4x3xf32>, tensor<4x3xf32>
    %tw = llmc.reduce_sum %sw dims [0, 1] : tensor<4x3xf32>
    %sb = llmc.mul %gb, %gb : tensor<3xf32>, tensor<3xf32>
    %tb = llmc.reduce_sum %sb dims [0] : tensor<3xf32>
    %t = llmc.add %tw, %tb : tensor<f32>, tensor<f32>
    %norm = llmc.sqrt %t : tensor<f32>
    %dw = llmc.mul %gw, %lr : tensor<4x3xf32>, tensor<f32>
    %w2 = llmc.sub %w, %dw : tensor<4x3xf32>, tensor<4x3xf32>
    %db = llmc.mul %gb, %lr : tensor<3xf32>, tensor<f32>
    %b2 = llmc.sub %b, %db : tensor<3xf32>, tensor<3xf32>
    return %norm, %w2, %b2 : tensor<f32>, tensor<4x3xf32>, tensor<3xf32>
  }
}

// -----

// Tests what stays in the update step: a gradient squared after a change
// (loss scaling's unscaling), one that @grad_step does not accumulate with
// a single add of its state, and every gradient under pipeline
// parallelism (the runtime adds a tied copy's gradient between the steps;
// the third module).
// CHECK-LABEL: func.func @grad_step(
// CHECK-NOT: squares
// CHECK-LABEL: func.func @update_step(
// CHECK-NOT: squares
// CHECK: llmc.reduce_sum %{{.*}} dims [0]
// CHECK: llmc.reduce_sum %{{.*}} dims [0]
module {
  func.func @grad_step(%a: tensor<3xf32> {llmc.param = "a"},
                       %b: tensor<3xf32> {llmc.param = "b"},
                       %ga: tensor<3xf32> {llmc.state = "grad.a"},
                       %gb: tensor<3xf32> {llmc.state = "grad.b"},
                       %x: tensor<3xf32> {llmc.input = "x"})
      -> (tensor<f32> {llmc.output = "loss"},
          tensor<3xf32> {llmc.updates = "grad.a"},
          tensor<3xf32> {llmc.updates = "grad.b"}) {
    %loss = llmc.reduce_sum %x dims [0] : tensor<3xf32>
    %na = llmc.add %ga, %x : tensor<3xf32>, tensor<3xf32>
    %nb = llmc.mul %gb, %x : tensor<3xf32>, tensor<3xf32>
    return %loss, %na, %nb : tensor<f32>, tensor<3xf32>, tensor<3xf32>
  }
  func.func @update_step(%ga: tensor<3xf32> {llmc.state = "grad.a"},
                         %gb: tensor<3xf32> {llmc.state = "grad.b"},
                         %s: tensor<f32> {llmc.input = "inv_scale"})
      -> (tensor<f32> {llmc.output = "grad_norm"}) {
    %ua = llmc.mul %ga, %s : tensor<3xf32>, tensor<f32>
    %sa = llmc.mul %ua, %ua : tensor<3xf32>, tensor<3xf32>
    %ta = llmc.reduce_sum %sa dims [0] : tensor<3xf32>
    %sb = llmc.mul %gb, %gb : tensor<3xf32>, tensor<3xf32>
    %tb = llmc.reduce_sum %sb dims [0] : tensor<3xf32>
    %t = llmc.add %ta, %tb : tensor<f32>, tensor<f32>
    return %t : tensor<f32>
  }
}

// -----

// CHECK-LABEL: func.func @grad_step(
// CHECK-NOT: squares
// CHECK-LABEL: func.func @update_step(
// CHECK: llmc.reduce_sum
module {
  func.func @grad_step(%ga: tensor<3xf32> {llmc.state = "grad.a"},
                       %x: tensor<3xf32> {llmc.input = "x"})
      -> (tensor<3xf32> {llmc.updates = "grad.a"})
      attributes {llmc.pipeline = {stages = 2 : i64}} {
    %na = llmc.add %ga, %x : tensor<3xf32>, tensor<3xf32>
    return %na : tensor<3xf32>
  }
  func.func @update_step(%ga: tensor<3xf32> {llmc.state = "grad.a"})
      -> (tensor<f32> {llmc.output = "grad_norm"}) {
    %sa = llmc.mul %ga, %ga : tensor<3xf32>, tensor<3xf32>
    %ta = llmc.reduce_sum %sa dims [0] : tensor<3xf32>
    return %ta : tensor<f32>
  }
}

// -----

// Tests the default bounds: a gradient under 64 Ki elements (the sum costs
// less than the kernels that would take it in @grad_step) stays summed in
// the update step.
// DEFAULT-LABEL: func.func @update_step(
// DEFAULT: llmc.reduce_sum
module {
  func.func @grad_step(%ga: tensor<3xf32> {llmc.state = "grad.a"},
                       %x: tensor<3xf32> {llmc.input = "x"})
      -> (tensor<3xf32> {llmc.updates = "grad.a"}) {
    %na = llmc.add %ga, %x : tensor<3xf32>, tensor<3xf32>
    return %na : tensor<3xf32>
  }
  func.func @update_step(%ga: tensor<3xf32> {llmc.state = "grad.a"})
      -> (tensor<f32> {llmc.output = "grad_norm"}) {
    %sa = llmc.mul %ga, %ga : tensor<3xf32>, tensor<3xf32>
    %ta = llmc.reduce_sum %sa dims [0] : tensor<3xf32>
    return %ta : tensor<f32>
  }
}

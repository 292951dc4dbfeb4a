// RUN: llmc-opt %s --split-input-file --llmc-loss-scaling -verify-diagnostics
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling="window=0" 2>&1 | FileCheck %s --check-prefix=WINDOW
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling="hysteresis=0" 2>&1 | FileCheck %s --check-prefix=HYST
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling="factor=1" 2>&1 | FileCheck %s --check-prefix=FACTOR
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling="initial-scale-power=128" 2>&1 | FileCheck %s --check-prefix=POWER
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling="initial-scale-power=2.5" 2>&1 | FileCheck %s --check-prefix=POWER2
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling="initial-scale-power=4 min-scale=32" 2>&1 | FileCheck %s --check-prefix=MIN
// RUN: not llmc-opt %S/loss-scaling.mlir --llmc-optimizer --llmc-loss-scaling --llmc-loss-scaling 2>&1 | FileCheck %s --check-prefix=TWICE

// WINDOW: error: llmc-loss-scaling: window must be in [1, 2^24], got 0
// HYST: error: llmc-loss-scaling: hysteresis must be in [1, 2^24], got 0
// FACTOR: error: llmc-loss-scaling: factor must be finite and above 1, got 1.000000e+00
// POWER: error: llmc-loss-scaling: initial-scale-power must be an integer in [-126, 127], got 1.280000e+02
// POWER2: error: llmc-loss-scaling: initial-scale-power must be an integer in [-126, 127], got 2.500000e+00
// MIN: error: llmc-loss-scaling: min-scale must be positive and at most the initial scale 1.600000e+01, got 3.200000e+01
// TWICE: error: the training step already has a 'loss_scale' state: llmc-loss-scaling runs once

// Tests that the pass needs both training functions.
// expected-error @+1 {{llmc-loss-scaling needs @grad_step and @update_step: run llmc-autodiff and llmc-optimizer first}}
module {
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"},
                       %dloss: tensor<f32> {llmc.input = "dloss"})
      -> (tensor<f32>, tensor<3xf32>) {
    %loss = llmc.fill 1.0 : tensor<f32>
    return %loss, %w : tensor<f32>, tensor<3xf32>
  }
}

// -----

// Tests that the seed to scale must be there.
module {
  // expected-error @+1 {{@grad_step has no llmc.input = "dloss" argument to scale}}
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"})
      -> (tensor<f32>, tensor<3xf32>) {
    %loss = llmc.fill 1.0 : tensor<f32>
    return %loss, %w : tensor<f32>, tensor<3xf32>
  }
  func.func @update_step(%w: tensor<3xf32> {llmc.param = "w"})
      -> (tensor<f32> {llmc.output = "grad_norm"}) {
    %norm = llmc.fill 1.0 : tensor<f32>
    return %norm : tensor<f32>
  }
}

// -----

// Tests that the overflow test needs the norm.
module {
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"},
                       %dloss: tensor<f32> {llmc.input = "dloss"})
      -> (tensor<f32>, tensor<3xf32>) {
    %loss = llmc.fill 1.0 : tensor<f32>
    return %loss, %w : tensor<f32>, tensor<3xf32>
  }
  // expected-error @+1 {{@update_step has no grad_norm result to test for overflow}}
  func.func @update_step(%w: tensor<3xf32> {llmc.param = "w"})
      -> (tensor<3xf32> {llmc.updates = "w"}) {
    return %w : tensor<3xf32>
  }
}

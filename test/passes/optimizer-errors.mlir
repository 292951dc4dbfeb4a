// RUN: llmc-opt %s --split-input-file --llmc-optimizer -verify-diagnostics
// RUN: not llmc-opt %S/optimizer.mlir --llmc-optimizer="optimizer=lion" 2>&1 | FileCheck %s --check-prefix=BADOPT

// BADOPT: error: unknown optimizer 'lion' (expected adamw or sgd)

// Tests that the pass needs @grad_step.
// expected-error @+1 {{llmc-optimizer needs @grad_step: run llmc-autodiff first}}
module {
  func.func @forward(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<3xf32> {
    return %w : tensor<3xf32>
  }
}

// -----

// Tests that gradients must match their parameters.
module {
  // expected-error @+1 {{@grad_step must return the loss and one gradient per llmc.param argument; it has 1 parameters and 1 results}}
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<f32> {
    %loss = llmc.fill 1.0 : tensor<f32>
    return %loss : tensor<f32>
  }
}

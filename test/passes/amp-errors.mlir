// RUN: llmc-opt %s --split-input-file --llmc-amp -verify-diagnostics
// RUN: echo 'module {}' | not llmc-opt --llmc-amp=precision=fp8 2>&1 | FileCheck %s --check-prefix=PRECISION
// RUN: echo 'module {}' | not llmc-opt --llmc-amp=allow=llmc.sofmax 2>&1 | FileCheck %s --check-prefix=UNKNOWN
// RUN: echo 'module {}' | not llmc-opt --llmc-amp=deny=func.return 2>&1 | FileCheck %s --check-prefix=FOREIGN
// RUN: echo 'module {}' | not llmc-opt --llmc-amp=deny=llmc.cast 2>&1 | FileCheck %s --check-prefix=CAST
// RUN: echo 'module {}' | not llmc-opt --llmc-amp="allow=llmc.gelu deny=llmc.gelu" 2>&1 | FileCheck %s --check-prefix=BOTH

// PRECISION: error: llmc-amp: unknown precision 'fp8' (expected fp16 or bf16)
// UNKNOWN: error: llmc-amp: 'llmc.sofmax' in allow= is not an llmc op that a list can hold (write names like llmc.softmax)
// FOREIGN: error: llmc-amp: 'func.return' in deny= is not an llmc op that a list can hold
// CAST: error: llmc-amp: 'llmc.cast' in deny= is not an llmc op that a list can hold
// BOTH: error: llmc-amp: 'llmc.gelu' is on both the allow and the deny list

// Tests that the pass needs @forward.
// expected-error @+1 {{llmc-amp: module has no @forward function with a body}}
module {
  func.func private @forward(tensor<3xf32>) -> tensor<f32>
}

// -----

// Tests that the pass runs before autodiff.
module {
  func.func @forward(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<3xf32> {
    return %w : tensor<3xf32>
  }
  // expected-error @+1 {{llmc-amp runs before llmc-autodiff, so that the gradient step differentiates the casts; the module already has @grad_step}}
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<3xf32> {
    return %w : tensor<3xf32>
  }
}

// -----

// Tests that the pass runs before fusion.
func.func @forward(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<3xf32> {
  // expected-error @+1 {{'llmc.fusion' op llmc-amp runs before llmc-fusion}}
  %0 = llmc.fusion "neg" "pointwise" (%w) : (tensor<3xf32>) -> tensor<3xf32> {
  ^bb0(%a: tensor<3xf32>):
    %1 = llmc.neg %a : tensor<3xf32>
    llmc.yield %1 : tensor<3xf32>
  }
  return %0 : tensor<3xf32>
}

// -----

// Tests that @forward is one block, as llmc-verify-legality requires.
// expected-error @+1 {{llmc-amp: @forward must have a single block}}
func.func @forward(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<3xf32> {
  return %w : tensor<3xf32>
^unreachable:
  return %w : tensor<3xf32>
}

// RUN: llmc-opt %s --split-input-file --llmc-persistent-casts -verify-diagnostics

// Tests that the pass needs the optimizer's @update_step.
// expected-error @+1 {{llmc-persistent-casts needs @update_step: run llmc-optimizer first}}
module {
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"}) -> tensor<3xbf16> {
    %c = llmc.cast %w : tensor<3xf32> -> tensor<3xbf16>
    return %c : tensor<3xbf16>
  }
}

// -----

// Tests that one copy serves every reader: two 16-bit types are refused.
module {
  func.func @grad_step(%w: tensor<3xf32> {llmc.param = "w"}) -> (tensor<3xbf16>, tensor<3xf16>) {
    %b = llmc.cast %w : tensor<3xf32> -> tensor<3xbf16>
    // expected-error @+1 {{parameter 'w' is cast to both 'tensor<3xbf16>' and 'tensor<3xf16>'; llmc-persistent-casts keeps one copy}}
    %h = llmc.cast %w : tensor<3xf32> -> tensor<3xf16>
    return %b, %h : tensor<3xbf16>, tensor<3xf16>
  }
  func.func @update_step(%w: tensor<3xf32> {llmc.param = "w"}) -> (tensor<3xf32> {llmc.updates = "w"}) {
    return %w : tensor<3xf32>
  }
}

// -----

// Tests that the pass runs once.
// expected-error @+1 {{the module already has @cast_weights}}
module {
  func.func @update_step(%w: tensor<3xf32> {llmc.param = "w"}) -> (tensor<3xf32> {llmc.updates = "w"}) {
    return %w : tensor<3xf32>
  }
  func.func @cast_weights() {
    return
  }
}

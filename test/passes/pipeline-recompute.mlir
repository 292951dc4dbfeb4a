// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1' --llmc-autodiff --llmc-pipeline-recompute | FileCheck %s --check-prefix=LAST
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=0' --llmc-autodiff --llmc-pipeline-recompute | FileCheck %s --check-prefix=FIRST
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | not llmc-opt --llmc-pipeline-recompute 2>&1 | FileCheck %s --check-prefix=ORDER

// The last stage's @grad_step recomputes the stage from the argument
// stage_input (its @forward keeps the receive and returns the activation
// under that name); only the backward's send of the gradient is left.
// LAST-LABEL: func.func @forward(
// LAST-SAME: {llmc.output = "stage_input"}
// LAST-NEXT: llmc.pipeline_recv from stage 0 of 2 : tensor<1x8x64xf32>
// LAST-LABEL: func.func @grad_step(
// LAST-SAME: %[[IN:[^:]*]]: tensor<1x8x64xf32> {llmc.input = "stage_input"}
// LAST-NOT: llmc.pipeline_recv
// LAST: llmc.layer_norm %[[IN]]
// LAST: llmc.pipeline_send %{{.*}} to stage 0 of 2 gradient
// LAST-NOT: llmc.pipeline_recv

// The first stage's forward send is dropped (its placeholder loss a zero
// fill); the receive of the gradient stays.
// FIRST-LABEL: func.func @grad_step(
// FIRST-NOT: stage_input
// FIRST-NOT: llmc.pipeline_send
// FIRST: %[[Z:.*]] = llmc.fill 0.0{{.*}} : tensor<f32>
// FIRST: llmc.pipeline_recv from stage 1 of 2 gradient : tensor<1x8x64xf32>
// FIRST-NOT: llmc.pipeline_send
// FIRST: return %[[Z]],

// ORDER: llmc-pipeline-recompute runs after llmc-autodiff (it rewrites @grad_step)

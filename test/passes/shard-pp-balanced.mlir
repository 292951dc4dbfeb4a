// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-5-blocks.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=0' | FileCheck %s --check-prefix=FIRST
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-5-blocks.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1' | FileCheck %s --check-prefix=LAST
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-5-blocks.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1 stage-blocks=0,3' | FileCheck %s --check-prefix=PINNED
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-5-blocks.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=3 stage=1' | FileCheck %s --check-prefix=MIDDLE
// RUN: sed 's/vocab_size: 4096/vocab_size: 32/' %llmc_src/test/passes/Inputs/gpt-5-blocks.yaml > %t.yaml
// RUN: llmc emit-model %t.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1' | FileCheck %s --check-prefix=SMALL

// The cut balanced by the planner's FLOPs per token (ir/PipelineStages.h):
// a block of this GPT costs 6 * 3280 + 12 * 16 * 8 = 21,216, the tied
// classifier 6 * 4096 * 16 = 393,216. At pp=2, 3 | 2 would make the last
// stage 2 * 21,216 + 393,216 = 435,648; 4 | 1 makes it 414,432 and stage 0
// 84,864, so stage 0 holds h.0-h.3 and stage 1 h.4, ln_f and the
// classifier (wte's second copy).
// FIRST-LABEL: func.func @forward(
// FIRST-SAME: {llmc.param = "wte"}
// FIRST-SAME: {llmc.param = "h.0.ln_1.weight"}
// FIRST-SAME: {llmc.param = "h.3.mlp.c_proj.bias"}
// FIRST-NOT: h.4.
// FIRST-NOT: ln_f
// FIRST-SAME: -> tensor<f32>
// FIRST: llmc.embedding
// FIRST: llmc.pipeline_send %{{.*}} to stage 1 of 2 : tensor<1x8x16xf32> -> tensor<f32>
// FIRST-NOT: llmc.cross_entropy

// LAST-LABEL: func.func @forward(
// LAST-SAME: {llmc.param = "wte", llmc.pp_tied}
// LAST-NOT: h.3.
// LAST-SAME: {llmc.param = "h.4.ln_1.weight"}
// LAST-SAME: {llmc.param = "h.4.mlp.c_proj.bias"}
// LAST-SAME: {llmc.param = "ln_f.weight"}
// LAST: llmc.pipeline_recv from stage 0 of 2 : tensor<1x8x16xf32>
// LAST: llmc.cross_entropy

// stage-blocks pins a cut: the even-count 3 | 2 puts h.3 on stage 1.
// PINNED-LABEL: func.func @forward(
// PINNED-NOT: h.2.
// PINNED-SAME: {llmc.param = "h.3.ln_1.weight"}
// PINNED-SAME: {llmc.param = "h.4.ln_1.weight"}
// PINNED-SAME: {llmc.param = "ln_f.weight"}

// At pp=3 the last stage (h.4 and the classifier) is the slowest whatever
// the others hold; of the cuts as slow, 2 | 2 | 1 is the most even.
// MIDDLE-LABEL: func.func @forward(
// MIDDLE-NOT: h.1.
// MIDDLE-SAME: {llmc.param = "h.2.ln_1.weight"}
// MIDDLE-SAME: {llmc.param = "h.3.mlp.c_proj.bias"}
// MIDDLE-NOT: h.4.
// MIDDLE-SAME: -> (tensor<f32>, tensor<1x8x16xf32> {llmc.output = "stage_input"})
// MIDDLE-SAME: llmc.pipeline = {stage = 1 : i64, stages = 3 : i64}

// With a vocabulary of 32 the classifier (3,072) weighs less than a block:
// 3 | 2, stage 1 from h.3.
// SMALL-LABEL: func.func @forward(
// SMALL-NOT: h.2.
// SMALL-SAME: {llmc.param = "h.3.ln_1.weight"}
// SMALL-SAME: {llmc.param = "h.4.ln_1.weight"}

// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=0' | FileCheck %s --check-prefix=FIRST
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1' | FileCheck %s --check-prefix=LAST
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=0' --llmc-autodiff | FileCheck %s --check-prefix=GRAD0
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1' --llmc-autodiff | FileCheck %s --check-prefix=GRAD1
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-4-blocks.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=4 stage=2' | FileCheck %s --check-prefix=MIDDLE
// RUN: llmc emit-model %llmc_src/test/passes/Inputs/gpt-4-blocks.yaml --batch 1 | llmc-opt '--llmc-pipeline-parallel=pp=2 stage=1' | FileCheck %s --check-prefix=TWO
// RUN: llmc emit-model %llmc_src/test/dist/Inputs/llama-tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-tensor-parallel=tp=2 rank=1' '--llmc-pipeline-parallel=pp=2 stage=1' | FileCheck %s --check-prefix=LLAMA
// RUN: llmc emit-model %llmc_src/examples/tiny.yaml --batch 1 --seq-len 8 | llmc-opt '--llmc-pipeline-parallel=pp=1' | FileCheck %s --check-prefix=ONE

// Stage 0 of the tiny GPT (2 blocks) on 2 stages: the embeddings and h.0,
// no other parameter; the residual after h.0 goes to stage 1, and the
// send's zero scalar is the stage's loss.
// FIRST-LABEL: func.func @forward(
// FIRST-SAME: {llmc.param = "wte"}
// FIRST-NOT: pp_tied
// FIRST-SAME: {llmc.param = "wpe"}
// FIRST-SAME: {llmc.param = "h.0.ln_1.weight"}
// FIRST-SAME: {llmc.param = "h.0.mlp.c_proj.bias"}
// FIRST-NOT: h.1.
// FIRST-NOT: ln_f
// FIRST-SAME: -> tensor<f32>
// FIRST-SAME: llmc.pipeline = {stage = 0 : i64, stages = 2 : i64}
// FIRST-NOT: pipeline_recv
// FIRST: llmc.embedding
// FIRST: %[[R1:.*]] = llmc.add %[[R0:.*]], %{{.*}} : tensor<1x8x64xf32>, tensor<1x8x64xf32>
// FIRST: %[[R2:.*]] = llmc.add %[[R1]], %{{.*}} : tensor<1x8x64xf32>, tensor<1x8x64xf32>
// FIRST-NEXT: %[[Z:.*]] = llmc.pipeline_send %[[R2]] to stage 1 of 2 : tensor<1x8x64xf32> -> tensor<f32>
// FIRST-NEXT: return %[[Z]] : tensor<f32>
// FIRST-NOT: llmc.cross_entropy

// Stage 1: h.1, the final norm, the tied classifier (wte again, marked
// llmc.pp_tied: its gradient is summed with stage 0's and counted once in
// the norm) and the loss; it starts with the residual from stage 0 and
// returns what @forward returned, then the received residual (stashed by
// 1F1B for the backward).
// LAST-LABEL: func.func @forward(
// LAST-SAME: %arg0: tensor<256x64xf32> {llmc.param = "wte", llmc.pp_tied}
// LAST-NOT: wpe
// LAST-NOT: h.0.
// LAST-SAME: {llmc.param = "h.1.ln_1.weight"}
// LAST-SAME: {llmc.param = "ln_f.bias"}
// LAST-SAME: {llmc.input = "tokens"}
// LAST-SAME: {llmc.input = "targets"}
// LAST-SAME: -> (tensor<f32>, tensor<1x8x256xf32>, tensor<1x8x64xf32> {llmc.output = "stage_input"})
// LAST-SAME: llmc.pipeline = {stage = 1 : i64, stages = 2 : i64}
// LAST-NEXT: %[[H:.*]] = llmc.pipeline_recv from stage 0 of 2 : tensor<1x8x64xf32>
// LAST-NEXT: llmc.layer_norm %[[H]], %arg1, %arg2
// LAST-NOT: llmc.embedding
// LAST: llmc.add %[[H]], %{{.*}} : tensor<1x8x64xf32>, tensor<1x8x64xf32>
// LAST: %[[LOGITS:.*]] = llmc.matmul %{{.*}}, %arg0 {transpose_b}
// LAST: %[[LOSS:.*]], %{{.*}} = llmc.cross_entropy %[[LOGITS]]
// LAST-NOT: pipeline_send
// LAST: return %[[LOSS]], %[[LOGITS]], %[[H]]

// Autodiff makes the backward's transfers from the VJPs: stage 0 receives
// the residual's gradient right after its send (dloss, the placeholder's
// gradient, is not read), and stage 1 sends its input's gradient back.
// GRAD0-LABEL: func.func @grad_step(
// GRAD0: %[[Z:.*]] = llmc.pipeline_send %{{.*}} to stage 1 of 2 : tensor<1x8x64xf32> -> tensor<f32>
// GRAD0-NEXT: %[[G:.*]] = llmc.pipeline_recv from stage 1 of 2 gradient : tensor<1x8x64xf32>
// GRAD0-NOT: pipeline_send
// GRAD0: llmc.embedding_grad
// GRAD0: return %[[Z]],
// GRAD1-LABEL: func.func @grad_step(
// GRAD1-NEXT: %[[H:.*]] = llmc.pipeline_recv from stage 0 of 2 : tensor<1x8x64xf32>
// GRAD1-NOT: pipeline_recv
// GRAD1: llmc.cross_entropy_grad
// GRAD1: %[[DX:[^,]*]], %{{.*}}, %{{.*}} = llmc.layer_norm_grad %{{.*}}, %[[H]], %arg1
// GRAD1: %[[DH:.*]] = llmc.add %{{.*}}, %[[DX]] : tensor<1x8x64xf32>
// GRAD1-NEXT: llmc.pipeline_send %[[DH]] to stage 0 of 2 gradient : tensor<1x8x64xf32> -> tensor<f32>
// GRAD1-NOT: llmc.embedding_grad
// GRAD1: return

// A middle stage of 4 (one block each): a receive at the start, a send at
// the end, only h.2's parameters.
// MIDDLE-LABEL: func.func @forward(
// MIDDLE-SAME: %arg0: tensor<16xf32> {llmc.param = "h.2.ln_1.weight"}
// MIDDLE-NOT: h.1.
// MIDDLE-NOT: h.3.
// MIDDLE-NOT: wte
// MIDDLE-SAME: {llmc.param = "h.2.mlp.c_proj.bias"}
// MIDDLE-SAME: -> (tensor<f32>, tensor<1x8x16xf32> {llmc.output = "stage_input"})
// MIDDLE-NEXT: %[[H:.*]] = llmc.pipeline_recv from stage 1 of 4 : tensor<1x8x16xf32>
// MIDDLE: %[[Z:.*]] = llmc.pipeline_send %{{.*}} to stage 3 of 4 : tensor<1x8x16xf32> -> tensor<f32>
// MIDDLE-NEXT: return %[[Z]], %[[H]] : tensor<f32>, tensor<1x8x16xf32>

// Two blocks a stage: the last stage holds h.2 and h.3.
// TWO-LABEL: func.func @forward(
// TWO-SAME: {llmc.param = "wte", llmc.pp_tied}
// TWO-NOT: h.1.
// TWO-SAME: {llmc.param = "h.2.ln_1.weight"}
// TWO-SAME: {llmc.param = "h.3.ln_1.weight"}
// TWO-SAME: {llmc.param = "ln_f.weight"}
// TWO-NEXT: llmc.pipeline_recv from stage 0 of 2 : tensor<1x8x16xf32>

// With tensor parallelism first (tp rank 1 of 2, Llama-style, untied
// lm_head): the stage holds the rank's shares of h.1 and of lm_head (its
// block of the vocabulary), and the tp collectives stay inside the stage.
// LLAMA-LABEL: func.func @forward(
// LLAMA-NOT: tok_embeddings
// LLAMA-NOT: "wte"
// LLAMA-NOT: h.0.
// LLAMA-SAME: tensor<72x48xf32> {llmc.param = "h.1.attn.c_attn.weight", llmc.tp_shard = {dim = 0 : i64, groups = 3 : i64, size = 2 : i64}}
// LLAMA-SAME: tensor<128x48xf32> {llmc.param = "lm_head.weight", llmc.tp_shard = {dim = 0 : i64, groups = 1 : i64, size = 2 : i64}}
// LLAMA-NEXT: %[[H:.*]] = llmc.pipeline_recv from stage 0 of 2 : tensor<1x8x48xf32>
// LLAMA-NEXT: llmc.rms_norm %[[H]]
// LLAMA: llmc.copy_to_axis
// LLAMA: llmc.vocab_shard_max
// LLAMA-NOT: pipeline_send

// pp=1 changes nothing.
// ONE-LABEL: func.func @forward(
// ONE-SAME: "h.0.ln_1.weight"
// ONE-SAME: "h.1.ln_1.weight"
// ONE-NOT: llmc.pipeline

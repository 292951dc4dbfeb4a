// The training config: YAML, flag overrides, the help table and every
// error message.
#include "frontend/TrainConfig.h"

#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

using namespace mlir::llmc;
using ::testing::EndsWith;
using ::testing::HasSubstr;

namespace {
const char *kConfig = R"(model:
  n_layer: 2
  n_head: 4
  n_embd: 64
  seq_len: 64
  vocab_size: 256
optimizer:
  name: adamw
  lr: 1e-3
  betas: [0.9, 0.99]
  weight_decay: 0.05
  grad_clip: 0.5
schedule:
  name: cosine
  warmup_steps: 10
  min_lr: 1e-4
global_batch_size: 16
micro_batch_size: 4
seq_len: 32
max_steps: 200
data:
  train: [a.txt, "shards/*.bin"]
  val_fraction: 0.1
eval_interval: 50
seed: 7
out: runs/x
)";

llvm::Expected<TrainingConfig> parse(const std::string &text,
                                     std::vector<std::string> flags = {}) {
  return parseTrainingConfig(text, "t.yaml", "", flags);
}

std::string errorOf(const std::string &text,
                    std::vector<std::string> flags = {}) {
  llvm::Expected<TrainingConfig> config = parse(text, flags);
  if (config)
    return "(no error)";
  return llvm::toString(config.takeError());
}

std::string with(const std::string &replace, const std::string &by) {
  std::string text = kConfig;
  size_t at = text.find(replace);
  EXPECT_NE(at, std::string::npos) << replace;
  return text.replace(at, replace.size(), by);
}
} // namespace

TEST(TrainConfigTest, ParsesEveryPart) {
  llvm::Expected<TrainingConfig> c = parse(kConfig);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->model.nLayer, 2);
  EXPECT_EQ(c->model.vocabSize, 256);
  EXPECT_EQ(c->optimizer.kind, ::llmc::OptimizerConfig::Kind::AdamW);
  EXPECT_DOUBLE_EQ(c->schedule.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c->optimizer.beta2, 0.99);
  EXPECT_DOUBLE_EQ(c->optimizer.weightDecay, 0.05);
  EXPECT_DOUBLE_EQ(c->optimizer.maxGradNorm, 0.5);
  EXPECT_EQ(c->schedule.kind, ::llmc::LrSchedule::Kind::Cosine);
  EXPECT_EQ(c->schedule.warmupSteps, 10);
  EXPECT_EQ(c->schedule.decaySteps, 200); // defaults to max_steps
  EXPECT_EQ(c->globalBatchSize, 16);
  EXPECT_EQ(c->microBatchSize, 4);
  EXPECT_EQ(c->seqLen, 32);
  EXPECT_EQ(c->maxSteps, 200);
  // Paths become absolute (relative ones against the config's directory,
  // here the working directory).
  ASSERT_EQ(c->data.train.size(), 2u);
  EXPECT_TRUE(llvm::sys::path::is_absolute(c->data.train[0]));
  EXPECT_THAT(c->data.train[0], EndsWith("/a.txt"));
  EXPECT_THAT(c->data.train[1], EndsWith("/shards/*.bin"));
  EXPECT_DOUBLE_EQ(c->data.valFraction, 0.1);
  EXPECT_EQ(c->data.tokenizer, "byte");
  EXPECT_EQ(c->seed, 7u);
  EXPECT_EQ(c->out, "runs/x");
}

TEST(TrainConfigTest, FlagsOverrideTheFile) {
  llvm::Expected<TrainingConfig> c =
      parse(kConfig, {"--lr", "3e-4", "--max-steps=50", "--min-lr", "1e-5",
                      "--warmup-steps", "5", "--optimizer", "sgd",
                      "--momentum", "0.8", "--nesterov", "--train",
                      "b.txt,c.txt", "--schedule", "linear", "--out", "o",
                      "--batch-size-rampup-start", "4",
                      "--batch-size-rampup-increment", "4",
                      "--batch-size-rampup-samples", "100", "--seed", "9",
                      "--optimizer-eps", "1e-6"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_DOUBLE_EQ(c->schedule.lr, 3e-4);
  EXPECT_EQ(c->maxSteps, 50);
  EXPECT_EQ(c->schedule.decaySteps, 50);
  EXPECT_DOUBLE_EQ(c->schedule.minLr, 1e-5);
  EXPECT_EQ(c->schedule.warmupSteps, 5);
  EXPECT_EQ(c->optimizer.kind, ::llmc::OptimizerConfig::Kind::SGD);
  EXPECT_DOUBLE_EQ(c->optimizer.momentum, 0.8);
  EXPECT_TRUE(c->optimizer.nesterov);
  EXPECT_DOUBLE_EQ(c->optimizer.epsilon, 1e-6);
  ASSERT_EQ(c->data.train.size(), 2u);
  EXPECT_THAT(c->data.train[0], EndsWith("/b.txt"));
  EXPECT_THAT(c->data.train[1], EndsWith("/c.txt"));
  EXPECT_EQ(c->schedule.kind, ::llmc::LrSchedule::Kind::Linear);
  EXPECT_EQ(c->out, "o");
  EXPECT_EQ(c->batchRampup.start, 4);
  EXPECT_EQ(c->batchRampup.samples, 100);
  EXPECT_EQ(c->seed, 9u);
}

// What a user means on the command line wins over what the file says:
// validation files over its val_fraction, a run shorter than its warmup
// over the default decay (which would end before the warmup), inline model
// keys over its model.
TEST(TrainConfigTest, FlagsWinOverTheFilesChoices) {
  llvm::Expected<TrainingConfig> c = parse(kConfig, {"--val", "v.txt"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  ASSERT_EQ(c->data.val.size(), 1u);
  EXPECT_EQ(c->data.valFraction, 0);

  c = parse(with("  val_fraction: 0.1", "  val: [v.txt]"),
            {"--val-fraction", "0.05"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_TRUE(c->data.val.empty());
  EXPECT_DOUBLE_EQ(c->data.valFraction, 0.05);

  c = parse(kConfig, {"--max-steps", "4"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->maxSteps, 4);
  EXPECT_EQ(c->schedule.warmupSteps, 10);
  EXPECT_EQ(c->schedule.decaySteps, 10);

  c = parse(kConfig,
            {"--model", "{preset: gpt2, n_layer: 2, n_embd: 64, n_head: 2}"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->model.nLayer, 2);
  EXPECT_EQ(c->model.nEmbd, 64);
  EXPECT_EQ(c->model.vocabSize, 50257);
  EXPECT_EQ(c->modelSource, "(inline)");
}

// An inline model in the file, in block and in flow style (the flow
// mapping's braces go to the model parser with it).
TEST(TrainConfigTest, InlineModelInTheFile) {
  for (const char *model :
       {"model:\n  preset: gpt2\n  n_layer: 2\n  n_embd: 64\n  n_head: 2\n",
        "model: {preset: gpt2, n_layer: 2, n_embd: 64, n_head: 2}\n",
        "model: {  n_layer: 2, n_embd: 64, n_head: 2, vocab_size: 256, "
        "seq_len: 64}\n"}) {
    llvm::Expected<TrainingConfig> c =
        parse(std::string(model) + "max_steps: 3\ndata: {train: [x.txt]}\n");
    ASSERT_TRUE(bool(c)) << model << llvm::toString(c.takeError());
    EXPECT_EQ(c->model.nLayer, 2);
    EXPECT_EQ(c->model.nEmbd, 64);
    EXPECT_EQ(c->modelSource, "(inline)");
  }
}

TEST(TrainConfigTest, MaxTokensBecomesSteps) {
  llvm::Expected<TrainingConfig> c =
      parse(with("max_steps: 200", "max_tokens: 1e5"));
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  // 16 x 32 = 512 tokens a step.
  EXPECT_EQ(c->maxSteps, (100000 + 511) / 512);
}

TEST(TrainConfigTest, ScalarSectionsAndPresets) {
  llvm::Expected<TrainingConfig> c = parse(
      "model: gpt2\noptimizer: sgd\nschedule: constant\nmax_steps: 3\n"
      "data: {train: [x.txt]}\nseq_len: 128\n");
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->model.nLayer, 12);
  EXPECT_EQ(c->optimizer.kind, ::llmc::OptimizerConfig::Kind::SGD);
  EXPECT_EQ(c->schedule.kind, ::llmc::LrSchedule::Kind::Constant);
  EXPECT_EQ(c->globalBatchSize, c->microBatchSize);
  EXPECT_EQ(c->out, "runs/t");
}

TEST(TrainConfigTest, DropoutOverridesTheModel) {
  llvm::Expected<TrainingConfig> c = parse(kConfig, {"--dropout", "0.1"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_DOUBLE_EQ(c->model.dropout, 0.1);
}

TEST(TrainConfigTest, PrintedConfigReadsBack) {
  llvm::Expected<TrainingConfig> c = parse(kConfig, {"--dropout", "0.1"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  std::string text;
  llvm::raw_string_ostream os(text);
  printTrainingConfig(*c, os);
  llvm::Expected<TrainingConfig> back = parse(text);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError()) << "\n" << text;
  EXPECT_EQ(resumeSections(*c), resumeSections(*back));
  EXPECT_EQ(back->maxSteps, c->maxSteps);
  EXPECT_EQ(back->evalInterval, c->evalInterval);
}

TEST(TrainConfigTest, MixedPrecisionAndRematReadBack) {
  llvm::Expected<TrainingConfig> c =
      parse(kConfig, {"--precision", "fp16", "--amp-deny", "llmc.matmul",
                      "--amp-allow", "llmc.softmax,llmc.layer_norm",
                      "--loss-scale-initial-scale-power", "12",
                      "--loss-scale-window", "50", "--loss-scale-hysteresis",
                      "1", "--loss-scale-min-scale", "0.25", "--remat",
                      "budget", "--remat-budget", "3MiB"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  ::llmc::TrainingStepOptions options = c->stepOptions();
  EXPECT_EQ(options.precision.kind, ::llmc::PrecisionConfig::Kind::FP16);
  EXPECT_EQ(options.precision.deny, std::vector<std::string>{"llmc.matmul"});
  EXPECT_EQ(options.precision.allow,
            (std::vector<std::string>{"llmc.softmax", "llmc.layer_norm"}));
  EXPECT_EQ(options.lossScale.initialScalePower, 12);
  EXPECT_EQ(options.lossScale.window, 50);
  EXPECT_EQ(options.lossScale.hysteresis, 1);
  EXPECT_EQ(options.lossScale.minScale, 0.25);
  EXPECT_EQ(options.remat.policy, ::llmc::RematConfig::Policy::Budget);
  EXPECT_EQ(options.remat.budgetBytes, 3 << 20);

  std::string text;
  llvm::raw_string_ostream os(text);
  printTrainingConfig(*c, os);
  llvm::Expected<TrainingConfig> back = parse(text);
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError()) << "\n" << text;
  EXPECT_EQ(resumeSections(*c), resumeSections(*back));
  EXPECT_EQ(back->remat.budgetBytes, c->remat.budgetBytes);
  EXPECT_EQ(back->lossScale.window, 50);

  // Another precision is another run; another remat policy is not.
  llvm::Expected<TrainingConfig> bf16 = parse(kConfig, {"--precision", "bf16"});
  llvm::Expected<TrainingConfig> full = parse(kConfig, {"--remat", "full"});
  llvm::Expected<TrainingConfig> fp32 = parse(kConfig);
  ASSERT_TRUE(bf16 && full && fp32);
  EXPECT_NE(resumeSections(*bf16)["precision"],
            resumeSections(*fp32)["precision"]);
  EXPECT_EQ(resumeSections(*full), resumeSections(*fp32));
}

TEST(TrainConfigTest, ResumeSectionsIgnoreStepsAndOutput) {
  llvm::Expected<TrainingConfig> a = parse(kConfig);
  llvm::Expected<TrainingConfig> b =
      parse(kConfig, {"--max-steps", "400", "--out", "elsewhere",
                      "--eval-interval", "7", "--checkpoint-interval", "3"});
  llvm::Expected<TrainingConfig> c = parse(kConfig, {"--lr", "2e-3"});
  ASSERT_TRUE(a && b && c);
  EXPECT_EQ(resumeSections(*a), resumeSections(*b));
  EXPECT_NE(resumeSections(*a)["optimizer"], resumeSections(*c)["optimizer"]);
  EXPECT_EQ(resumeSections(*a)["model"], resumeSections(*c)["model"]);
}

TEST(TrainConfigTest, HelpListsEveryKeyAndItsFlag) {
  std::string help;
  llvm::raw_string_ostream os(help);
  printTrainingConfigHelp(os);
  for (const char *expected :
       {"--lr X", "--min-lr X", "--warmup-steps N", "--decay-steps N",
        "--optimizer adamw|sgd", "--schedule", "--betas", "--grad-clip",
        "--global-batch-size N", "--micro-batch-size N",
        "--batch-size-rampup-start N", "--seq-len-warmup-steps N",
        "--max-steps N", "--max-tokens N", "--train FILE", "--val FILE",
        "--val-fraction X", "--tokenizer", "--eval-interval N",
        "--eval-steps N", "--sample-tokens N", "--checkpoint-interval N",
        "--keep-checkpoints K", "--seed N", "--precision fp32|fp16|bf16",
        "--amp-allow OP,...", "--loss-scale-window N", "--remat none|full",
        "--remat-budget SIZE", "--dropout X",
        "--threads N", "--out DIR", "--init-from FILE", "optimizer.lr",
        "schedule.min_lr", "data.train", "batch_size_rampup.samples"})
    EXPECT_THAT(help, HasSubstr(expected));
  // Every flag the help shows is accepted.
  EXPECT_TRUE(isTrainingConfigFlag("lr"));
  EXPECT_TRUE(isTrainingConfigFlag("optimizer-lr"));
  EXPECT_TRUE(isTrainingConfigFlag("max-steps=3"));
  EXPECT_FALSE(isTrainingConfigFlag("resume"));
}

TEST(TrainConfigTest, Errors) {
  struct Case {
    std::string text;
    std::vector<std::string> flags;
    std::string expected;
  };
  std::vector<Case> cases = {
      {with("  lr: 1e-3", "  lrr: 1e-3"), {},
       "t.yaml:9:3: error: optimizer: unknown key 'lrr' (did you mean 'lr'?)"},
      {with("max_steps: 200", "max_step: 200"), {},
       "t.yaml:20:1: error: unknown key 'max_step' (did you mean "
       "'max_steps'?)"},
      {with("lr: 1e-3", "lr: fast"), {},
       "t.yaml:9:7: error: optimizer.lr: expected a number, got 'fast'"},
      {kConfig + std::string("precision: fp64\n"), {},
       "unknown precision 'fp64'; expected fp32, fp16 or bf16"},
      {kConfig, {"--amp-allow", "llmc.softmax"},
       "--amp-allow: the AMP lists need precision fp16 or bf16"},
      {kConfig, {"--precision", "bf16", "--amp-deny", "softmax"},
       "--amp-deny: 'softmax' is not an llmc op name (e.g. llmc.softmax)"},
      {kConfig, {"--precision", "bf16", "--loss-scale-window", "100"},
       "--loss-scale-window: loss scaling is for precision fp16 only"},
      {kConfig, {"--precision", "fp16", "--loss-scale-min-scale", "0"},
       "--loss-scale-min-scale: 0 is out of range"},
      {kConfig, {"--precision", "fp16", "--loss-scale-min-scale", "1024",
                 "--loss-scale-initial-scale-power", "8"},
       "--loss-scale-min-scale: 1024 is above the initial scale 2^8"},
      {kConfig, {"--remat", "some"},
       "--remat: unknown remat policy 'some'; expected none, full, selective "
       "or budget"},
      {kConfig, {"--remat", "budget"},
       "--remat: the budget policy needs remat_budget"},
      {kConfig, {"--remat", "full", "--remat-budget", "1GiB"},
       "--remat-budget: needs remat: budget"},
      {kConfig, {"--remat", "budget", "--remat-budget", "12 parsecs"},
       "--remat-budget: expected a positive size such as 512MiB"},
      {kConfig, {"--lrr", "1"}, "unknown option '--lrr' (did you mean '--lr'?)"},
      {kConfig, {"--max-steps"}, "--max-steps: missing value (N)"},
      {kConfig, {"--max-steps", "-3"},
       "--max-steps: expected a positive integer, got '-3'"},
      {kConfig, {"--max-steps", "0"}, "--max-steps: expected a positive integer, got '0'"},
      {kConfig, {"--global-batch-size", "10"},
       "--global-batch-size: 10 is not a multiple of micro_batch_size (4)"},
      {kConfig, {"--max-tokens", "1000"},
       "--max-tokens: give max_steps or max_tokens, not both"},
      {with("max_steps: 200\n", ""), {},
       "t.yaml: error: max_steps: missing: max_steps or max_tokens"},
      {kConfig, {"--min-lr", "0.1"}, "--min-lr: 0.1 is above lr (0.001)"},
      {kConfig, {"--seq-len", "65"},
       "--seq-len: 65 is longer than the model's seq_len (64)"},
      {kConfig, {"--betas", "0.9"}, "--betas: expected two numbers"},
      {kConfig, {"--betas", "0.9,1.5"}, "1.5 is out of range; expected a value in [0, 1)"},
      {kConfig, {"--dropout", "1"}, "--dropout: 1 is out of range"},
      {kConfig, {"--optimizer", "lamb"},
       "--optimizer: unknown optimizer 'lamb'; expected adamw or sgd"},
      {kConfig, {"--schedule", "cosine_restarts"},
       "--schedule: unknown schedule 'cosine_restarts'"},
      {kConfig, {"--nesterov", "maybe"}, "--nesterov: expected true or false"},
      {kConfig, {"--decay-steps", "5"}, "--decay-steps: 5 is below warmup_steps (10)"},
      {kConfig, {"--batch-size-rampup-start", "4"},
       "batch_size_rampup.increment: missing"},
      {kConfig,
       {"--batch-size-rampup-start", "6", "--batch-size-rampup-increment", "2"},
       "must be multiples of micro_batch_size (4)"},
      {kConfig,
       {"--batch-size-rampup-start", "4", "--batch-size-rampup-increment", "8"},
       "global_batch_size - start = 12 is not a multiple of the increment (8)"},
      {kConfig, {"--seq-len-warmup-steps", "10"}, "seq_len_warmup.start: missing"},
      {kConfig, {"--seq-len-warmup-steps", "10", "--seq-len-warmup-start", "40"},
       "--seq-len-warmup-start: 40 is longer than seq_len (32)"},
      {with("  val_fraction: 0.1", "  val_fraction: 0.1\n  val: [v.txt]"),
       {},
       "give val files or val_fraction, not both"},
      {kConfig, {"--val", "v.txt", "--val-fraction", "0.2"},
       "give val files or val_fraction, not both"},
      {kConfig, {"--model", "gpt5"},
       "--model: 'gpt5' is neither a model file (.yaml, .mlir), inline keys "
       "({n_layer: 2, ...}) nor a preset; did you mean 'gpt2'? presets: "
       "gpt2,"},
      {kConfig, {"--model", "{n_layer: 2, n_hed: 4}"},
       "--model:1:14: error: unknown key 'n_hed' (did you mean 'n_head'?)"},
      {kConfig, {"--max-steps", "5", "--decay-steps", "5"},
       "--decay-steps: 5 is below warmup_steps (10)"},
      {kConfig, {"--progress", "fancy"},
       "--progress: unknown progress display 'fancy'; expected auto, bar or "
       "lines"},
      {kConfig, {"--model", "missing/model.yaml"},
       "missing/model.yaml'"},
      {kConfig, {"--init-from", "missing.bin"}, "--init-from: no such file '"},
      {with("  n_embd: 64", "  n_embd: 70"), {},
       "t.yaml:4:11: error: n_embd: 70 is not divisible by n_head (4)"},
      {with("data:\n  train: [a.txt, \"shards/*.bin\"]\n  val_fraction: 0.1\n",
            "data: {val_fraction: 0.1}\n"),
       {},
       "data.train: missing: the training data files"},
      {with("optimizer:\n  name: adamw\n  lr: 1e-3\n  betas: [0.9, 0.99]\n"
            "  weight_decay: 0.05\n  grad_clip: 0.5\n",
            "optimizer: [1]\n"),
       {},
       "optimizer: expected a mapping, got a sequence"},
      {kConfig + std::string("seed: 8\n"), {},
       "t.yaml:27:1: error: seed: duplicate key (first given on line 25)"},
      {"model: [gpt2\n", {}, "t.yaml:"},
      {"- 1\n", {}, "expected a mapping of training config keys"},
      {with("  train: [a.txt, \"shards/*.bin\"]", "  train: [[a]]"), {},
       "data.train: expected a list of scalars, got a sequence in it"},
      {kConfig, {"stray"}, "unexpected argument 'stray'"},
  };
  for (const Case &c : cases)
    EXPECT_THAT(errorOf(c.text, c.flags), HasSubstr(c.expected))
        << "flags: " << (c.flags.empty() ? "" : c.flags[0]) << "\n"
        << c.text;
}

TEST(TrainConfigTest, DataBlends) {
  // One source: a pattern or a list of them, as before.
  llvm::Expected<TrainingConfig> one = parse(kConfig);
  ASSERT_TRUE(bool(one)) << llvm::toString(one.takeError());
  EXPECT_TRUE(one->data.blend.empty());
  EXPECT_EQ(one->data.shuffleWindows, ::llmc::kDefaultShuffleWindows);
  // Weighted sources: path a pattern or a list, name defaulting to the first
  // path as written, weight to 1.
  std::string blend = with(
      "  train: [a.txt, \"shards/*.bin\"]",
      "  train:\n"
      "    - {path: \"web/*.bin\", weight: 0.7}\n"
      "    - {path: [code/a.tok, code/b.tok], weight: 0.3, name: code}\n"
      "    - path: books.txt\n"
      "  shuffle_windows: 4096");
  llvm::Expected<TrainingConfig> c = parse(blend);
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_TRUE(c->data.train.empty());
  ASSERT_EQ(c->data.blend.size(), 3u);
  EXPECT_EQ(c->data.blend[0].name, "web/*.bin");
  EXPECT_DOUBLE_EQ(c->data.blend[0].weight, 0.7);
  ASSERT_EQ(c->data.blend[1].paths.size(), 2u);
  EXPECT_TRUE(llvm::sys::path::is_absolute(c->data.blend[1].paths[0]));
  EXPECT_THAT(c->data.blend[1].paths[1], EndsWith("/code/b.tok"));
  EXPECT_EQ(c->data.blend[1].name, "code");
  EXPECT_DOUBLE_EQ(c->data.blend[2].weight, 1);
  EXPECT_EQ(c->data.shuffleWindows, 4096);
  // The resolved config reads back the same; the resume section names
  // the sources and the buffer (not its default).
  std::string printed;
  llvm::raw_string_ostream os(printed);
  printTrainingConfig(*c, os);
  llvm::Expected<TrainingConfig> again = parseTrainingConfig(printed, "p.yaml",
                                                            "", {});
  ASSERT_TRUE(bool(again)) << llvm::toString(again.takeError()) << printed;
  ASSERT_EQ(again->data.blend.size(), 3u);
  EXPECT_EQ(again->data.blend[1].name, "code");
  EXPECT_EQ(again->data.blend[1].paths, c->data.blend[1].paths);
  EXPECT_EQ(resumeSections(*again)["data"], resumeSections(*c)["data"]);
  EXPECT_THAT(resumeSections(*c)["data"], HasSubstr("source: \"code\" weight 0.3"));
  EXPECT_THAT(resumeSections(*c)["data"], HasSubstr("shuffle_windows: 4096"));
  EXPECT_THAT(resumeSections(*one)["data"], ::testing::Not(HasSubstr("shuffle")));
  // --train replaces a blend by one source.
  llvm::Expected<TrainingConfig> flag = parse(blend, {"--train", "x.bin"});
  ASSERT_TRUE(bool(flag)) << llvm::toString(flag.takeError());
  EXPECT_TRUE(flag->data.blend.empty());
  ASSERT_EQ(flag->data.train.size(), 1u);

  // Errors name the field.
  auto source = [&](const std::string &item) {
    return with("  train: [a.txt, \"shards/*.bin\"]",
                "  train:\n    - {path: a.txt}\n    - " + item);
  };
  struct Case {
    std::string text, expected;
  };
  const Case cases[] = {
      {source("{path: b.txt, weight: 0}"),
       "data.train[1].weight: 0 is not positive"},
      {source("{path: b.txt, weight: -0.5}"),
       "data.train[1].weight: -0.5 is not positive"},
      {source("{path: b.txt, weight: lots}"),
       "data.train[1].weight: expected a number, got 'lots'"},
      {source("{weight: 2}"), "data.train[1]: missing path"},
      {source("{path: b.txt, wieght: 2}"),
       "data.train[1]: unknown key 'wieght' (did you mean 'weight'?)"},
      {source("b.txt"),
       "data.train[1]: expected a mapping {path, weight, name} like the "
       "other sources, got a scalar"},
      {source("{path: b.txt, name: a.txt}"),
       "data.train[1].name: 'a.txt' names data.train[0] too"},
      {source("{path: {x: 1}}"), "data.train[1].path: expected a scalar"},
      {with("  val_fraction: 0.1", "  shuffle_windows: 0"),
       "data.shuffle_windows: expected a positive integer"},
  };
  for (const Case &c : cases)
    EXPECT_THAT(errorOf(c.text), HasSubstr(c.expected)) << c.text;
  EXPECT_THAT(errorOf(source("{path: b.txt, weight: 0}")), HasSubstr("t.yaml:"));
}

TEST(TrainConfigTest, GuardSection) {
  llvm::Expected<TrainingConfig> plain = parse(kConfig);
  ASSERT_TRUE(bool(plain)) << llvm::toString(plain.takeError());
  EXPECT_EQ(plain->guard.action, "warn"); // the default
  EXPECT_EQ(plain->guard.window, 50);

  llvm::Expected<TrainingConfig> c = parse(
      std::string(kConfig) +
          "guard: {action: rollback, window: 20, zscore: 4, ratio: 1.5, "
          "max_grad_norm_ratio: 8, snapshot_interval: 10, lr_factor: 0.3, "
          "cooldown: 0, max_rollbacks: 5}\n",
      {"--guard-window=25"});
  ASSERT_TRUE(bool(c)) << llvm::toString(c.takeError());
  EXPECT_EQ(c->guard.action, "rollback");
  EXPECT_EQ(c->guard.window, 25); // the flag wins
  EXPECT_EQ(c->guard.zscore, 4);
  EXPECT_EQ(c->guard.ratio, 1.5);
  EXPECT_EQ(c->guard.maxGradNormRatio, 8);
  EXPECT_EQ(c->guard.snapshotInterval, 10);
  EXPECT_EQ(c->guard.lrFactor, 0.3);
  EXPECT_EQ(c->guard.cooldown, 0);
  EXPECT_EQ(c->guard.maxRollbacks, 5);
  // The resolved config reads back the same.
  std::string printed;
  llvm::raw_string_ostream os(printed);
  printTrainingConfig(*c, os);
  EXPECT_THAT(printed, HasSubstr("guard:\n  action: rollback\n  window: 25\n"));
}

TEST(TrainConfigTest, GuardErrorsNameTheKey) {
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {action: retry}\n"),
              HasSubstr("t.yaml:27:17: error: guard.action: unknown action "
                        "'retry'; expected off, warn, stop or rollback"));
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {window: -3}\n"),
              HasSubstr("guard.window: expected a positive integer, got "
                        "'-3'"));
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {cooldown: -1}\n"),
              HasSubstr("guard.cooldown: expected a non-negative integer"));
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {max_rollbacks: 0}\n"),
              HasSubstr("guard.max_rollbacks: expected a positive integer"));
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {zscore: -1}\n"),
              HasSubstr("guard.zscore: -1 is out of range"));
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {lr_factor: 1.5}\n"),
              HasSubstr("guard.lr_factor: 1.5 is out of range; expected a "
                        "value in (0, 1]"));
  EXPECT_THAT(errorOf(std::string(kConfig) +
                      "guard: {max_grad_norm_ratio: 1}\n"),
              HasSubstr("guard.max_grad_norm_ratio: 1 is out of range; "
                        "expected 0 (off) or a value > 1"));
  EXPECT_THAT(errorOf(std::string(kConfig) + "guard: {windw: 3}\n"),
              HasSubstr("guard: unknown key 'windw'"));
  EXPECT_THAT(errorOf(kConfig, {"--guard-snapshot-interval", "0"}),
              HasSubstr("--guard-snapshot-interval: expected a positive "
                        "integer, got '0'"));
}

// Checkpoints (round trip; truncated, corrupted and foreign files; keeping
// the last K), config differences, metrics lines and the loss plot.
#include "runtime/Weights/Checkpoint.h"
#include "runtime/Train/Trainer.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <fstream>

using namespace llmc;
using namespace llmc::runtime;
using ::testing::HasSubstr;

namespace {
class CheckpointTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-ckpt", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) const {
    llvm::SmallString<256> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  static Checkpoint sample() {
    Checkpoint c;
    c.step = 120;
    c.consumedSamples = 1920;
    c.consumedTokens = 122880;
    c.seed = 18446744073709551615ull; // needs all 64 bits
    c.lr = 2.5e-4;
    c.loaderPosition = R"({"epoch":1,"index":17})";
    c.config = {{"model", "n_layer: 2\nn_embd: 64\n"},
                {"optimizer", "name: adamw\nlr: 0.001\n"},
                {"data", "train: [\"a.txt\"]\nseed: 1\n"}};
    std::vector<float> w(3 * 5), b(7);
    for (size_t i = 0; i < w.size(); ++i)
      w[i] = 0.25f * float(i) - 1.0f;
    for (size_t i = 0; i < b.size(); ++i)
      b[i] = 1e-3f * float(i * i);
    c.tensors["h.0.attn.c_attn.weight"] = HostTensor::fromF32(w, {3, 5});
    c.tensors["adam_m.h.0.attn.c_attn.weight"] =
        HostTensor::fromF32(b, {7});
    c.tensors["empty"] = HostTensor::zeros(kir::DType::F32, {0});
    return c;
  }

  std::string readAll(const std::string &file) {
    auto buffer = llvm::MemoryBuffer::getFile(file, false, false);
    EXPECT_TRUE(bool(buffer));
    return (*buffer)->getBuffer().str();
  }
  void writeAll(const std::string &file, const std::string &bytes) {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(bytes.data(), bytes.size());
  }

  llvm::SmallString<128> dir;
};
} // namespace

TEST_F(CheckpointTest, RoundTrip) {
  Checkpoint c = sample();
  ASSERT_FALSE(bool(writeCheckpoint(path("a.ckpt"), c)));
  llvm::Expected<Checkpoint> back = readCheckpoint(path("a.ckpt"));
  ASSERT_TRUE(bool(back)) << llvm::toString(back.takeError());
  EXPECT_EQ(back->step, c.step);
  EXPECT_EQ(back->consumedSamples, c.consumedSamples);
  EXPECT_EQ(back->consumedTokens, c.consumedTokens);
  EXPECT_EQ(back->seed, c.seed);
  EXPECT_EQ(back->lr, c.lr);
  EXPECT_EQ(back->loaderPosition, c.loaderPosition);
  EXPECT_EQ(back->config, c.config);
  EXPECT_EQ(back->tensors, c.tensors);
  // The file size is a multiple of the alignment and the data is aligned.
  EXPECT_EQ(readAll(path("a.ckpt")).size() % 64, 0u);

  // The same bytes in memory parse the same; errors start with the name.
  std::string bytes = readAll(path("a.ckpt"));
  llvm::Expected<Checkpoint> parsed = parseCheckpoint(bytes, "<memory>");
  ASSERT_TRUE(bool(parsed)) << llvm::toString(parsed.takeError());
  EXPECT_EQ(parsed->tensors, c.tensors);
  llvm::Expected<Checkpoint> cut =
      parseCheckpoint(llvm::StringRef(bytes).drop_back(64), "<memory>");
  ASSERT_FALSE(bool(cut));
  EXPECT_EQ(llvm::StringRef(llvm::toString(cut.takeError())).take_front(10),
            "<memory>: ");
}

// Streaming tensors (how the trainer writes from its store, without a copy
// of the state) gives the same file as writing them from the map; a name
// given twice and a tensor that changes between the checksum pass and the
// write are refused, and nothing is left at the path.
TEST_F(CheckpointTest, StreamedTensorsWriteTheSameFile) {
  Checkpoint whole = sample();
  ASSERT_FALSE(bool(writeCheckpoint(path("map.ckpt"), whole)));
  Checkpoint bare = whole;
  bare.tensors.clear();
  std::vector<StreamedTensor> streamed;
  int reads = 0;
  for (const auto &[name, tensor] : whole.tensors)
    streamed.push_back(
        {name, [&, &tensor = tensor](StreamedTensor::Consumer consume) {
           ++reads;
           return consume(tensor.dtype, tensor.shape, tensor.bytes);
         }});
  ASSERT_FALSE(bool(writeCheckpoint(path("streamed.ckpt"), bare, streamed)));
  EXPECT_EQ(readAll(path("streamed.ckpt")), readAll(path("map.ckpt")));
  EXPECT_EQ(reads, 2 * int(whole.tensors.size()));

  llvm::Error twice = writeCheckpoint(path("twice.ckpt"), whole, streamed);
  EXPECT_THAT(llvm::toString(std::move(twice)), HasSubstr("given twice"));
  EXPECT_FALSE(llvm::sys::fs::exists(path("twice.ckpt")));

  std::vector<float> values = {1, 2, 3};
  StreamedTensor changing{"moving", [&](StreamedTensor::Consumer consume) {
                            values[0] += 1; // differs on every read
                            HostTensor t = HostTensor::fromF32(values, {3});
                            return consume(t.dtype, t.shape, t.bytes);
                          }};
  llvm::Error changed = writeCheckpoint(path("moving.ckpt"), bare, {changing});
  EXPECT_THAT(llvm::toString(std::move(changed)),
              HasSubstr("tensor 'moving' changed while it was written"));
  EXPECT_FALSE(llvm::sys::fs::exists(path("moving.ckpt")));
}

TEST_F(CheckpointTest, EveryTruncationIsRefused) {
  ASSERT_FALSE(bool(writeCheckpoint(path("a.ckpt"), sample())));
  std::string bytes = readAll(path("a.ckpt"));
  for (size_t size = 0; size < bytes.size(); size += 13) {
    writeAll(path("t.ckpt"), bytes.substr(0, size));
    llvm::Expected<Checkpoint> read = readCheckpoint(path("t.ckpt"));
    ASSERT_FALSE(bool(read)) << "size " << size;
    std::string message = llvm::toString(read.takeError());
    EXPECT_THAT(message, HasSubstr(path("t.ckpt") + ": ")) << size;
  }
  writeAll(path("t.ckpt"), bytes.substr(0, bytes.size() - 1));
  llvm::Expected<Checkpoint> read = readCheckpoint(path("t.ckpt"));
  ASSERT_FALSE(bool(read));
  EXPECT_THAT(llvm::toString(read.takeError()),
              HasSubstr("truncated checkpoint: the header says"));
}

TEST_F(CheckpointTest, EveryFlippedByteIsDetected) {
  ASSERT_FALSE(bool(writeCheckpoint(path("a.ckpt"), sample())));
  std::string bytes = readAll(path("a.ckpt"));
  for (size_t i = 0; i < bytes.size(); ++i) {
    std::string flipped = bytes;
    flipped[i] ^= 0x10;
    writeAll(path("f.ckpt"), flipped);
    llvm::Expected<Checkpoint> read = readCheckpoint(path("f.ckpt"));
    ASSERT_FALSE(bool(read)) << "byte " << i << " of " << bytes.size();
    EXPECT_THAT(llvm::toString(read.takeError()),
                HasSubstr(path("f.ckpt") + ": "));
  }
}

TEST_F(CheckpointTest, ForeignFilesAreRefused) {
  writeAll(path("x.ckpt"), "{\"__metadata__\": {}}  safetensors-ish");
  llvm::Expected<Checkpoint> read = readCheckpoint(path("x.ckpt"));
  ASSERT_FALSE(bool(read));
  EXPECT_EQ(llvm::toString(read.takeError()),
            path("x.ckpt") + ": not an llmc checkpoint (it starts with "
                              "'{\"__meta', not 'LLMCCKPT')");
  read = readCheckpoint(path("missing.ckpt"));
  ASSERT_FALSE(bool(read));
  EXPECT_THAT(llvm::toString(read.takeError()),
              HasSubstr("missing.ckpt: cannot read the checkpoint"));
}

TEST_F(CheckpointTest, KeepsTheLastK) {
  Checkpoint c = sample();
  for (int64_t step : {10, 20, 30, 40, 50}) {
    c.step = step;
    ASSERT_FALSE(bool(writeCheckpoint(path(checkpointFileName(step)), c)));
  }
  writeAll(path("notes.txt"), "not a checkpoint");
  EXPECT_EQ(checkpointFileName(40), "step-000040.ckpt");
  EXPECT_EQ(listCheckpoints(dir).size(), 5u);
  ASSERT_FALSE(bool(pruneCheckpoints(dir, 2)));
  std::vector<std::string> kept = listCheckpoints(dir);
  ASSERT_EQ(kept.size(), 2u);
  EXPECT_EQ(llvm::sys::path::filename(kept[0]), "step-000040.ckpt");
  EXPECT_EQ(llvm::sys::path::filename(kept[1]), "step-000050.ckpt");
  EXPECT_TRUE(llvm::sys::fs::exists(path("notes.txt")));
  ASSERT_FALSE(bool(pruneCheckpoints(dir, 0))); // 0 keeps all
  EXPECT_EQ(listCheckpoints(dir).size(), 2u);
  EXPECT_TRUE(listCheckpoints(path("nowhere")).empty());
}

TEST(ConfigDifferenceTest, NamesTheKeysThatDiffer) {
  std::map<std::string, std::string> saved = {
      {"model", "n_layer: 2\n"}, {"optimizer", "name: adamw\nlr: 0.001\n"}};
  std::map<std::string, std::string> now = saved;
  EXPECT_EQ(describeConfigDifference(saved, now), "");
  EXPECT_EQ(hashConfigSections(saved), hashConfigSections(now));
  now["optimizer"] = "name: adamw\nlr: 0.0003\n";
  EXPECT_EQ(describeConfigDifference(saved, now),
            "  optimizer.lr: 0.001 in the checkpoint, 0.0003 now\n");
  EXPECT_NE(hashConfigSections(saved), hashConfigSections(now));
  now = saved;
  now["model"] = "n_layer: 4\n";
  EXPECT_THAT(describeConfigDifference(saved, now),
              HasSubstr("model.n_layer: 2 in the checkpoint, 4 now"));
}

TEST(MetricsTest, AResumeKeepsTheLinesBeforeItsStep) {
  std::string text = R"({"step":0,"val_loss":5.5}
{"step":0,"loss":5.6,"lr":0.001}
{"step":10,"loss":3.2,"lr":0.001}
{"step":20,"val_loss":3.0}
{"step":20,"loss":2.9,"lr":0.001}
{"step":30,"loss":2.
)";
  std::vector<std::string> kept;
  std::vector<MetricPoint> train, val;
  readMetricLines(text, 20, kept, train, val);
  EXPECT_EQ(kept.size(), 3u);
  ASSERT_EQ(train.size(), 2u);
  EXPECT_EQ(train[1].step, 10);
  EXPECT_DOUBLE_EQ(train[1].value, 3.2);
  ASSERT_EQ(val.size(), 1u);
  EXPECT_DOUBLE_EQ(val[0].value, 5.5);
}

TEST(LossPlotTest, DrawsAxesAndBothCurves) {
  std::vector<MetricPoint> train = {{0, 5.5}, {10, 3.1}, {20, 2.4}};
  std::vector<MetricPoint> val = {{0, 5.52}, {20, 2.5}};
  std::string svg = renderLossPlot(train, val, "tiny & <co>");
  EXPECT_THAT(svg, HasSubstr("<svg xmlns=\"http://www.w3.org/2000/svg\""));
  EXPECT_THAT(svg, HasSubstr("loss: tiny &amp; &lt;co>"));
  EXPECT_THAT(svg, HasSubstr("stroke=\"#1f77b4\" stroke-width=\"1.8\""));
  EXPECT_THAT(svg, HasSubstr("stroke=\"#ff7f0e\" stroke-width=\"1.8\""));
  EXPECT_THAT(svg, HasSubstr(">step</text>"));
  EXPECT_THAT(svg, HasSubstr(">validation</text>"));
  EXPECT_EQ(svg.substr(svg.size() - 7), "</svg>\n");
  // Nothing to draw is still a valid picture.
  EXPECT_THAT(renderLossPlot({}, {}, "x"), HasSubstr("</svg>"));
}

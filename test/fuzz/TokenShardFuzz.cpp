// libFuzzer target: the token file readers (data::TokenFile::open and read:
// llm.c shards, llmc files and their document index, Megatron .idx against
// a .bin) on any bytes, reading every token without a vocabulary bound and
// with GPT-2's.
#include "test/fuzz/FuzzInput.h"

#include "training/Data/TokenFile.h"

#include <cstdlib>
#include <unistd.h>
#include <vector>

using namespace llmc;

/// Opens `path` and reads it all, in two ranges (a read that spans pages and
/// one that starts mid-file); every refusal must carry a message.
static void openAndRead(const std::string &path) {
  llvm::Expected<std::shared_ptr<data::TokenFile>> file =
      data::TokenFile::open(path, /*tokenizer=*/nullptr);
  if (!file) {
    fuzz::expectMessage(file.takeError());
    return;
  }
  int64_t tokens = (*file)->numTokens();
  if (tokens > (int64_t(1) << 24))
    return; // the header agreed with the file size: no need to read it all
  std::vector<int32_t> ids(tokens);
  for (int32_t vocabSize : {0, 50257}) {
    int64_t half = tokens / 2;
    fuzz::expectMessage((*file)->read(0, half, ids.data(), vocabSize));
    fuzz::expectMessage(
        (*file)->read(half, tokens - half, ids.data() + half, vocabSize));
  }
  if (std::optional<int64_t> documents = (*file)->numDocuments())
    for (int64_t d = 0; d < *documents; ++d)
      if ((*file)->documentStart(d) > tokens) {
        llvm::errs() << "fuzz: a document starts past the tokens\n";
        std::abort();
      }
}

// Each run rewrites four files: on tmpfs that costs microseconds, on a disk
// file system it can wait on the disk every time (a lit run of 60000 inputs
// took minutes instead of seconds). $TMPDIR still wins when set.
extern "C" int LLVMFuzzerInitialize(int *, char ***) {
  if (!std::getenv("TMPDIR") && ::access("/dev/shm", W_OK) == 0)
    ::setenv("TMPDIR", "/dev/shm", /*overwrite=*/0);
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  // The bytes as an llm.c shard, as an llmc file, and as the .idx of a
  // Megatron pair whose .bin is the same bytes (so that small sizes and
  // pointers can match it).
  static fuzz::InputFile shard(".bin"), llmcFile(".tok");
  static fuzz::InputFile megatronIdx("-m.idx"), megatronBin("-m.bin");
  openAndRead(shard.write(data, size));
  openAndRead(llmcFile.write(data, size));
  megatronBin.write(data, size);
  openAndRead(megatronIdx.write(data, size));
  return 0;
}

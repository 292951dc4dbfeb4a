// writeShard: an llm.c shard written in one call through TokenFileWriter.
// Its own file so that a program linking frontend/Dataset.cpp's writeShard
// (until the loader replaces it) and TokenFileWriter (llmc data prepare)
// does not get two definitions from the archives' objects.
#include "training/Data/TokenFile.h"

llvm::Error llmc::data::writeShard(llvm::StringRef path,
                                   llvm::ArrayRef<int32_t> tokens) {
  llvm::Expected<std::unique_ptr<TokenFileWriter>> writer =
      TokenFileWriter::create(path, TokenFormat::LlmcShard, TokenType::U16);
  if (!writer)
    return writer.takeError();
  if (llvm::Error error = (*writer)->appendDocument(tokens))
    return error;
  return (*writer)->commit();
}

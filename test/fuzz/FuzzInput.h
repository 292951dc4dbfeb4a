// What the libFuzzer targets share: a scratch file (for round trips through
// a writer) and the check that a refused input gets a message.
#ifndef LLMC_TEST_FUZZ_FUZZINPUT_H
#define LLMC_TEST_FUZZ_FUZZINPUT_H

#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <unistd.h>

namespace llmc::fuzz {

/// A file of this process (under $TMPDIR, /tmp by default), named with
/// `suffix` (".safetensors"); write() replaces its contents. Removed at
/// exit.
class InputFile {
public:
  explicit InputFile(llvm::StringRef suffix) {
    const char *dir = std::getenv("TMPDIR");
    path = (llvm::Twine(dir && *dir ? dir : "/tmp") + "/llmc-fuzz-" +
            llvm::Twine(::getpid()) + suffix)
               .str();
  }
  ~InputFile() { std::remove(path.c_str()); }

  /// Writes `size` bytes of `data` as the whole file; aborts if it cannot
  /// (a broken setup, not a finding).
  const std::string &write(const uint8_t *data, size_t size) {
    std::error_code ec;
    llvm::raw_fd_ostream out(path, ec);
    if (!ec) {
      out.write(reinterpret_cast<const char *>(data), size);
      out.close();
    }
    if (ec || out.has_error()) {
      llvm::errs() << "fuzz: cannot write " << path << "\n";
      std::abort();
    }
    return path;
  }

  const std::string &name() const { return path; }

private:
  std::string path;
};

/// Drops an error: a reader refusing a bad input is the expected outcome.
/// An error must still have a message (an empty one tells a user nothing).
inline void expectMessage(llvm::Error err) {
  if (!err)
    return;
  std::string message = llvm::toString(std::move(err));
  if (message.empty()) {
    llvm::errs() << "fuzz: a reader failed with an empty message\n";
    std::abort();
  }
}

} // namespace llmc::fuzz

#endif // LLMC_TEST_FUZZ_FUZZINPUT_H

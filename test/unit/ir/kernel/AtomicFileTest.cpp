// Tests of ir/kernel/AtomicFile: the one atomic file writer of the code base.
#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/SmallString.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/raw_ostream.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"

#include <csignal>
#include <sys/resource.h>

using namespace llmc::kir;
using ::testing::HasSubstr;
using ::testing::StartsWith;

namespace {

/// An error's message and error code.
struct Failure {
  std::string message;
  std::error_code code;
};

Failure failureOf(llvm::Error error) {
  Failure failure;
  llvm::handleAllErrors(std::move(error), [&](const llvm::ErrorInfoBase &e) {
    failure.message = e.message();
    failure.code = e.convertToErrorCode();
  });
  return failure;
}

class AtomicFileTest : public ::testing::Test {
protected:
  void SetUp() override {
    ASSERT_FALSE(llvm::sys::fs::createUniqueDirectory("llmc-atomic-test", dir));
  }
  void TearDown() override { llvm::sys::fs::remove_directories(dir); }

  std::string path(llvm::StringRef name) {
    llvm::SmallString<128> p(dir);
    llvm::sys::path::append(p, name);
    return std::string(p);
  }

  /// The names in `directory`, sorted.
  std::vector<std::string> entries(llvm::StringRef directory) {
    std::vector<std::string> names;
    std::error_code ec;
    for (llvm::sys::fs::directory_iterator it(directory, ec), end;
         it != end && !ec; it.increment(ec))
      names.push_back(llvm::sys::path::filename(it->path()).str());
    llvm::sort(names);
    return names;
  }

  std::string contents(const std::string &file) {
    auto buffer = llvm::MemoryBuffer::getFile(file, /*IsText=*/false,
                                              /*RequiresNullTerminator=*/false);
    return buffer ? (*buffer)->getBuffer().str() : std::string("<missing>");
  }

  static llvm::Error writeText(llvm::StringRef file, llvm::StringRef text) {
    return writeFileAtomically(file, [&](llvm::raw_ostream &os) {
      os << text;
      return llvm::Error::success();
    });
  }

  llvm::SmallString<128> dir;
};

TEST_F(AtomicFileTest, WritesANewFile) {
  std::string file = path("out.txt");
  ASSERT_FALSE(writeText(file, "hello\n"));
  EXPECT_EQ(contents(file), "hello\n");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFileTest, WritesBytesVerbatim) {
  std::string file = path("out.bin");
  const uint8_t bytes[] = {0x00, 0xff, 0x0a, 0x00, 0x80};
  ASSERT_FALSE(writeFileAtomically(file, bytes));
  EXPECT_EQ(contents(file), std::string("\x00\xff\x0a\x00\x80", 5));

  // Nothing at all is a file of no bytes.
  ASSERT_FALSE(writeFileAtomically(file, llvm::ArrayRef<uint8_t>()));
  EXPECT_EQ(contents(file), "");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.bin"});
}

TEST_F(AtomicFileTest, ReplacesAnExistingFile) {
  std::string file = path("out.txt");
  ASSERT_FALSE(writeText(file, "a longer old text"));
  ASSERT_FALSE(writeText(file, "new"));
  // The old file is replaced, not overwritten in place: no tail survives.
  EXPECT_EQ(contents(file), "new");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFileTest, WritesInTheCurrentDirectory) {
  // A bare file name has no parent path; its directory is ".".
  llvm::SmallString<128> previous;
  ASSERT_FALSE(llvm::sys::fs::current_path(previous));
  ASSERT_FALSE(llvm::sys::fs::set_current_path(dir));
  llvm::Error error = writeText("here.txt", "here");
  ASSERT_FALSE(llvm::sys::fs::set_current_path(previous));
  ASSERT_FALSE(error);
  EXPECT_EQ(contents(path("here.txt")), "here");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"here.txt"});
}

TEST_F(AtomicFileTest, FailureWhileWritingLeavesTheOldFileAlone) {
  std::string file = path("out.txt");
  ASSERT_FALSE(writeText(file, "previous"));

  // The writer fails after some bytes reached the temporary file; its error
  // comes back as it is.
  llvm::Error error = writeFileAtomically(file, [](llvm::raw_ostream &os) {
    os << "half a new file";
    os.flush();
    return llvm::createStringError("the writer gave up");
  });
  EXPECT_EQ(failureOf(std::move(error)).message, "the writer gave up");
  EXPECT_EQ(contents(file), "previous");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFileTest, FailedStreamWriteLeavesTheOldFileAlone) {
  std::string file = path("out.txt");
  ASSERT_FALSE(writeText(file, "previous"));

  // The file size limit makes the write fail halfway (EFBIG instead of
  // SIGXFSZ while the signal is ignored), after the temporary file exists.
  struct rlimit saved;
  ASSERT_EQ(getrlimit(RLIMIT_FSIZE, &saved), 0);
  struct rlimit small = saved;
  small.rlim_cur = 100;
  auto previousHandler = std::signal(SIGXFSZ, SIG_IGN);
  ASSERT_EQ(setrlimit(RLIMIT_FSIZE, &small), 0);
  llvm::Error error = writeText(file, std::string(1000, 'x'));
  setrlimit(RLIMIT_FSIZE, &saved);
  std::signal(SIGXFSZ, previousHandler);

  Failure failure = failureOf(std::move(error));
  EXPECT_THAT(failure.message,
              StartsWith(file + ": cannot write '" + file + ".tmp-"));
  EXPECT_EQ(failure.code, std::errc::file_too_large);
  EXPECT_EQ(contents(file), "previous");
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.txt"});
}

TEST_F(AtomicFileTest, MissingDirectoryFails) {
  std::string file = path("no/such/dir/out.txt");
  bool called = false;
  Failure failure =
      failureOf(writeFileAtomically(file, [&](llvm::raw_ostream &) {
        called = true;
        return llvm::Error::success();
      }));
  EXPECT_FALSE(called);
  EXPECT_EQ(failure.message,
            file + ": cannot create a temporary file next to it: " +
                std::make_error_code(std::errc::no_such_file_or_directory)
                    .message());
  EXPECT_EQ(failure.code, std::errc::no_such_file_or_directory);
  EXPECT_TRUE(entries(dir).empty());
}

TEST_F(AtomicFileTest, TargetThatIsADirectoryFails) {
  // The temporary file is written, then the rename fails and it must go.
  std::string target = path("out.txt");
  ASSERT_FALSE(llvm::sys::fs::create_directory(target));
  Failure failure = failureOf(writeText(target, "text"));
  EXPECT_THAT(failure.message, StartsWith(target + ": cannot rename '" +
                                          target + ".tmp-"));
  EXPECT_THAT(failure.message, HasSubstr("' to it: "));
  EXPECT_EQ(failure.code, std::errc::is_a_directory);
  EXPECT_EQ(entries(dir), std::vector<std::string>{"out.txt"});
  EXPECT_TRUE(llvm::sys::fs::is_directory(target));
  EXPECT_TRUE(entries(target).empty());
}

} // namespace

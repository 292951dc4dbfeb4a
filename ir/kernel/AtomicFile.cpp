// Writing a file atomically: a temporary file, fsync, rename, directory fsync.
#include "ir/kernel/AtomicFile.h"

#include "llvm/ADT/STLExtras.h"
#include "llvm/ADT/SmallString.h"
#include "llvm/ADT/StringExtras.h"
#include "llvm/ADT/Twine.h"
#include "llvm/Support/FileSystem.h"
#include "llvm/Support/Path.h"
#include "llvm/Support/Process.h"
#include "llvm/Support/Signals.h"

#include <cerrno>
#include <fcntl.h>
#include <unistd.h>

using namespace llvm;

static Error fileError(StringRef path, const Twine &what, std::error_code ec) {
  return createStringError(ec, path + ": " + what + ": " + ec.message());
}

/// Runs `write` on a stream over `fd` and flushes it. Returns the error of
/// `write`; a failed write or flush of the stream itself lands in `streamEc`.
static Error fill(int fd, function_ref<Error(raw_ostream &)> write,
                  std::error_code &streamEc) {
  raw_fd_ostream os(fd, /*shouldClose=*/false);
  Error error = write(os);
  os.flush();
  streamEc = os.error();
  os.clear_error(); // else its destructor aborts
  return error;
}

/// Flushes `fd`'s data to the disk. POSIX: llmc's runtime targets Linux, and
/// LLVM Support has no fsync.
static std::error_code syncFile(int fd) {
  while (::fsync(fd) != 0)
    if (errno != EINTR)
      return errnoAsErrorCode();
  return {};
}

/// Makes a rename in `path`'s directory durable. Best effort: some file
/// systems refuse to sync a directory, and the file is complete either way.
static void syncDirectoryOf(StringRef path) {
  SmallString<256> dir = sys::path::parent_path(path);
  if (dir.empty())
    dir = ".";
  int dirFd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dirFd < 0)
    return;
  (void)syncFile(dirFd);
  ::close(dirFd);
}

Error llmc::kir::writeFileAtomically(
    StringRef path, function_ref<Error(raw_ostream &)> write) {
  // The temporary file sits next to the target so the rename cannot cross
  // file systems. It is created and renamed by hand rather than through
  // sys::fs::TempFile, whose keep() falls back to a non-atomic copy when
  // the rename fails.
  int fd = -1;
  SmallString<256> tempPath;
  if (std::error_code ec =
          sys::fs::createUniqueFile(path + ".tmp-%%%%%%%%", fd, tempPath))
    return fileError(path, "cannot create a temporary file next to it", ec);
  sys::RemoveFileOnSignal(tempPath);
  auto discard = [&] {
    sys::fs::remove(tempPath);
    sys::DontRemoveFileOnSignal(tempPath);
  };

  std::error_code writeEc;
  Error writeError = fill(fd, write, writeEc);
  std::error_code syncEc;
  if (!writeError && !writeEc)
    syncEc = syncFile(fd);
  std::error_code closeEc = sys::Process::SafelyCloseFileDescriptor(fd);
  if (writeError) {
    discard();
    return writeError;
  }
  if (writeEc || syncEc || closeEc) {
    discard();
    if (writeEc)
      return fileError(path, "cannot write '" + tempPath + "'", writeEc);
    if (syncEc)
      return fileError(path, "cannot sync '" + tempPath + "' to the disk",
                       syncEc);
    return fileError(path, "cannot close '" + tempPath + "'", closeEc);
  }

  if (std::error_code ec = sys::fs::rename(tempPath, path)) {
    discard();
    return fileError(path, "cannot rename '" + tempPath + "' to it", ec);
  }
  sys::DontRemoveFileOnSignal(tempPath);
  syncDirectoryOf(path);
  return Error::success();
}

bool llmc::kir::isTemporaryFileOf(StringRef name, StringRef target) {
  // The "%%%%%%%%" of writeFileAtomically's model.
  return name.consume_front(target) && name.consume_front(".tmp-") &&
         name.size() == 8 && llvm::all_of(name, llvm::isAlnum);
}

Error llmc::kir::writeFileAtomically(StringRef path,
                                         ArrayRef<uint8_t> bytes) {
  return writeFileAtomically(path, [&](raw_ostream &os) {
    os.write(reinterpret_cast<const char *>(bytes.data()), bytes.size());
    return Error::success();
  });
}

std::string llmc::kir::defaultCacheDirectory() {
  if (std::optional<std::string> dir =
          llvm::sys::Process::GetEnv("LLMC_CACHE_DIR"))
    if (!dir->empty())
      return *dir;
  llvm::SmallString<256> path;
  if (std::optional<std::string> xdg =
          llvm::sys::Process::GetEnv("XDG_CACHE_HOME");
      xdg && !xdg->empty()) {
    path = *xdg;
  } else if (std::optional<std::string> home =
                 llvm::sys::Process::GetEnv("HOME");
             home && !home->empty()) {
    path = *home;
    llvm::sys::path::append(path, ".cache");
  } else {
    return "";
  }
  llvm::sys::path::append(path, "llmc");
  return std::string(path);
}

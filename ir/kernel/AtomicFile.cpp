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

Expected<std::unique_ptr<llmc::kir::AtomicFileStream>>
llmc::kir::AtomicFileStream::create(StringRef path) {
  // The temporary file sits next to the target so the rename cannot cross
  // file systems. It is created and renamed by hand rather than through
  // sys::fs::TempFile, whose keep() falls back to a non-atomic copy when
  // the rename fails.
  std::unique_ptr<AtomicFileStream> file(new AtomicFileStream());
  file->target = path.str();
  SmallString<256> tempPath;
  if (std::error_code ec = sys::fs::createUniqueFile(
          path + ".tmp-%%%%%%%%", file->fd, tempPath))
    return fileError(path, "cannot create a temporary file next to it", ec);
  file->tempPath = std::string(tempPath);
  sys::RemoveFileOnSignal(tempPath);
  file->os = std::make_unique<raw_fd_ostream>(file->fd, /*shouldClose=*/false);
  return file;
}

void llmc::kir::AtomicFileStream::discard() {
  if (finished)
    return;
  finished = true;
  if (os) {
    os->clear_error(); // else its destructor aborts
    os.reset();
  }
  if (fd >= 0)
    (void)sys::Process::SafelyCloseFileDescriptor(fd);
  fd = -1;
  sys::fs::remove(tempPath);
  sys::DontRemoveFileOnSignal(tempPath);
}

llmc::kir::AtomicFileStream::~AtomicFileStream() { discard(); }

Error llmc::kir::AtomicFileStream::commit() {
  if (finished)
    return createStringError(target + ": the file was already committed or "
                                      "discarded");
  os->flush();
  std::error_code writeEc = os->error();
  os->clear_error();
  os.reset();
  std::error_code syncEc;
  if (!writeEc)
    syncEc = syncFile(fd);
  std::error_code closeEc = sys::Process::SafelyCloseFileDescriptor(fd);
  fd = -1;
  if (writeEc || syncEc || closeEc) {
    std::string temp = tempPath;
    discard();
    if (writeEc)
      return fileError(target, "cannot write '" + temp + "'", writeEc);
    if (syncEc)
      return fileError(target, "cannot sync '" + temp + "' to the disk",
                       syncEc);
    return fileError(target, "cannot close '" + temp + "'", closeEc);
  }
  if (std::error_code ec = sys::fs::rename(tempPath, target)) {
    std::string temp = tempPath;
    discard();
    return fileError(target, "cannot rename '" + temp + "' to it", ec);
  }
  finished = true;
  sys::DontRemoveFileOnSignal(tempPath);
  syncDirectoryOf(target);
  return Error::success();
}

Error llmc::kir::writeFileAtomically(
    StringRef path, function_ref<Error(raw_ostream &)> write) {
  Expected<std::unique_ptr<AtomicFileStream>> file =
      AtomicFileStream::create(path);
  if (!file)
    return file.takeError();
  // An error of `write` is returned as it is; destroying the stream
  // removes the temporary.
  if (Error error = write((*file)->stream()))
    return error;
  return (*file)->commit();
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

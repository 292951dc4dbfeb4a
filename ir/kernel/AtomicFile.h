// Writing a file atomically: readers see the old file or the whole new one;
// and where llmc keeps the files it caches.
#ifndef LLMC_IR_KERNEL_ATOMICFILE_H
#define LLMC_IR_KERNEL_ATOMICFILE_H

#include "llvm/ADT/ArrayRef.h"
#include "llvm/ADT/STLFunctionalExtras.h"
#include "llvm/ADT/StringRef.h"
#include "llvm/Support/Error.h"
#include "llvm/Support/raw_ostream.h"

#include <cstdint>
#include <memory>
#include <string>

namespace llmc::kir {

/// Writes `path` through a temporary file next to it (`<path>.tmp-XXXXXXXX`):
/// `write` fills it, it is fsynced and renamed over `path`, then the
/// directory is fsynced (best effort) so the rename survives a crash.
///
/// On any failure, or a fatal signal meanwhile, the temporary file is
/// removed and an existing `path` is left untouched. An error of `write`
/// is returned as it is; the writer's own errors read
/// "<path>: <what failed>: <reason>" and keep the errno's error code.
///
/// The directory must exist. Unlike llvm::sys::fs::TempFile::keep, a failed
/// rename is an error, never a non-atomic copy.
llvm::Error
writeFileAtomically(llvm::StringRef path,
                    llvm::function_ref<llvm::Error(llvm::raw_ostream &)> write);

/// The same temporary file, fsync and rename for a writer that streams in
/// many steps (token files of `llmc data prepare`): create() makes the
/// temporary file next to `path` (removed on a fatal signal), stream()
/// writes into it (seekable, to fill in a header last), commit() flushes,
/// fsyncs and renames it over `path`. Destroying it uncommitted removes
/// the temporary and leaves `path` as it was. Errors read as
/// writeFileAtomically's.
class AtomicFileStream {
public:
  static llvm::Expected<std::unique_ptr<AtomicFileStream>>
  create(llvm::StringRef path);
  ~AtomicFileStream();
  AtomicFileStream(const AtomicFileStream &) = delete;
  AtomicFileStream &operator=(const AtomicFileStream &) = delete;

  /// The stream over the temporary file; its write errors are reported by
  /// commit().
  llvm::raw_fd_ostream &stream() { return *os; }
  const std::string &path() const { return target; }
  const std::string &temporaryPath() const { return tempPath; }
  /// Makes the file appear at path(). Called at most once; on an error the
  /// temporary is removed.
  llvm::Error commit();

private:
  AtomicFileStream() = default;
  void discard();

  std::string target;
  std::string tempPath;
  int fd = -1;
  std::unique_ptr<llvm::raw_fd_ostream> os;
  bool finished = false;
};

/// Whether the file name `name` is one of the temporary files that
/// writeFileAtomically makes for a file named `target`: `target` followed
/// by ".tmp-" and 8 letters or digits. A process killed (SIGKILL) while
/// writing leaves it behind.
bool isTemporaryFileOf(llvm::StringRef name, llvm::StringRef target);

/// Writes `bytes` as the whole of `path`, as above.
llvm::Error writeFileAtomically(llvm::StringRef path,
                                llvm::ArrayRef<uint8_t> bytes);

/// The directory of llmc's caches (compiled CPU kernels, NVRTC binaries):
/// $LLMC_CACHE_DIR, else $XDG_CACHE_HOME/llmc, else ~/.cache/llmc (empty if
/// there is no home either).
std::string defaultCacheDirectory();

} // namespace llmc::kir

#endif // LLMC_IR_KERNEL_ATOMICFILE_H

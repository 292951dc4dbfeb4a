// The trainer's console on a terminal: the lines it has always printed, and
// below them one live status line (a progress bar with tokens/s, MFU, ETA
// and loss) that is redrawn after each step and cleared before anything
// else is printed, so the log reads the same as without it.
#ifndef LLMC_RUNTIME_CONSOLE_H
#define LLMC_RUNTIME_CONSOLE_H

#include "llvm/ADT/StringRef.h"
#include "llvm/Support/raw_ostream.h"

#include <string>

namespace llmc::runtime {

class StatusConsole : public llvm::raw_ostream {
public:
  /// `columns`: the terminal's width, to which the status line is cut.
  StatusConsole(llvm::raw_ostream &terminal, unsigned columns);
  ~StatusConsole() override;

  /// Shows `text` as the status line, replacing the previous one.
  void setStatus(llvm::StringRef text);
  /// Removes the status line (the run is over).
  void clearStatus();

private:
  void write_impl(const char *ptr, size_t size) override;
  uint64_t current_pos() const override { return position; }
  void erase();
  void draw();

  llvm::raw_ostream &terminal;
  unsigned columns;
  std::string status;
  bool shown = false;
  uint64_t position = 0;
};

/// "[=========>          ]" of `width` characters for `fraction` in [0, 1].
std::string progressBar(double fraction, int width);

} // namespace llmc::runtime

#endif // LLMC_RUNTIME_CONSOLE_H

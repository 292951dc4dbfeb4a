// A terminal console with a live status line.
#include "runtime/Train/Console.h"

#include <algorithm>
#include <cmath>

using namespace llmc::runtime;

StatusConsole::StatusConsole(llvm::raw_ostream &terminal, unsigned columns)
    : terminal(terminal), columns(std::max(columns, 20u)) {
  // Every write reaches write_impl at once, so the status line is erased
  // before the first byte of a log line and redrawn after its newline.
  SetUnbuffered();
}

StatusConsole::~StatusConsole() { clearStatus(); }

void StatusConsole::erase() {
  if (!shown)
    return;
  terminal << "\r\x1b[K"; // to column 0, clear to the end of the line
  shown = false;
}

void StatusConsole::draw() {
  if (status.empty())
    return;
  // One column short of the width: a full line would wrap on some
  // terminals and leave the cursor on the next.
  terminal << llvm::StringRef(status).take_front(columns - 1);
  terminal.flush();
  shown = true;
}

void StatusConsole::setStatus(llvm::StringRef text) {
  erase();
  status = text.str();
  draw();
}

void StatusConsole::clearStatus() {
  erase();
  status.clear();
  terminal.flush();
}

void StatusConsole::write_impl(const char *ptr, size_t size) {
  erase();
  terminal.write(ptr, size);
  position += size;
  if (size > 0 && ptr[size - 1] == '\n')
    draw();
  else
    terminal.flush();
}

std::string llmc::runtime::progressBar(double fraction, int width) {
  int inner = std::max(width - 2, 1);
  fraction = std::clamp(fraction, 0.0, 1.0);
  int filled = int(std::floor(fraction * inner));
  std::string bar = "[";
  bar.append(filled, '=');
  if (filled < inner) {
    bar += '>';
    bar.append(inner - filled - 1, ' ');
  }
  return bar + "]";
}

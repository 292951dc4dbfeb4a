// Start-up phase timings of llmc run.
#include "training/StartupTimings.h"

#include "llvm/Support/Format.h"
#include "llvm/Support/MemoryBuffer.h"
#include "llvm/Support/raw_ostream.h"

#include <ctime>
#include <sys/resource.h>
#include <unistd.h>

using namespace llmc;

namespace {
double seconds(const timeval &t) { return double(t.tv_sec) + t.tv_usec * 1e-6; }
} // namespace

StartupTimings::Point StartupTimings::now() {
  Point point;
  point.wall = std::chrono::steady_clock::now();
  rusage usage = {};
  if (getrusage(RUSAGE_SELF, &usage) == 0) {
    point.user = seconds(usage.ru_utime);
    point.system = seconds(usage.ru_stime);
  }
  return point;
}

StartupTimings::StartupTimings() : last(now()) {}

void StartupTimings::end(llvm::StringRef name) {
  Point point = now();
  list.push_back({name.str(),
                  std::chrono::duration<double>(point.wall - last.wall).count(),
                  point.user - last.user, point.system - last.system});
  last = point;
}

void StartupTimings::addBefore(llvm::StringRef name, double seconds) {
  list.insert(list.begin(), Phase{name.str(), seconds, -1, -1});
}

void StartupTimings::print(llvm::raw_ostream &os) const {
  os << "llmc run: start-up timings (wall and CPU seconds; CPU over all "
        "threads)\n";
  os << llvm::format("  %-44s %8s %8s %8s\n", "phase", "wall", "user",
                     "system");
  double wall = 0, user = 0, system = 0;
  for (const Phase &phase : list) {
    wall += phase.wall;
    if (phase.user < 0) {
      os << llvm::format("  %-44s %8.3f %8s %8s\n", phase.name.c_str(),
                         phase.wall, "-", "-");
      continue;
    }
    user += phase.user;
    system += phase.system;
    os << llvm::format("  %-44s %8.3f %8.3f %8.3f\n", phase.name.c_str(),
                       phase.wall, phase.user, phase.system);
  }
  os << llvm::format("  %-44s %8.3f %8.3f %8.3f\n", "to the first step", wall,
                     user, system);
}

double llmc::secondsSinceProcessStart() {
  // Field 22 of /proc/self/stat: the start time in clock ticks after boot,
  // against CLOCK_BOOTTIME (the same origin).
  auto buffer = llvm::MemoryBuffer::getFileAsStream("/proc/self/stat");
  if (!buffer)
    return -1;
  llvm::StringRef text = (*buffer)->getBuffer();
  // The command name (field 2) may hold spaces: count from its ')'.
  size_t close = text.rfind(')');
  if (close == llvm::StringRef::npos)
    return -1;
  llvm::SmallVector<llvm::StringRef> fields;
  text.drop_front(close + 2).split(fields, ' ');
  // fields[0] is field 3 (the state): field 22 is fields[19].
  unsigned long long ticks = 0;
  if (fields.size() < 20 || fields[19].getAsInteger(10, ticks))
    return -1;
  long hz = sysconf(_SC_CLK_TCK);
  timespec boot = {};
  if (hz <= 0 || clock_gettime(CLOCK_BOOTTIME, &boot) != 0)
    return -1;
  double since = double(boot.tv_sec) + boot.tv_nsec * 1e-9 - double(ticks) / hz;
  return since >= 0 ? since : -1;
}

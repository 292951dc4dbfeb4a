// The wall and CPU time of each phase of `llmc run`'s start-up, for
// `llmc run --timings`.
#ifndef LLMC_TRAINING_STARTUPTIMINGS_H
#define LLMC_TRAINING_STARTUPTIMINGS_H

#include "llvm/ADT/StringRef.h"

#include <chrono>
#include <string>
#include <vector>

namespace llvm {
class raw_ostream;
} // namespace llvm

namespace llmc {

/// A clock over consecutive phases: end(name) closes the phase that began
/// at the previous end (or at construction) with its wall time and the
/// process's user and system CPU time (every thread's, getrusage), which on
/// a shared machine say more than the wall time.
class StartupTimings {
public:
  struct Phase {
    std::string name;
    double wall = 0, user = 0, system = 0;
  };
  StartupTimings();

  void end(llvm::StringRef name);
  /// Adds a phase that ran before this clock started (`seconds` of wall
  /// time, CPU time unknown): the time from exec to main.
  void addBefore(llvm::StringRef name, double seconds);

  const std::vector<Phase> &phases() const { return list; }
  /// The table: one line per phase and the total.
  void print(llvm::raw_ostream &os) const;

private:
  struct Point {
    std::chrono::steady_clock::time_point wall;
    double user = 0, system = 0;
  };
  static Point now();
  Point last;
  std::vector<Phase> list;
};

/// Seconds from this process's start (exec, /proc/self/stat) to now, or a
/// negative value where it cannot be told.
double secondsSinceProcessStart();

} // namespace llmc

#endif // LLMC_TRAINING_STARTUPTIMINGS_H

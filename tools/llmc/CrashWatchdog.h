// A crash ends the process, even when its stack trace cannot be printed.
//
// LLVM's handler of a fatal signal (InitLLVM: SIGSEGV, SIGABRT, ...) prints
// a stack trace, which allocates. After a heap corruption (glibc aborting
// inside malloc or free, with its arena's lock held) that allocation
// deadlocks, and the process never exits: a training job would hold its
// nodes until the scheduler's time limit. Seen here with oneDNN's
// signal-unsafe GEMM (runtime/Cpu/SignalMask.h). The watchdog is the first
// callback of LLVM's handler: it arms a timer, and if the handler has not
// ended the process kCrashHandlerSeconds later, the timer's signal says so on
// stderr and kills it (SIGKILL: exit status 137). The timer is a POSIX
// timer of its own (SIGRTMIN): an alarm(2) armed there never fired in the
// test (run-crash.test), presumably reset while the stack trace ran
// llvm-symbolizer.
#ifndef LLMC_TOOLS_LLMC_CRASHWATCHDOG_H
#define LLMC_TOOLS_LLMC_CRASHWATCHDOG_H

namespace llmc {

constexpr unsigned kCrashHandlerSeconds = 10;

/// Registers the watchdog with LLVM's fatal-signal handler; call it before
/// llvm::InitLLVM so that it runs before the stack trace.
void installCrashWatchdog();

} // namespace llmc

#endif // LLMC_TOOLS_LLMC_CRASHWATCHDOG_H

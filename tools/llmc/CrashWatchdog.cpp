// installCrashWatchdog: a POSIX timer armed by LLVM's fatal-signal handler.
#include "tools/llmc/CrashWatchdog.h"

#include "llvm/Support/Signals.h"

#include <pthread.h>
#include <signal.h>
#include <time.h>
#include <unistd.h>

namespace {

// Its own timer and signal, not alarm(2) (CrashWatchdog.h).
timer_t crashTimer;
int crashTimerSignal = 0; // 0: no timer

// Async-signal-safe calls only: write(2), kill(2).
void onCrashHandlerTimeout(int) {
  static const char text[] =
      "llmc: the crash handler did not finish in 10 s (after a heap "
      "corruption its stack trace can deadlock); killing the process\n";
  static_assert(llmc::kCrashHandlerSeconds == 10, "the text says 10 s");
  (void)!::write(2, text, sizeof(text) - 1);
  ::kill(::getpid(), SIGKILL);
}

// Run by LLVM's handler of a fatal signal, first: timer_settime and
// pthread_sigmask are async-signal-safe.
void armCrashTimer(void *) {
  if (!crashTimerSignal)
    return;
  // This thread may be a kernel thread that blocks asynchronous signals
  // (runtime/Cpu/SignalMask.h); the timer's must reach it or another.
  sigset_t timerOnly;
  sigemptyset(&timerOnly);
  sigaddset(&timerOnly, crashTimerSignal);
  pthread_sigmask(SIG_UNBLOCK, &timerOnly, nullptr);
  struct itimerspec after = {};
  after.it_value.tv_sec = llmc::kCrashHandlerSeconds;
  timer_settime(crashTimer, 0, &after, nullptr);
}

} // namespace

void llmc::installCrashWatchdog() {
  int signal = SIGRTMIN;
  struct sigaction action = {};
  action.sa_handler = onCrashHandlerTimeout;
  sigemptyset(&action.sa_mask);
  struct sigevent event = {};
  event.sigev_notify = SIGEV_SIGNAL;
  event.sigev_signo = signal;
  if (::sigaction(signal, &action, nullptr) == 0 &&
      timer_create(CLOCK_MONOTONIC, &event, &crashTimer) == 0)
    crashTimerSignal = signal;
  llvm::sys::AddSignalHandler(armCrashTimer, nullptr);
}

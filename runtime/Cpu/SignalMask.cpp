// AsyncSignalsBlocked: pthread_sigmask around kernel work (SignalMask.h).
#include "runtime/Cpu/SignalMask.h"

#include <pthread.h>

#include <initializer_list>

using namespace llmc;

sigset_t cpu::asynchronousSignals() {
  sigset_t set;
  sigfillset(&set);
  for (int synchronous :
       {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT, SIGSYS, SIGPIPE})
    sigdelset(&set, synchronous);
  return set;
}

cpu::AsyncSignalsBlocked::AsyncSignalsBlocked() {
  sigset_t blocked = asynchronousSignals();
  pthread_sigmask(SIG_BLOCK, &blocked, &previous);
}

cpu::AsyncSignalsBlocked::~AsyncSignalsBlocked() {
  pthread_sigmask(SIG_SETMASK, &previous, nullptr);
}

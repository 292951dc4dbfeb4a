// Asynchronous signals kept off the threads that run kernels.
//
// oneDNN's f32 GEMM (Debian 12's libdnnl.so.2, oneDNN 2.6.3) is not safe to
// interrupt: a signal delivered to a thread inside dnnl_sgemm, even one
// whose handler does nothing, corrupts the heap or crashes within a second
// of a signal every 20 us (two threads of products of llmc's shapes; with
// the AVX2 kernels too, ONEDNN_MAX_CPU_ISA=AVX2). With the signal frames
// on an alternate stack (sigaltstack, SA_ONSTACK) the same barrage does no
// harm, so its JIT code keeps live data below the stack pointer, past the
// 128-byte red zone the x86-64 ABI leaves to a function, where the kernel
// writes a signal frame. OpenBLAS's kernels take the same barrage
// unharmed. This is what ended `llmc run` in glibc's "corrupted size vs.
// prev_size" inside dnnl_sgemm when SIGINT or SIGTERM arrived mid-step.
//
// So a thread blocks the asynchronous signals while it runs kernels: the
// executor's pool workers for their whole life, and the thread that calls
// an executor's run() (or measures a GEMM peak) for that call. A signal
// sent to the process meanwhile goes to a thread that does not block it
// (an idle BLAS or LLVM worker, MPI's progress thread) or waits, pending,
// until run() returns: at most one program's run. Signals a fault raises
// in the thread itself (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGTRAP, SIGABRT,
// SIGSYS, SIGPIPE) are never blocked: they belong to the code that caused
// them.
#ifndef LLMC_RUNTIME_CPU_SIGNALMASK_H
#define LLMC_RUNTIME_CPU_SIGNALMASK_H

#include <signal.h>

namespace llmc::cpu {

/// Blocks the asynchronous signals on the calling thread for the object's
/// lifetime; the destructor restores the thread's previous mask (a signal
/// that came meanwhile is delivered then).
class AsyncSignalsBlocked {
public:
  AsyncSignalsBlocked();
  ~AsyncSignalsBlocked();
  AsyncSignalsBlocked(const AsyncSignalsBlocked &) = delete;
  AsyncSignalsBlocked &operator=(const AsyncSignalsBlocked &) = delete;

private:
  sigset_t previous;
};

/// Every signal but the synchronous ones listed above.
sigset_t asynchronousSignals();

} // namespace llmc::cpu

#endif // LLMC_RUNTIME_CPU_SIGNALMASK_H

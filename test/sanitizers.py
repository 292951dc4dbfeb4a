# The environment of the tests of a sanitized build (-DLLMC_SANITIZE=ON,
# scripts/test.sh --sanitize), shared by the lit and the unit test suites.
import os


def sanitizer_environment(src_root, llvm_tools_dir):
    """ASAN_OPTIONS, UBSAN_OPTIONS and LSAN_OPTIONS for the tests.

    abort_on_error: a finding ends the process with SIGABRT rather than
    exit status 1, so that a test expecting a failure (`not llmc ...`)
    cannot pass over a sanitizer report: `not` treats a signal as a crash.
    """
    common = "abort_on_error=1:print_summary=1:symbolize=1"
    # allow_user_poisoning=0: see test/fuzz/AsanOptions.cpp (LLVM's
    # allocators, inlined instrumented into llmc but not into libMLIR).
    asan = common + ":detect_leaks=1:allow_user_poisoning=0"
    suppressions = os.path.join(src_root, "test", "lsan.supp")
    return {
        "ASAN_OPTIONS": asan,
        "UBSAN_OPTIONS": common + ":print_stacktrace=1",
        "LSAN_OPTIONS": "suppressions=" + suppressions + ":print_suppressions=0",
        "ASAN_SYMBOLIZER_PATH": os.path.join(llvm_tools_dir, "llvm-symbolizer"),
    }


def mpi_environment(src_root, llvm_tools_dir):
    """The environment of MPI ranks: leak checking off.

    Open MPI's components are shared objects it dlopens and closes again at
    MPI_Finalize, leaving memory they allocated for the life of the process;
    LeakSanitizer reports it from "<unknown module>" (closed) frames, which
    no suppression can name. llmc's own code in those processes runs with
    leak checking in the single-process tests.
    """
    env = sanitizer_environment(src_root, llvm_tools_dir)
    env["ASAN_OPTIONS"] = env["ASAN_OPTIONS"].replace(
        "detect_leaks=1", "detect_leaks=0")
    return env

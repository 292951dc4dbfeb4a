# lit configuration of the llmc regression tests (FileCheck over llmc-opt and llmc).
import os
import shutil
import sys

import lit.formats

config.name = "llmc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "unit", "corpus", "CMakeLists.txt", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llmc_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.environment["PATH"] = os.pathsep.join(
    [config.llmc_tools_dir, config.llvm_tools_dir, config.environment["PATH"]])
config.substitutions.append(("%llmc_src", config.llmc_src_root))
if config.cuda_toolkit:
    config.available_features.add("cuda-toolkit")
config.substitutions.append(("%python", sys.executable))
# A sanitized build (-DLLMC_SANITIZE=ON): its reports abort the process.
if config.sanitize:
    sys.dont_write_bytecode = True  # no __pycache__ in the source tree
    sys.path.insert(0, os.path.dirname(__file__))
    from sanitizers import sanitizer_environment
    config.environment.update(
        sanitizer_environment(config.llmc_src_root, config.llvm_tools_dir))
    config.available_features.add("sanitize")
# The libFuzzer targets' sub-build (test/CMakeLists.txt: clang-22 found):
# %fuzz_bin is its bin/ folder.
if config.llmc_fuzz_dir:
    config.available_features.add("fuzz")
    config.substitutions.append(
        ("%fuzz_bin", os.path.join(config.llmc_fuzz_dir, "bin")))
    # %no_aslr: `setarch -R` where the machine allows it. With addresses
    # fixed, hash tables keyed by pointers iterate alike in every run, so a
    # fixed -seed and -runs reach the same coverage each time.
    import subprocess
    no_aslr = ["setarch", "-R"]
    try:
        ok = subprocess.call(no_aslr + ["true"], stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL) == 0
    except OSError:
        ok = False
    config.substitutions.append(("%no_aslr", " ".join(no_aslr) if ok else ""))
# The memory report reads /proc/self/smaps (test/tools/run-memory.test).
if sys.platform.startswith("linux"):
    config.available_features.add("linux")
# llmc export --cpu names x86-64 CPUs; export-cpu.test needs a CPU without
# AMX to see a binary for Sapphire Rapids refused.
import platform
if platform.machine() in ("x86_64", "AMD64"):
    config.available_features.add("x86_64")
try:
    with open("/proc/cpuinfo") as cpuinfo:
        if " amx_tile" in cpuinfo.read():
            config.available_features.add("cpu-amx")
except OSError:
    pass

# MPI jobs (test/comm/): %mpirun is scripts/mpirun.sh, which sets what Open
# MPI needs here (root, oversubscription, shared memory); `mpi` when mpirun
# is installed (scripts/setup.sh: openmpi-bin).
# A sanitized build runs the ranks without leak checking (test/sanitizers.py):
# %mpi_env prefixes a command that starts mpirun itself (bench/dp.sh).
mpi_env = ""
if config.sanitize:
    from sanitizers import mpi_environment
    asan = mpi_environment(config.llmc_src_root, config.llvm_tools_dir)
    mpi_env = "env ASAN_OPTIONS=" + asan["ASAN_OPTIONS"]
config.substitutions.append(("%mpi_env", mpi_env))
config.substitutions.append(
    ("%mpirun", (mpi_env + " bash ").lstrip() +
     os.path.join(config.llmc_src_root, "scripts/mpirun.sh")))
if shutil.which("mpirun"):
    config.available_features.add("mpi")
# `tmpfs`: the tests may mount a small tmpfs (the disk-full test): root, and
# a machine that lets it mount (a container may not), tried here once.
def can_mount_tmpfs():
    import subprocess
    import tempfile
    if not hasattr(os, "geteuid") or os.geteuid() != 0 or \
            not shutil.which("mount"):
        return False
    probe = tempfile.mkdtemp(prefix="llmc-tmpfs-probe-")
    try:
        if subprocess.call(["mount", "-t", "tmpfs", "-o", "size=1m",
                            "llmc-probe", probe],
                           stdout=subprocess.DEVNULL,
                           stderr=subprocess.DEVNULL) != 0:
            return False
        subprocess.call(["umount", probe])
        return True
    finally:
        os.rmdir(probe)
if can_mount_tmpfs():
    config.available_features.add("tmpfs")

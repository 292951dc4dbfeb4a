# lit configuration of the llmc regression tests (FileCheck over llmc-opt and llmc).
import os
import shutil
import sys

import lit.formats

config.name = "llmc"
config.test_format = lit.formats.ShTest(execute_external=True)
config.suffixes = [".mlir", ".test"]
config.excludes = ["Inputs", "unit", "CMakeLists.txt", "lit.cfg.py"]
config.test_source_root = os.path.dirname(__file__)
config.test_exec_root = os.path.join(config.llmc_obj_root, "test")

config.environment["FILECHECK_OPTS"] = "--enable-var-scope"
config.environment["PATH"] = os.pathsep.join(
    [config.llmc_tools_dir, config.llvm_tools_dir, config.environment["PATH"]])
config.substitutions.append(("%llmc_src", config.llmc_src_root))
if config.cuda_toolkit:
    config.available_features.add("cuda-toolkit")
config.substitutions.append(("%python", sys.executable))
# The memory report reads /proc/self/smaps (test/tools/run-memory.test).
if sys.platform.startswith("linux"):
    config.available_features.add("linux")

# MPI jobs (test/comm/): %mpirun is scripts/mpirun.sh, which sets what Open
# MPI needs here (root, oversubscription, shared memory); `mpi` when mpirun
# is installed (scripts/setup.sh: openmpi-bin).
config.substitutions.append(
    ("%mpirun", "bash " + os.path.join(config.llmc_src_root, "scripts/mpirun.sh")))
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

# What the shell benchmarks (dp.sh, mesh.sh, export.sh, startup.sh) share,
# sourced by them: their command line, their work directory and the machine
# facts (bench/common.py prints them).

# bench_parse NAME ARGS...: sets src (the source tree), build (--build DIR,
# default src/build), short (--short), work and keep (--work DIR: kept
# afterwards) and, where the script set bench_repeats (the default count)
# before the call, repeats (--repeats N). -h/--help prints the script's
# header comment; an unknown argument is an error naming NAME.
bench_parse() {
  local name=$1
  shift
  src=$(cd "$(dirname "${BASH_SOURCE[1]}")/.." && pwd)
  build=$src/build
  short=0
  work=
  keep=0
  repeats=${bench_repeats:-}
  while (($#)); do
    case $1 in
      --short) short=1 ;;
      --build) build=$2; shift ;;
      --build=*) build=${1#--build=} ;;
      --work) work=$2; keep=1; shift ;;
      --work=*) work=${1#--work=}; keep=1 ;;
      --repeats | --repeats=*)
        if [[ -z ${bench_repeats:-} ]]; then
          echo "$name: unknown argument '$1' (--help)" >&2; exit 2
        fi
        if [[ $1 == --repeats ]]; then repeats=$2; shift; else repeats=${1#--repeats=}; fi ;;
      -h | --help)
        sed -n '2,/^set -euo/p' "${BASH_SOURCE[1]}" | sed '$d; s/^# \{0,1\}//'
        exit 0 ;;
      *) echo "$name: unknown argument '$1' (--help)" >&2; exit 2 ;;
    esac
    shift
  done
  if [[ -n ${bench_repeats:-} ]] && ! [[ $repeats =~ ^[1-9][0-9]*$ ]]; then
    echo "$name: --repeats: expected a count >= 1, got '$repeats'" >&2
    exit 2
  fi
}

# bench_require_mpi NAME: mpirun and a Python (sets $python, which parses
# the runs' output) must be there; else an error naming NAME, exit 1.
bench_require_mpi() {
  if ! command -v mpirun >/dev/null; then
    echo "$1: mpirun not found; run scripts/setup.sh (openmpi-bin)" >&2
    exit 1
  fi
  python=$(command -v python3 || command -v python || true)
  if [[ -z $python ]]; then
    echo "$1: python3 not found (it parses the runs' output)" >&2
    exit 1
  fi
}

# bench_workdir NAME: makes $work (a new temporary directory unless --work
# named one) and removes it on exit unless --work named it.
bench_workdir() {
  if [[ -z $work ]]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  fi
  mkdir -p "$work"
  trap '((keep)) || rm -rf "$work"' EXIT
}

# bench_machine_facts: the machine lines' raw facts, for bench/common.py's
# print_machine: work/cpu.txt (the CPU's name), flags.txt (its instruction
# set), hostcpu.txt (the CPU LLVM's JIT targets: the llc of the LLVM llmc
# was built with names it, as codegen/KernelToCpu's sys::getHostCPUName)
# and blas.txt (OpenBLAS's build and the core its DYNAMIC_ARCH picked for
# this CPU and OPENBLAS_CORETYPE, asked of the library llmc loads). Needs
# $build, $llmc and $python.
bench_machine_facts() {
  {
    grep -m1 '^model name' /proc/cpuinfo | sed 's/^[^:]*: *//' || echo unknown
  } >"$work/cpu.txt"
  grep -m1 '^flags' /proc/cpuinfo | sed 's/^[^:]*: *//' >"$work/flags.txt" || true
  local llvm_dir llc openblas
  llvm_dir=$(sed -n 's/^LLVM_DIR:PATH=//p' "$build/CMakeCache.txt" 2>/dev/null || true)
  llc=${llvm_dir:+$llvm_dir/../../../bin/llc}
  if [[ -n $llc && -x $llc ]]; then
    "$llc" --version 2>/dev/null | sed -n 's/^ *Host CPU: *//p' >"$work/hostcpu.txt" || true
  fi
  openblas=$(ldd "$llmc" 2>/dev/null | sed -n 's/.*libopenblas[^ ]* => \([^ ]*\) .*/\1/p' | head -n1)
  if [[ -n $openblas ]]; then
    "$python" - "$openblas" >"$work/blas.txt" 2>/dev/null <<'PY' || true
import ctypes, sys
lib = ctypes.CDLL(sys.argv[1])
lib.openblas_get_corename.restype = ctypes.c_char_p
lib.openblas_get_config.restype = ctypes.c_char_p
print(lib.openblas_get_config().decode(), "|", lib.openblas_get_corename().decode())
PY
  fi
}

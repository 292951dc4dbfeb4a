# What the shell benchmarks (dp.sh, export.sh, startup.sh) share, sourced
# by them: their command line and their work directory.

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

# bench_workdir NAME: makes $work (a new temporary directory unless --work
# named one) and removes it on exit unless --work named it.
bench_workdir() {
  if [[ -z $work ]]; then
    work=$(mktemp -d "${TMPDIR:-/tmp}/$1.XXXXXX")
  fi
  mkdir -p "$work"
  trap '((keep)) || rm -rf "$work"' EXIT
}

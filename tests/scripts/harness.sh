# What the tests of scripts/ share (sourced, after `set -uo pipefail`):
#   source harness.sh CASE [SCRATCH_DIR]  sets `case`, `scratch` (emptied; without one a temporary
#                                         directory, removed at exit) and `failures`
#   fail MSG...                  counts a failure and says it on stderr
#   run NAME CMD...              CMD's stdout and stderr to SCRATCH/NAME.out and .err; its exit
#                                status in $rc
#   expect_rc NAME CODE          $rc is CODE (else the tail of NAME's stderr is shown)
#   expect_text NAME out|err TEXT  NAME's stdout or stderr holds TEXT (a fixed string)
#   verdict NAME                 exits 1 naming the count of failures, or says NAME CASE passed
# (ctest runs each case with a scratch directory in the build tree; by hand a temporary one.)
case=${1:-}
scratch=${2:-}
if [[ -z $scratch ]]; then
  scratch=$(mktemp -d)
  trap 'rm -rf "$scratch"' EXIT
else
  rm -rf "$scratch"
  mkdir -p "$scratch"
fi

failures=0
fail() {
  echo "FAIL [$case]: $*" >&2
  failures=$((failures + 1))
}
run() {
  local name=$1
  shift
  "$@" > "$scratch/$name.out" 2> "$scratch/$name.err"
  rc=$?
}
expect_rc() { [[ $rc == "$2" ]] || fail "$1: exit $rc, expected $2; stderr: $(tail -c 600 "$scratch/$1.err")"; }
expect_text() {
  grep -qF -- "$3" "$scratch/$1.$2" || fail "$1: std$2 lacks \"$3\"; it holds: $(head -c 600 "$scratch/$1.$2")"
}
verdict() {
  if ((failures)); then
    echo "$1 $case: $failures failure(s)" >&2
    exit 1
  fi
  echo "$1 $case: passed"
}
